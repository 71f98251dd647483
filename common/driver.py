# The connection driver: every decision a shell would otherwise make itself.
#
# Theory of operation
# -------------------
# The Broker turns input into output bytes; the Driver decides what the
# shell does with them and when. A shell (cpython_host/server.py on asyncio,
# firmware/shell.py on MicroPython) is left with what touches the platform:
# accept, read into a buffer, write, half-close, close, pause reading, sleep,
# and the socket and TLS objects. It tells the driver what happened and the
# driver answers by calling methods of a small per-connection object the
# shell hands over at accept (its "handle", like aioquic's protocol calling
# its transport):
#
#     handle.write(data)       send bytes; never blocks (the shell buffers).
#                              `data` is valid only during the call (it is
#                              the broker's output buffer, reused): send it
#                              or copy it (asyncio's transport.write does
#                              one or the other, not so uvloop's: the host
#                              copies; MicroPython's Stream.write copies
#                              into its out_buf)
#     handle.half_close()      output done: FIN after what is buffered, keep
#                              reading (the driver discards what comes)
#     handle.close()           close now, after what is buffered
#     handle.abort()           close now, dropping what is buffered
#     handle.pending()         bytes still buffered (0 = drained)
#     handle.pause_reading()   stop reading this peer / resume_reading()
#
# Callbacks rather than returned lists of actions: the per-input path then
# allocates nothing the broker does not (no action tuples per read), and a
# rule that needs the platform's state (is the buffer drained?) asks for it
# at the moment it applies.
#
# The shell calls, in the driver:
#     connection_made(handle, peer, accepted) -> cid (-1: abort it at once)
#     data_received(cid, data)  then flush() when it likes (the host hands
#                               its reads to common/turns.py, which calls
#                               it and says when to flush);
#                               flush() -> True: call it again on the next
#                               turn of the loop (a retained replay goes on);
#                               flush(False): no store sync (turns.py)
#     wants_flush()             whether flush() has anything to do
#     hold(cid, why, on)        pause reading cid while a reason of the
#                               shell's holds it (turns.py: HELD_INPUT)
#     set_paused(cid, paused)   its write buffer crossed a water mark
#     connection_lost(cid)      the socket is gone
#     tls_failed()              a TLS handshake failed (counted; the shell logs why)
#     close(cid)                end it for a reason of the shell's own (a
#                               WebSocket close frame): closed at the next
#                               flush as the broker's closes are
#     tick() -> ms              at the deadline it last returned (or sooner)
#     wake = callable           (the shell sets it) called when a deadline
#                               came in before that one: run tick() soon
#     shutdown() -> ms, then abort_all() if connections are left after ms
#
# Rules kept here, once:
# - Flush: each dirty connection's output goes out in one write; a closing
#   one then half-closes. With store_sync = always, in two rounds: first
#   what may leave before the store's sync (QoS 0/1 PUBLISHes to
#   subscribers), then the sync and what waited for it (every ack:
#   common/broker/output.py, docs/persistence.md).
# - Close: half-close, then linger until the peer's EOF or `close_linger`
#   seconds, then close, or abort if the output still has not drained.
#   Closing a socket with unread input makes TCP send a reset, which can
#   destroy a final CONNACK or DISCONNECT, hence the linger. A connection
#   closed because its peer fell silent (Output.is_silent: keep-alive,
#   connect timeout) has nothing to drain and is closed at once.
# - Backpressure: a connection whose write buffer is above its high-water
#   mark is paused in the core (its output stays there, bounded by the
#   broker's limits) AND not read, so a client that sends without reading
#   cannot make the core pile acknowledgements up for it. A publisher the
#   broker throttles (its messages pile up in an online subscriber's queue)
#   is not read either, until the broker releases it; what it had already
#   sent waits in the frame reader and runs on release. A connection with a
#   retained replay pending (common/broker/replay.py) is not read either until
#   the replay ends. Reading resumes when no reason holds (`held`).
# - Replay: each flush first lets the broker go on with the retained replays
#   whose output drained, then writes; flush() answers True while one can go
#   on (its output not paused), and the shell flushes again on the next turn
#   of its loop, the other connections' input and output in between.
# - Containment: an exception out of the broker for one connection is a bug
#   in the core; it is logged and that connection aborted, every other
#   client carries on. An exception in the timers is logged and the clock
#   keeps running.
# - Shutdown: broker.shutdown (v5 clients hear DISCONNECT 0x8B), flush,
#   close every connection as above, wait `shutdown_timeout`, abort the rest.
# - store_sync = batch: the store is synced every store_sync_ms; always:
#   before an ack leaves (flush), and at each tick() what no ack waited for.
# - $SYS: published every sys_interval seconds (common/broker/sys_topics.py).
#
# Clock. The shell gives a function returning millisecond ticks
# (time.ticks_ms on MicroPython, which wraps), which the driver calls at each
# entry point (the broker never reads a clock); they are masked to 30 bits
# and compared with compat.ticks_diff. The whole seconds the broker's MQTT
# timers use are counted from them here (`now`), starting at 1.
#
# Deadlines. tick() returns the ms until the earliest of: the broker's next
# connection deadline (keep-alive, connect timeout: conn_due), its next
# session timer (session_due), the next release of a client held back for
# its rate limits (rate_due), a linger end, the next batch sync and the
# next $SYS, at most MAX_SLEEP_MS. The cap is what lets a deadline set while
# the shell sleeps go unannounced: every deadline input can set is at least
# a second away (1.5 x a keep-alive of >= 1 s, the connect timeout, whole
# second session timers, close_linger), so the next wake still sees it in
# time; and a wake with nothing due costs a few comparisons, not a scan.
# The exceptions: a connection handed over after its accept (`accepted`, a
# TLS handshake later) may be due sooner; the shell then calls tick() again.
# And a rate hold set by input is released within ms (ratelimit.py: a
# step of 2-20 ms): when a flush finds rate_due before the tick the shell sleeps
# until, it calls `wake` (the shell's, if it set one: run tick() soon, not
# from inside the call); without one the release waits for that tick.

from common.compat import TICKS_MASK, const, print_exception, ticks_deadline, ticks_diff, ticks_sooner

MAX_SLEEP_MS = const(1000)

# linger[cid] besides a deadline: not closing, and closed (linger over or
# aborted; waiting for the shell's connection_lost).
_OPEN = const(0)
_CLOSED = const(-1)

# Driver.held bits: why a connection's reading is paused.
_HELD_OUTPUT = const(1)
_HELD_THROTTLE = const(2)
_HELD_REPLAY = const(4)
HELD_INPUT = const(8)  # common/turns.py: input of its own waits for its turn


class Driver:
    def __init__(self, broker, ticks_ms, close_linger, shutdown_timeout, heap=None):
        """`ticks_ms`: the shell's ms clock; close_linger, shutdown_timeout in s;
        `heap`: a function giving the heap figure $SYS shows, or None."""
        self.broker = broker
        self.output = broker.output  # what is sent, and the store's sync gate
        self.ticks_ms = ticks_ms
        self.linger_ms = int(close_linger * 1000)
        self.shutdown_ms = int(shutdown_timeout * 1000)
        self.heap = heap
        self.handles = []  # cid -> the shell's handle, None = no connection
        self.linger = []  # cid -> _OPEN, _CLOSED or the linger deadline (ms ticks)
        # cid -> why its reading is paused: _HELD_OUTPUT (its write buffer is
        # full) | _HELD_THROTTLE (the broker throttles it as a publisher) |
        # _HELD_REPLAY (a retained replay is pending for it) | HELD_INPUT.
        self.held = []
        self.throttled = []  # the cids paused here for the broker's throttle
        self.replaying = []  # the cids paused here for a pending replay
        self.linger_due = 0  # earliest linger deadline (ms ticks), 0 = none
        self.wake_at = 0  # the tick the shell sleeps until (what tick() last returned), 0 = in tick()
        self.wake = None  # the shell's: tick() must run before wake_at (a rate hold's release)
        self.open = 0  # connections with a handle
        self.mark = ticks_ms() & TICKS_MASK  # the tick at which self.now began
        self.now = 1  # whole seconds, for the broker
        s = broker.settings
        self.sync_ms = self.output.batch_ms
        self.sync_at = ticks_deadline(self.mark, self.sync_ms) if self.sync_ms else 0
        self.sys_interval = s.sys_interval
        self.sys_at = 0  # s; the first tick publishes
        self.publish_sys = None
        if s.sys_interval > 0:
            # Imported only when on: a board (sys_interval 0 by default)
            # keeps the code and its strings out of its heap.
            from common.broker.sys_topics import publish_sys

            self.publish_sys = publish_sys
            self.sys_at = self.now
        self.edge = None  # sparkplug_group: the gateway's own Sparkplug edge node
        self.free_heap = None  # a board's free heap figure (a function; the edge node's metric), None: none
        self.bridge_runners = []  # the bridges running (common/bridge/runner.py): their backlogs are metrics
        if s.sparkplug_group:
            from common.broker.spb_node import EdgeNode  # (only when on)

            self.edge = EdgeNode(broker, s)

    # ------------------------------------------------------------ clock

    def clock(self):
        """Read the shell's clock: the ms ticks now; advances self.now (s)."""
        t = self.ticks_ms() & TICKS_MASK
        if ((t - self.mark) & TICKS_MASK) >= 1000:
            self._next_second(t)
        return t

    def _next_second(self, t):
        # Whole seconds passed since `mark`. The clock must be read at least
        # every 2**30 ms (12 days); tick() runs at least every second.
        seconds = ((t - self.mark) & TICKS_MASK) // 1000
        self.now += seconds
        self.mark = (self.mark + seconds * 1000) & TICKS_MASK

    def restore(self, wall):
        """Load the broker's store (once, before serving); `wall`: time.time()."""
        self.clock()
        return self.broker.restore(self.now, wall)

    def set_security(self, users, acl, allow_anonymous, listeners=None):
        """Install the users, ACL and anonymous switch, and the listeners' own
        (`listeners`: key -> listener_policy.ListenerPolicy; security_files.set_security):
        at start and on a reload; what it changes for connected clients
        (a shared subscription's messages handed over) goes out now."""
        self.clock()
        from common.broker.security_files import set_security  # (start-up only on a board)

        set_security(self.broker, users, acl, allow_anonymous, self.now, listeners)
        self.flush()

    # ------------------------------------------------------ connections

    def connection_made(self, handle, peer=None, accepted=None):
        """A socket was accepted: its connection id, or -1 (abort it at once).

        `peer`: what the shell knows of the other end (Broker.connection_made).
        `accepted`: the shell's ticks_ms() at the accept, when it hands the
        connection over only later (after a TLS handshake): the connect
        timeout then counts from the accept, so the handshake spends it too."""
        ms = self.clock()
        if accepted is not None:
            ms = accepted & TICKS_MASK
        cid = self.broker.connection_made(self.now, ms, peer)
        if cid < 0:
            return cid
        handles = self.handles
        while len(handles) <= cid:
            handles.append(None)
            self.linger.append(_OPEN)
            self.held.append(0)
        handles[cid] = handle
        self.linger[cid] = _OPEN
        self.held[cid] = 0
        self.open += 1
        return cid

    def tls_failed(self):
        """A TLS handshake failed or stalled (the shell logged why): counted
        for $SYS (clients/tls_failed) like every other refusal."""
        self.broker.stats.tls_failed += 1

    def data_received(self, cid, data):
        """Bytes read from connection `cid`; the shell flushes when it likes."""
        if self.linger[cid]:
            return  # closing: the rest of the input is discarded
        # clock(), inlined: the per-input path pays for no extra call.
        ms = self.ticks_ms() & TICKS_MASK
        if ((ms - self.mark) & TICKS_MASK) >= 1000:
            self._next_second(ms)
        try:
            self.broker.data_received(cid, data, self.now, ms)
        except Exception as e:
            # The core turns every bad input into a close by itself: this
            # is a bug in it. Contained to this connection.
            self.broker.log(40, "core error on connection #%d: %r; aborting it", (cid, e))
            print_exception(e)
            self.linger[cid] = _CLOSED
            self.handles[cid].abort()

    def set_paused(self, cid, paused):
        """The shell's write buffer for `cid` went above high / below low water."""
        handle = self.handles[cid]
        if handle is None or self.linger[cid]:
            return
        self.output.set_paused(cid, paused)
        self.hold(cid, _HELD_OUTPUT, paused)

    def hold(self, cid, why, on):
        """Pause reading `cid` while any reason holds it."""
        held = self.held[cid]
        now_held = held | why if on else held & ~why
        self.held[cid] = now_held
        if now_held and not held:
            self.handles[cid].pause_reading()
        elif held and not now_held:
            self.handles[cid].resume_reading()

    def _follow(self, wanted, mine, why):
        # Pause the connections the broker holds for `why` (the publishers it
        # throttles, those with a pending replay), resume those it released
        # and run what they had already sent (it waits in the frame reader),
        # even while their output is paused: only new input waits for that.
        for cid in wanted:
            if cid not in mine and self.handles[cid] is not None and not self.linger[cid]:
                mine.append(cid)
                self.hold(cid, why, True)
        i = 0
        while i < len(mine):
            cid = mine[i]
            if cid in wanted:
                i += 1
                continue
            del mine[i]
            if self.handles[cid] is not None and not self.linger[cid]:
                self.hold(cid, why, False)
                self.data_received(cid, b"")

    def close(self, cid):
        """The shell ends connection `cid` for a reason of its own (its
        WebSocket layer: the peer's close frame, a text frame): for the
        session the network connection is gone (a will is published), and it
        closes as the broker's closes do at the next flush (half-close,
        linger). Nothing if it is closing already."""
        if self.handles[cid] is None or self.linger[cid]:
            return
        self.clock()
        self.broker.close_id(cid, self.now)

    def connection_lost(self, cid):
        """The socket of `cid` is closed (by the peer, an error or us)."""
        if cid >= len(self.handles) or self.handles[cid] is None:
            return
        self.handles[cid] = None
        self.linger[cid] = _OPEN
        self.held[cid] = 0
        if cid in self.throttled:
            self.throttled.remove(cid)
        if cid in self.replaying:
            self.replaying.remove(cid)
        self.open -= 1
        self.clock()
        try:
            self.broker.connection_lost(cid, self.now)
        except Exception as e:  # a core bug; see data_received
            self.broker.log(40, "core error closing connection #%d: %r", (cid, e))
            print_exception(e)

    # ------------------------------------------------------------ output

    def wants_flush(self):
        """Whether flush() has anything to do: output or a close waiting, a
        replay going on, a throttle changed. (A closed connection rarely
        leaves any: the shell then spends no loop turn on a flush.)"""
        b = self.broker
        return bool(self.output.dirty() or b.replaying or b.throttle_changed or b.replay_changed)

    def flush(self, sync=True):
        """Write each dirty connection's output once; start the closes.

        True if a retained replay can go on: the shell calls flush() again
        on the next turn of its loop."""
        # With `store_sync = always`, output that waits for the store's sync
        # (common/broker/output.py: every ack, all but QoS 0/1 PUBLISHes) goes in a
        # second round, after the sync; the first takes what may leave before
        # it, so a subscriber's deliveries are on their way while the store
        # syncs. `sync` False: no sync and no second round (what waits stays
        # for a later flush: common/turns.py's per-input flushes, whose sync
        # the loop turn's inputs share). With no output waiting, nothing is
        # synced: a change no ack waits for (a delivery's progress, a QoS 0
        # message retained) is synced with the next ack's, or by tick()
        # within MAX_SLEEP_MS.
        broker = self.broker
        if broker.replaying:
            broker.run_replays(self.now)
        while broker.throttle_changed or broker.replay_changed:
            # (resumed input may change them again)
            if broker.take_throttle_changes():
                self._follow(broker.throttled, self.throttled, _HELD_THROTTLE)
            if broker.take_replay_changes():
                self._follow(broker.replaying, self.replaying, _HELD_REPLAY)
        self._write_round(True)
        if sync and self.output.waiting:
            self._write_round(False)
        due = broker.rate_due
        if due and self.wake_at and ticks_diff(due, self.wake_at) < 0 and self.wake is not None:
            self.wake_at = due  # (once)
            self.wake()
        return broker.replays_waiting() if broker.replaying else False

    def _write_round(self, early):
        # One round of Output.next_dirty: each connection's output in one
        # write; then a closing one half-closes.
        output = self.output
        handles = self.handles
        linger = self.linger
        cid = output.next_dirty(early)
        while cid >= 0:
            data = output.take(cid)
            handle = handles[cid]  # every cid the broker names came from connection_made
            if handle is not None and not linger[cid]:  # (else gone, or half-closed: nothing more may go out)
                if data:
                    handle.write(data)  # may end in connection_lost: then not closing
                if output.is_closing(cid):
                    self._start_close(cid, handle, output.is_silent(cid))
            cid = output.next_dirty(early)

    def _start_close(self, cid, handle, silent=False):
        deadline = ticks_deadline(self.clock(), self.linger_ms)
        self.linger[cid] = deadline
        self.linger_due = ticks_sooner(self.linger_due, deadline)
        if silent and not handle.pending():
            handle.close()  # a silent peer sent nothing to drain: no linger
        else:
            handle.half_close()

    def _end_lingers(self, ms):
        # Close the connections whose linger is over; the next linger_due.
        due = 0
        linger = self.linger
        for cid in range(len(linger)):
            deadline = linger[cid]
            if deadline <= 0:
                continue
            if ticks_diff(ms, deadline) < 0:
                due = ticks_sooner(due, deadline)
                continue
            # The peer neither closed its side nor read its output in time.
            # Output still buffered means it is not reading: a close would
            # wait for it forever, so abort.
            linger[cid] = _CLOSED
            handle = self.handles[cid]
            if handle.pending():
                handle.abort()
            else:
                handle.close()
        self.linger_due = due

    # ------------------------------------------------------------ timers

    def tick(self):
        """Run what is due; the ms until the next deadline (<= MAX_SLEEP_MS)."""
        ms = self.clock()
        now = self.now
        broker = self.broker
        self.wake_at = 0
        try:
            broker.tick(now, ms)
            if self.sync_at and ticks_diff(ms, self.sync_at) >= 0:
                self.sync_at = ticks_deadline(ms, self.sync_ms)
                self.output.sync()
            self.output.sync_pending()  # store_sync = always: what no ack waited for (flush)
            if self.sys_at and now >= self.sys_at:
                self.sys_at = now + self.sys_interval
                self.publish_sys(broker, now, self.heap() if self.heap is not None else None)
            if self.edge is not None and self.edge.wants(broker, now):
                free = self.free_heap() if self.free_heap is not None else None
                backlogs = [(r.name, r.backlog()) for r in self.bridge_runners]
                self.edge.tick(broker, now, self.heap() if self.heap is not None else None, free, backlogs)
        except Exception as e:  # a core bug must not stop the clock
            broker.log(40, "tick failed: %r", (e,))
            print_exception(e)
        if self.linger_due and ticks_diff(ms, self.linger_due) >= 0:
            self._end_lingers(ms)
        wait = 1 if self.flush() else self.next_deadline(ms)  # (1: a replay goes on: soon again)
        self.wake_at = ticks_deadline(ms, wait)
        return wait

    def next_deadline(self, ms):
        """The ms from tick `ms` until something is due, at most MAX_SLEEP_MS."""
        wait = MAX_SLEEP_MS
        for due in (self.broker.conn_due, self.broker.rate_due, self.linger_due, self.sync_at):
            if due:
                d = ticks_diff(due, ms)
                if d < wait:
                    wait = d
        # Whole-second timers, from the ms already gone of this second.
        # A session timer fires when now > session_due, $SYS when now >= sys_at.
        gone = (ms - self.mark) & TICKS_MASK
        due = self.broker.session_due
        if due:
            d = (due + 1 - self.now) * 1000 - gone
            if d < wait:
                wait = d
        if self.sys_at:
            d = (self.sys_at - self.now) * 1000 - gone
            if d < wait:
                wait = d
        return wait if wait > 0 else 1  # due now: tick() just ran it; no busy loop

    # ---------------------------------------------------------- shutdown

    def shutdown(self):
        """Start the shutdown; the ms to wait for the connections to close.

        The shell then waits until `open` is 0 or that time passed, calling
        tick() meanwhile if its timer no longer runs, and then abort_all().
        """
        self.clock()
        self.sync_at = 0
        self.sys_at = 0
        if self.edge is not None:
            self.edge.death(self.broker, self.now)  # before the clients are closed
            self.edge = None
        self.broker.shutdown(self.now)
        self.flush()
        handles = self.handles
        for cid in range(len(handles)):
            handle = handles[cid]
            if handle is not None and not self.linger[cid]:
                self._start_close(cid, handle)  # anything the core did not already close
        return self.shutdown_ms

    def abort_all(self):
        """Abort every connection still open (the end of a shutdown)."""
        if self.open:
            self.broker.log(30, "shutdown: %d connection(s) did not close in time; aborting them", (self.open,))
        handles = self.handles
        for cid in range(len(handles)):
            handle = handles[cid]
            if handle is not None:
                self.linger[cid] = _CLOSED
                handle.abort()

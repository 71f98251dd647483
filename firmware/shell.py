# The MicroPython network shell: asyncio streams around the sans-I/O core.
#
# Theory of operation
# -------------------
# One Broker (common/broker.py) makes every MQTT decision; this module moves
# bytes and time, as cpython_host/server.py does on CPython, within a
# microcontroller's means:
#
# Slots. The shell may hold `max_sockets` sockets, the listener included
# (the lwIP limit of the firmware, docs/boards.md). Each of the other
# max_sockets - 1 is a Slot made at start-up with its read buffer, so
# accepting a client allocates only the socket's stream and its task.
#
# Listener. A connection beyond the free slots, or one the core refuses
# (connection_made -> -1), is accepted and closed at once: the socket goes
# back to lwIP instead of sitting in the backlog. The core itself keeps a
# few connections beyond max_connections to answer their CONNECT with
# CONNACK 0x03 / 0x89 (Broker.connection_made, REFUSAL_SLOTS); the board
# files size max_connections below the slots so one slot at least is left
# for that polite answer.
#
# Reading. One task per connection awaits Stream.readinto() into the slot's
# preallocated buffer and feeds broker.data_received(); then flush().
#
# Writing, bounded. MicroPython's Stream.write buffers without bound, so the
# shell never queues output there behind the socket: flush() takes a
# connection's output only when its previous write has drained. A write
# goes straight to the socket (non-blocking); if the kernel (lwIP) takes it
# all, that is the end of it. If it does not, the rest is handed to a drain
# task and the connection is "blocked": the core is told
# broker.set_paused(cid, True) at once, so it keeps that client's output to
# itself, drops QoS 0 beyond max_out_buffer (counted) and queues QoS 1/2 in
# the session (max_inflight, max_queued_messages / bytes); and the shell
# stops reading that client, so a client that sends but never reads cannot
# make the core pile up acknowledgements for it. When the drain completes the
# core is resumed and the connection's output flushed. A slow reader thus
# costs at most one output chunk here plus max_out_buffer + its inflight
# window in the core, and never slows anyone else.
#
# Clock. One task calls broker.tick(now()) once a second (keep-alive, will
# delay, session expiry), ends lingering closes, runs the callback the
# firmware hangs on it (the watchdog feed), and collects garbage so the
# heap is laid out again every second rather than when it is exhausted.
#
# Closing. When the core marks a connection closing, its last output is
# written and drained; then the shell half-closes where the port can
# (socket.shutdown; the unix and lwIP ports of 1.29 have none), and keeps
# reading and discarding input until the peer closes or `close_linger` s
# passed, and closes. Closing a socket with unread input makes TCP (lwIP
# too) send a reset, which can destroy the final CONNACK / DISCONNECT.
#
# Stop. stop() closes the listener, calls broker.shutdown(now) (v5 clients
# hear DISCONNECT 0x8B), closes every connection as above and waits up to
# `shutdown_timeout` s before aborting the rest.
#
# Internals used: asyncio.core._io_queue.queue_read (the same call
# Stream.read and the stock Server use) to wait for the listening socket to
# be readable; MicroPython has no public awaitable accept.

import asyncio
import gc
import time

LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}


class Log:
    """Lines on stdout: `LEVEL siskin: text` (the board's REPL or the unix log)."""

    def __init__(self, level="info"):
        self.level = LEVELS.get(level, 20)

    def log(self, level, text):
        if level >= self.level:
            name = "DEBUG" if level < 20 else "INFO" if level < 30 else "WARNING" if level < 40 else "ERROR"
            print("%s siskin: %s" % (name, text))

    def core(self, level, text):
        # The core's logger: Broker.logger(level, text).
        self.log(level, text)


# --------------------------------------------------------------------- clock

_clock = [None, 1, 0]  # last ticks_ms, seconds, milliseconds carried


def now():
    """Whole seconds since start, as the core wants, from the wrapping ms ticks.

    The one clock of the firmware. It needs a call at least every 2**29 ms
    (6 days; the timer task calls it every second). Expiry across a restart
    uses the wall clock once, at restore (firmware/app.py).
    """
    c = _clock
    t = time.ticks_ms()
    last = c[0]
    c[0] = t
    if last is not None:
        ms = c[2] + time.ticks_diff(t, last)
        c[1] += ms // 1000
        c[2] = ms % 1000
    return c[1]


def _readable(sock):
    # An awaitable: park the current task until `sock` is readable.
    yield asyncio.core._io_queue.queue_read(sock)


# --------------------------------------------------------------------- slots


class Slot:
    """One connection slot: a preallocated read buffer and its bookkeeping."""

    def __init__(self, index, bufsize):
        self.index = index
        self.buf = bytearray(bufsize)
        self.mv = memoryview(self.buf)
        self.resume = asyncio.Event()
        self.reset()

    def reset(self):
        self.sock = None  # None: the slot is free
        self.stream = None
        self.cid = -1
        self.task = None  # the reader
        self.drain_task = None
        self.blocked = False  # a write is draining: take no more output
        self.paused = False  # the core is paused and reading stopped
        self.closing = False  # closing: output done, input discarded
        self.linger_until = 0


class Server:
    def __init__(self, broker, opts, host, port, log):
        self.broker = broker
        self.opts = opts
        self.host = host
        self.port = port
        self.log = log
        self.slots = []
        for i in range(opts["max_sockets"] - 1):
            self.slots.append(Slot(i, opts["read_buffer"]))
        self.free = list(self.slots)
        self.by_cid = [None] * len(self.slots)  # cid -> Slot
        self.open = 0
        self.refused = 0
        self.lsock = None
        self.accept_task = None
        self.clock_task = None
        self.stopping = False
        self.stop_event = asyncio.Event()
        self.on_tick = None  # callable() run every second (watchdog feed)
        self.heap_next = 0
        broker.set_logger(log.core, log.level)

    # ---------------------------------------------------------- lifecycle

    def start(self):
        """Listen and start the timer; returns the bound port."""
        import socket

        addr = socket.getaddrinfo(self.host, self.port)[0][-1]
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(addr)
        s.listen(self.opts["backlog"])
        s.setblocking(False)
        self.lsock = s
        self.broker.tick(now())  # starts the uptime clock
        self.accept_task = asyncio.create_task(self._accept_loop())
        self.clock_task = asyncio.create_task(self._clock())
        return self.port

    async def serve(self):
        """Run until stop() is requested; then shut down gracefully."""
        self.start()
        s = self.broker.settings
        self.log.log(
            20,
            "listening on %s:%d (MQTT 3.1.1 + 5.0; %d sockets: %d clients + %d for refusals)"
            % (self.host, self.port, len(self.slots) + 1, s.max_connections, len(self.slots) - s.max_connections),
        )
        await self.stop_event.wait()
        await self.stop("stop requested")

    def request_stop(self):
        self.stop_event.set()

    async def stop(self, reason):
        if self.stopping:
            return
        self.stopping = True
        self.log.log(20, "shutting down (%s): %d connection(s)" % (reason, self.open))
        started = time.ticks_ms()
        for task in (self.accept_task, self.clock_task):
            if task is not None and task is not asyncio.current_task():
                task.cancel()
        if self.lsock is not None:
            self.lsock.close()
            self.lsock = None
        self.broker.shutdown(now())
        self.flush()
        for slot in self.slots:
            if slot.sock is not None and not slot.closing:
                self._start_close(slot)
        deadline = time.ticks_add(started, int(self.opts["shutdown_timeout"] * 1000))
        while self.open and time.ticks_diff(deadline, time.ticks_ms()) > 0:
            await asyncio.sleep_ms(50)
            self._end_lingers(now())
        for slot in self.slots:
            if slot.sock is not None:
                self._finish(slot, slot.sock)
        self.log.log(20, "shutdown complete in %d ms" % time.ticks_diff(time.ticks_ms(), started))

    # ------------------------------------------------------------ accept

    async def _accept_loop(self):
        lsock = self.lsock
        while True:
            await _readable(lsock)
            try:
                sock, _addr = lsock.accept()
            except OSError:
                continue  # the peer gave up before we got to it
            self._accepted(sock)

    def _accepted(self, sock):
        broker = self.broker
        slot = self.free.pop() if self.free and not self.stopping else None
        cid = broker.connection_made(now()) if slot is not None else -1
        if cid < 0:
            # Beyond every slot (or the core's refusal slots): close at once,
            # so the socket goes back to lwIP.
            if slot is not None:
                self.free.append(slot)
            self.refused += 1
            sock.close()
            self.log.log(30, "refused a connection: %d sockets in use" % (self.open + 1))
            return
        sock.setblocking(False)
        slot.sock = sock
        slot.stream = asyncio.StreamReader(sock)
        slot.cid = cid
        if cid >= len(self.by_cid):
            self.by_cid.extend([None] * (cid + 1 - len(self.by_cid)))
        self.by_cid[cid] = slot
        self.open += 1
        slot.task = asyncio.create_task(self._serve(slot, sock))
        self.log.log(10, "connection #%d opened (slot %d)" % (cid, slot.index))

    # ------------------------------------------------------------ reading

    async def _serve(self, slot, sock):
        broker = self.broker
        stream = slot.stream
        mv = slot.mv
        size = len(mv)
        cid = slot.cid
        try:
            while slot.sock is sock:
                if slot.paused and not slot.closing:
                    slot.resume.clear()
                    await slot.resume.wait()
                    continue
                n = await stream.readinto(mv)
                if n is None:
                    continue  # woken without data
                if not n or slot.sock is not sock:
                    break  # EOF (or aborted meanwhile)
                if slot.closing:
                    continue  # draining before close: input is discarded
                try:
                    broker.data_received(cid, mv if n == size else mv[:n], now())
                except Exception as e:  # a core bug: contain it to this connection
                    self.log.log(40, "core error on connection #%d: %r; aborting it" % (cid, e))
                    break
                self.flush()
        except OSError:
            pass  # reset by the peer
        finally:
            self._finish(slot, sock)

    # ------------------------------------------------------------ writing

    def flush(self):
        """Write each dirty connection's output if its last write drained."""
        broker = self.broker
        by_cid = self.by_cid
        for cid in broker.take_dirty():
            slot = by_cid[cid] if cid < len(by_cid) else None
            if slot is None or slot.closing:
                broker.take_output(cid)  # gone or half-closed: nothing more goes out
                continue
            if not slot.blocked:
                self._service(slot)

    def _service(self, slot):
        broker = self.broker
        cid = slot.cid
        data = broker.take_output(cid)
        if data and not self._write(slot, data):
            return
        if broker.is_closing(cid) and slot.sock is not None and not slot.closing:
            self._start_close(slot)

    def _write(self, slot, data):
        """Write at once what the socket takes; False if the connection died."""
        try:
            n = slot.sock.write(data)
        except OSError:
            self._abort(slot)
            return False
        if n is None:
            n = 0
        if n >= len(data):
            return True
        # The socket's send buffer is full: the rest drains in a task and the
        # core keeps this client's output to itself meanwhile.
        slot.blocked = True
        if not slot.paused:
            slot.paused = True
            self.broker.set_paused(slot.cid, True)
        slot.drain_task = asyncio.create_task(self._drain(slot, slot.sock, memoryview(data)[n:]))
        return True

    async def _drain(self, slot, sock, rest):
        stream = slot.stream
        ok = True
        try:
            stream.write(rest)
            await stream.drain()
        except OSError:
            ok = False
        if slot.sock is not sock:
            return  # finished meanwhile
        slot.drain_task = None
        slot.blocked = False
        if not ok:
            self._abort(slot)
            return
        if slot.closing:
            self._half_close(slot)
            return
        if slot.paused:
            slot.paused = False
            self.broker.set_paused(slot.cid, False)
            slot.resume.set()
        self._service(slot)
        self.flush()

    # ------------------------------------------------------------ closing

    def _start_close(self, slot):
        slot.closing = True
        slot.linger_until = now() + self.opts["close_linger"]
        slot.resume.set()  # a paused reader goes back to reading (and discarding)
        if not slot.blocked:
            self._half_close(slot)

    def _half_close(self, slot):
        shutdown = getattr(slot.sock, "shutdown", None)
        if shutdown is not None:
            try:
                shutdown(1)  # SHUT_WR: FIN after the output
            except OSError:
                pass

    def _end_lingers(self, t):
        for slot in self.slots:
            if slot.sock is not None and slot.closing and t >= slot.linger_until:
                # The peer neither closed nor (if blocked) read its output.
                self._finish(slot, slot.sock)

    def _abort(self, slot):
        if slot.sock is not None:
            self._finish(slot, slot.sock)

    def _finish(self, slot, sock):
        """Close `sock` and free its slot (once; a reused slot is left alone)."""
        if slot.sock is not sock or sock is None:
            return
        cid = slot.cid
        current = asyncio.current_task()
        for task in (slot.task, slot.drain_task):
            if task is not None and task is not current:
                task.cancel()  # off the I/O queue before the socket closes
        try:
            sock.close()
        except OSError:
            pass
        slot.reset()
        self.free.append(slot)
        self.by_cid[cid] = None
        self.open -= 1
        try:
            self.broker.connection_lost(cid, now())
        except Exception as e:  # a core bug; see _serve
            self.log.log(40, "core error closing connection #%d: %r" % (cid, e))
        self.log.log(10, "connection #%d closed" % cid)
        self.flush()  # a will may have been published

    # -------------------------------------------------------------- clock

    async def _clock(self):
        broker = self.broker
        report = self.opts["heap_report"]
        while True:
            await asyncio.sleep_ms(1000 - time.ticks_ms() % 1000)
            t = now()
            try:
                broker.tick(t)
                self._end_lingers(t)
                self.flush()
            except Exception as e:  # a core bug must not stop the clock
                self.log.log(40, "tick failed: %r" % (e,))
            if self.on_tick is not None:
                self.on_tick()
            gc.collect()
            if report and t >= self.heap_next:
                self.heap_next = t + report
                self.report_heap(t)

    def report_heap(self, t):
        st = self.broker.stats
        print(
            "heap t=%d free=%d alloc=%d open=%d refused=%d sent=%d received=%d dropped_qos0=%d queue_full=%d"
            % (
                t,
                gc.mem_free(),
                gc.mem_alloc(),
                self.open,
                self.refused,
                st.messages_sent,
                st.messages_received,
                st.dropped_qos0,
                st.dropped_queue_full,
            )
        )

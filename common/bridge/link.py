"""A bridge's local connection through the driver (the Runner's, runner.py).

Theory of operation
-------------------
`Link` is the driver's handle for the bridge's in-memory connection
(write / half_close / close / abort / pending / pause_reading /
resume_reading, as a socket's handle) and the one place that moves bytes
between the Bridge (bridge.py) and the driver (common/driver.py, handed in:
this module imports neither the driver nor a shell):

- what the driver writes to the handle goes into the bridge's local client
  at once (this runs inside the driver's flush), and the runner is asked
  to `pump()` soon (its `wake` callable): never re-entering the driver;
- `pump()` opens or ends the local connection as the bridge wants
  (Bridge.sync_local), feeds the local client's output into
  driver.data_received, returns the upstream client's output for the
  runner to write, and publishes $SYS/broker/bridge/<name>/... at a state
  change;
- a local connection the broker ended (a takeover of its client id ...) is
  opened again one second later, not at once (two could take turns);
- `sample()` notes how many messages have arrived in the local session so
  far (Arrivals), so that the age of the oldest one still waiting can be
  told without a timestamp per message.
"""

from common.broker.delivery import RELEASED
from common.client.client import CONNECTED
from common.compat import ticks_deadline, ticks_diff
from common.inprocess import InProcessHandle

ARRIVAL_SAMPLES = 32  # (ms, count) pairs kept: halved in resolution when full


class Arrivals:
    """When the n-th message arrived in a FIFO queue, roughly: samples of the
    count of arrivals so far, at most one a second, thinned (every other one
    dropped) when full, so they span any time with ARRIVAL_SAMPLES pairs.
    The queue's head is arrival number departed + 1; the first sample whose
    count reaches it was taken after it came (its age is at least that old)."""

    def __init__(self):
        self.times = []
        self.counts = []
        self.step_ms = 1000  # samples closer than this replace the last one

    def note(self, ms, count):
        times = self.times
        counts = self.counts
        if counts and counts[-1] >= count:
            return  # nothing arrived since the last sample
        if len(times) >= 2 and ticks_diff(ms, times[-2]) < self.step_ms:
            # Within a step of the one before: the last sample moves on (a
            # later bound for what it counts, never a wrong one).
            times[-1] = ms
            counts[-1] = count
            return
        times.append(ms)
        counts.append(count)
        if len(times) > ARRIVAL_SAMPLES:
            # Keep the first (the oldest known) and every other one after it,
            # the last among them; then twice the step.
            keep = range(2, len(times), 2)
            self.times = [times[0]] + [times[i] for i in keep]
            self.counts = [counts[0]] + [counts[i] for i in keep]
            self.step_ms *= 2

    def age(self, ms, n):
        """Seconds since arrival number `n` (at least), 0 when not sampled yet."""
        counts = self.counts
        for i in range(len(counts)):
            if counts[i] >= n:
                # Arrived after sample i-1 and by sample i: the lower bound.
                return ticks_diff(ms, self.times[i]) // 1000
        return 0


def local_peer(name):
    """The peer of bridge `name`'s local connection, as the broker sees it:
    (address, identity, loopback). No socket has such an address, so the
    broker's grants to it (login.client_rules) reach no other client."""
    return ("bridge " + name, "bridge:" + name, True)


class Link(InProcessHandle):
    def __init__(self, bridge, driver, ticks_ms, wake, flush):
        self.bridge = bridge
        self.driver = driver
        self.ticks_ms = ticks_ms  # the shell's clock, masked to 30 bits
        self.wake = wake  # the shell pumps soon (not now)
        self.flush = flush  # the shell flushes the driver soon
        self.cid = -1
        self.lost = -1  # a connection the broker closed: connection_lost owed (at the next pump)
        self.held = False  # the driver does not read us (pause_reading)
        self.paused_until = 0  # ticks: no local connection before then (0 none)
        self.stopping = False
        self.ages = Arrivals()

    # ------------------------------------------------ the driver's handle

    def write(self, data):
        # A copy: the client's handling may re-enter the driver, whose next
        # take_output reuses the buffer `data` is.
        self.bridge.local.data_received(bytes(data), self.ticks_ms())
        self.wake()

    def pause_reading(self):
        self.held = True

    def resume_reading(self):
        self.held = False
        self.wake()

    def _ended(self):
        # The broker closed the local connection. Inside its flush: the
        # driver hears connection_lost at the next pump.
        if self.cid < 0:
            return
        b = self.bridge
        if b.local_lost is not None and not self.stopping:
            self.paused_until = ticks_deadline(self.ticks_ms(), 1000)
        b.local_closed()
        self.lost = self.cid
        self.cid = -1
        self.wake()

    # ---------------------------------------------------------------- pump

    def pump(self):
        """Move the bridge's bytes; the upstream output (bytes or None)."""
        b = self.bridge
        driver = self.driver
        if self.lost >= 0:
            driver.connection_lost(self.lost)
            self.lost = -1
            self.flush()
        if b.sync_local() and self.cid < 0 and not self.stopping and self._may_open():
            self._open()
        if self.cid >= 0 and not self.held:
            out = b.local.take_output()
            if out:
                driver.data_received(self.cid, out)
                self.flush()
        if b.local_lost is not None and self.cid >= 0:
            self._ended()  # the local client gave up on this connection
            self.wake()
        if b.state_changed:
            b.state_changed = False
            self.publish_sys()
        return b.up.take_output()

    def _may_open(self):
        if not self.paused_until:
            return True
        if ticks_diff(self.ticks_ms(), self.paused_until) < 0:
            return False
        self.paused_until = 0
        return True

    def _open(self):
        b = self.bridge
        # Its user is "bridge:<name>", proved like a TLS identity (no password).
        cid = self.driver.connection_made(self, local_peer(b.name))
        if cid < 0:
            b.log(40, "bridge %s: the broker refused its local connection (max_connections); again in 1 s" % b.name)
            self.paused_until = ticks_deadline(self.ticks_ms(), 1000)
            return
        self.cid = cid
        # Its window is the bridge's `window`, not a device's max_inflight:
        # else the upstream window could never fill (docs/bridge.md).
        self.driver.broker.connections.by_id[cid].extra().window_cap = b.local.receive_max
        session = self.driver.broker.sessions.find(b.local.client_id)
        if session is None:
            b.local_open(self.ticks_ms())
        else:
            b.local_open(self.ticks_ms(), list(session.subs), list(session.qos2_in))

    def next_deadline(self):
        """The bridge's timers (run now) and a paused local connection: ticks, 0 none."""
        due = self.bridge.tick(self.ticks_ms())
        if self.paused_until and (not due or ticks_diff(self.paused_until, due) < 0):
            due = self.paused_until
        return due

    # ----------------------------------------------------------------- $SYS

    def drop(self):
        """End the local connection now (the runner restarts the bridge)."""
        if self.cid >= 0:
            cid = self.cid
            self.cid = -1
            self.lost = -1
            self.driver.connection_lost(cid)
            self.flush()

    def queued(self):
        """(messages, bytes, held) of the bridge's local session: waiting in
        its queue, and handed to the bridge not yet acknowledged."""
        session = self.driver.broker.sessions.find(self.bridge.local.client_id)
        if session is None or session.queue is None:
            return 0, 0, 0
        held = 0
        for d in session.inflight:
            if d.state() != RELEASED:  # (a released one was acknowledged: departed)
                held += 1
        return session.queue.count, session.queued_bytes, held

    def sample(self, ms):
        """Note the local session's arrivals so far (the age of its oldest message)."""
        queued, _, held = self.queued()
        self.ages.note(ms, self.bridge.departed + queued + held)

    def oldest_age(self, ms):
        """The age (s) of the oldest message the bridge has not handed on, -1 none."""
        queued, _, held = self.queued()
        if not queued and not held:
            return -1
        return self.ages.age(ms, self.bridge.departed + 1)

    def publish_sys(self):
        """$SYS/broker/bridge/<name>/... now (retained QoS 0)."""
        broker = self.driver.broker
        queued, queued_bytes, _ = self.queued()
        ms = self.ticks_ms()
        now = self.driver.now
        for topic, text in self.bridge.sys_values(queued, queued_bytes, ms, self.oldest_age(ms)):
            broker.publish(topic, text.encode(), 0, True, now)
        self.notify(self.bridge.up.state == CONNECTED)
        self.flush()

    def notify(self, connected):
        """notifications: the link's state here (notify.py), when it changed."""
        n = self.bridge.notifier
        payload = n.due_here(connected) if n is not None else None
        if payload is not None:
            self.driver.broker.publish(n.topic, payload, 1, True, self.driver.now)

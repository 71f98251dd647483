"""A bridge's local connection through the driver: what both shells share.

Theory of operation
-------------------
`Link` is the driver's handle for the bridge's in-memory connection
(write / half_close / close / abort / pending / pause_reading /
resume_reading, as a socket's handle) and the one place that moves bytes
between the Bridge (bridge.py) and the driver (common/driver.py, handed in:
this module imports neither the driver nor a shell):

- what the driver writes to the handle goes into the bridge's local client
  at once (this runs inside the driver's flush), and the shell is asked to
  `pump()` soon (its `wake` callable): never re-entering the driver;
- `pump()` opens or ends the local connection as the bridge wants
  (Bridge.sync_local), feeds the local client's output into
  driver.data_received, returns the upstream client's output for the shell
  to write, and publishes $SYS/broker/bridge/<name>/... at a state change;
- a local connection the broker ended (a takeover of its client id ...) is
  opened again one second later, not at once (two could take turns).

The shells run two loops per bridge: one connects and reads the upstream
stream (Bridge.next_address, up_open, up.data_received, up_failed), the
other waits for `wake` or the next deadline (Bridge.tick) and pumps.
"""

from common.compat import ticks_deadline, ticks_diff


class Link:
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

    # ------------------------------------------------ the driver's handle

    def write(self, data):
        # A copy: the client's handling may re-enter the driver, whose next
        # take_output reuses the buffer `data` is.
        self.bridge.local.data_received(bytes(data), self.ticks_ms())
        self.wake()

    def half_close(self):
        self._ended()

    def close(self):
        self._ended()

    def abort(self):
        self._ended()

    def pending(self):
        return 0

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
        cid = self.driver.connection_made(self, ("bridge " + b.name, "bridge:" + b.name, True))
        if cid < 0:
            b.log(40, "bridge %s: the broker refused its local connection (max_connections); again in 1 s" % b.name)
            self.paused_until = ticks_deadline(self.ticks_ms(), 1000)
            return
        self.cid = cid
        session = self.driver.broker.sessions.find(b.local.client_id)
        b.local_open(self.ticks_ms(), list(session.subs) if session is not None else ())

    def next_deadline(self):
        """The bridge's timers (run now) and a paused local connection: ticks, 0 none."""
        due = self.bridge.tick(self.ticks_ms())
        if self.paused_until and (not due or ticks_diff(self.paused_until, due) < 0):
            due = self.paused_until
        return due

    # ----------------------------------------------------------------- $SYS

    def queued(self):
        """(messages, bytes) waiting in the bridge's local session."""
        session = self.driver.broker.sessions.find(self.bridge.local.client_id)
        if session is None or session.queue is None:
            return 0, 0
        return session.queue.count, session.queued_bytes

    def publish_sys(self):
        """$SYS/broker/bridge/<name>/... now (retained QoS 0)."""
        broker = self.driver.broker
        queued, queued_bytes = self.queued()
        now = self.driver.now
        for topic, text in self.bridge.sys_values(queued, queued_bytes):
            broker.publish(topic, text.encode(), 0, True, now)
        self.flush()

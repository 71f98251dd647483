"""One bridge at work: its task, its upstream connection, and the supervisor.

Theory of operation
-------------------
Both shells run a bridge the same way, through this Runner; what they
supply is a small runtime (cpython_host/bridge.py, firmware/bridge.py):

    runtime.now()                ms ticks (30 bits, common/compat.py)
    runtime.wall()               s since 1970 (0: unknown; SAS tokens need it)
    runtime.open(address, runner)
                                 start connecting to "host:port" (TLS as the
                                 settings say) and return the connection at
                                 once; then call runner.up_opened(conn),
                                 runner.up_received(conn, data) per read and
                                 runner.up_ended(conn, why) when it ends or
                                 fails (a connection may end without opening)
    conn.write(data)             -> None, or why it failed (the stream is then
                                 taken for dead)
    conn.close()                 (idempotent; no callback owed after it)
    await runtime.sleep_until(due)
                                 return at tick `due` (0: within a second), or
                                 sooner at runtime.wake()
    runtime.wake(), runtime.flush()
                                 pump soon; flush the driver soon

One task per bridge runs `run()`: `step()` (the bridge's timers, the Link's
pump, a new connection when the bridge wants one, the upstream output,
$SYS every sys_interval, the connect timeout of TCP and TLS) and a sleep
until the next deadline or a wake-up. The runtime's callbacks only feed
the bridge and wake the task.

Containment. Whatever the runtime or the core throws at a bridge is
contained here, and nothing of it reaches the broker or its clients:

- a failed write or a stream that ends is a lost connection: logged once
  (the bridge's own line), back-off, reconnect;
- anything else (a bug, MemoryError, a runtime that raised) is a fault: the
  supervisor logs it (the first of a kind with its traceback, then every
  hundredth), counts it ($SYS faults, restarts), closes the upstream and the
  local connection, builds a fresh Bridge from the settings (its counters
  carried over) and lets the back-off pass before it connects again. What
  was acknowledged lives in the local session's store, not in the Bridge:
  the local session resends it. The task itself never ends but at stop().

$SYS never says "connected" for a connection that is not: the state is the
client's, and every way a connection ends goes through Bridge.up_failed.
"""

from common.bridge.bridge import Bridge
from common.bridge.link import Link, local_peer
from common.bridge.rules import acl_grants
from common.client.client import CONNECTED
from common.compat import print_exception, ticks_deadline, ticks_diff, ticks_sooner

_CARRIED = (
    "sent", "received", "dead_lettered", "dropped", "departed", "faults", "restarts", "failures", "addr_index", "up_gen",
)  # fmt: skip


def _describe(e):
    return "%s: %s" % (type(e).__name__, e) if str(e) else type(e).__name__


class Runner:
    def __init__(self, settings, driver, runtime, log, entropy):
        self.settings = settings
        self.driver = driver
        self.runtime = runtime
        self.log = log  # log(level, text)
        self.entropy = entropy
        self.name = settings.name
        self.bridge = Bridge(settings, log, entropy)
        self.link = Link(self.bridge, driver, runtime.now, runtime.wake, runtime.flush)
        # The broker never slows a publisher for this session's queue: only
        # its budget and queue_full apply (docs/bridge.md).
        driver.broker.routing.unthrottled.append(self.bridge.local.client_id)
        driver.bridge_runners.append(self)
        if settings.sparkplug_host and not driver.broker.settings.queue_qos0_offline:
            # Held, the local session is offline: a QoS 0 message for it
            # (an NBIRTH, as Sparkplug sends it) is dropped, not queued.
            log(
                30,
                "bridge %s: sparkplug_host with queue_qos0_offline = false: QoS 0 messages (an NBIRTH) are dropped while the primary host is away (messages/dropped/qos0); set [limits] queue_qos0_offline = true"
                % self.name,
            )
        # Under an ACL its local client may read its "out" filters and write
        # its "in" topics (common/broker/login.py client_rules).
        self.peer = local_peer(self.name)[0]
        self.grants = self.acl_grants
        driver.broker.bridge_grants[self.peer] = self.grants
        self.conn = None  # the runtime's upstream connection, None = none
        self.opened = False  # up_opened came for it
        self.open_at = 0  # ticks of runtime.open()
        self.sys_at = 0  # ticks of the next periodic $SYS, 0 = now
        self.stopping = False
        self.last_fault = ""
        self.task = None  # the shell's handle of the task that runs run()

    # ------------------------------------------------ the runtime's callbacks

    def up_opened(self, conn):
        if conn is not self.conn:
            conn.close()  # (an attempt given up on)
            return
        self.opened = True
        self._guard(self._opened)

    def _opened(self):
        self.bridge.up_open(self.runtime.now(), self.runtime.wall())
        self.runtime.wake()

    def up_received(self, conn, data):
        if conn is self.conn:
            self._guard(self._received, data)

    def _received(self, data):
        self.bridge.up.data_received(data, self.runtime.now())
        self.runtime.wake()

    def up_ended(self, conn, why):
        if conn is self.conn:
            self._guard(self._ended, why)

    def _ended(self, why):
        self.conn = None
        self.opened = False
        b = self.bridge
        b.up_failed(b.close_wanted or why, self.runtime.now())
        self.runtime.wake()

    def _guard(self, fn, arg=None):
        try:
            if arg is None:
                fn()
            else:
                fn(arg)
        except Exception as e:
            self.fault("the upstream's events", e)

    # --------------------------------------------------------------- the task

    async def run(self):
        """The bridge's task: step, sleep, again, until stop(); the supervisor."""
        runtime = self.runtime
        while not self.stopping:
            try:
                await runtime.sleep_until(self.step())
            except Exception as e:  # (CancelledError is a BaseException: it ends the task)
                if self.stopping:
                    return
                self.fault("the bridge task", e)
                try:
                    await runtime.sleep_until(self.bridge.retry_at)
                except Exception as e2:
                    self.fault("the runtime's sleep", e2)

    def step(self):
        """One turn: timers, the local connection, the upstream; the next deadline (ticks, 0 none)."""
        runtime = self.runtime
        b = self.bridge
        link = self.link
        due = link.next_deadline()
        now = runtime.now()
        conn = self.conn
        if conn is None:
            if not self.stopping:
                address = b.next_address(now)
                if address is not None:
                    self.opened = False
                    self.open_at = now
                    self.conn = runtime.open(address, self)
        elif not self.opened:
            timeout = b.up.connect_timeout_ms
            if ticks_diff(now, self.open_at) >= timeout:
                self.drop("timed out (TCP and TLS, %d ms)" % timeout)
            else:
                due = ticks_sooner(due, ticks_deadline(self.open_at, timeout))
        out = link.pump()
        if out and self.conn is not None and self.opened:
            why = self.conn.write(out)
            if why is not None:
                self.drop(why)
        if b.close_wanted is not None and self.conn is not None:
            self.drop(b.close_wanted)
        link.sample(now)
        interval = self.driver.broker.settings.sys_interval
        if interval:
            if not self.sys_at or ticks_diff(now, self.sys_at) >= 0:
                self.sys_at = ticks_deadline(now, interval * 1000)
                link.publish_sys()
            due = ticks_sooner(due, self.sys_at)
        if self.conn is None and not b.paused:
            due = ticks_sooner(due, b.retry_at)
        return due

    def drop(self, why):
        """Close the upstream connection (it failed, or the bridge wants it gone)."""
        self._let_go()
        self.bridge.up_failed(why, self.runtime.now())

    def _let_go(self):
        """Close the upstream connection and forget it (its late events are ignored)."""
        conn = self.conn
        self.conn = None
        self.opened = False
        if conn is not None:
            try:
                conn.close()
            except Exception as e:  # a runtime that cannot close: the connection is dropped all the same
                self.log(30, "bridge %s: closing the upstream connection failed: %s" % (self.name, _describe(e)))

    # ------------------------------------------------------------ supervisor

    def fault(self, where, e):
        """Something threw: logged, counted, the bridge rebuilt, the back-off."""
        b = self.bridge
        b.faults += 1
        text = _describe(e)
        first = text != self.last_fault
        self.last_fault = text
        if first or b.faults % 100 == 0:
            self.log(
                40,
                "bridge %s: fault in %s (%d so far): %s; the bridge restarts after its back-off"
                % (self.name, where, b.faults, text),
            )
            if first:
                self._traceback(e)
        self.restart("a fault: " + text)

    def _traceback(self, e):
        try:
            import io

            buf = io.StringIO()
            print_exception(e, buf)
            self.log(40, "bridge %s: %s" % (self.name, buf.getvalue().rstrip()))
        except Exception:  # (the traceback is a courtesy: never a second fault)
            pass

    def restart(self, why):
        """A fresh Bridge (counters carried over) after closing both connections."""
        old = self.bridge
        self._let_go()
        try:
            self.link.drop()
        except Exception as e:
            self.log(40, "bridge %s: ending the local connection failed: %s" % (self.name, _describe(e)))
        b = Bridge(self.settings, self.log, self.entropy)
        for name in _CARRIED:
            setattr(b, name, getattr(old, name))
        b.up.retried = old.up.retried
        b.paused = old.paused
        b.failures += 1
        b.last_error = why
        self.bridge = b
        self.link.bridge = b
        b.restarts += 1
        b.back_off(self.runtime.now())
        self.log(
            30,
            "bridge %s: restarted (%d so far; %s); connecting again in %d ms"
            % (self.name, b.restarts, why, max(0, ticks_diff(b.retry_at, self.runtime.now()))),
        )
        self.runtime.wake()

    # ---------------------------------------------------------- the operator

    def pause(self):
        """No upstream connection until resume() (queued messages stay queued)."""
        b = self.bridge
        b.paused = True
        if self.conn is not None:
            self._disconnect()
            self.drop("paused")
        b.state_changed = True
        self.runtime.wake()

    def resume(self):
        b = self.bridge
        if b.paused:
            b.paused = False
            b.failures = 0
            b.retry_at = self.runtime.now() or 1
            b.state_changed = True
            self.runtime.wake()

    def stop(self):
        """At shutdown or removal: DISCONNECT upstream, both connections closed
        (the local session stays, with its queue); the task ends at its next turn."""
        self.stopping = True
        self.link.stopping = True
        self.bridge.stopping = True
        if self.conn is not None:
            self._disconnect()
            self._let_go()
        self.link.notify(False)
        broker = self.driver.broker
        routing = broker.routing
        if self.bridge.local.client_id in routing.unthrottled:
            routing.unthrottled.remove(self.bridge.local.client_id)
        if broker.bridge_grants.get(self.peer) is self.grants:  # (not a successor's)
            del broker.bridge_grants[self.peer]
        if self in self.driver.bridge_runners:
            self.driver.bridge_runners.remove(self)
        # Its local connection ends now: with the task stopped nobody would
        # hear the broker close it, and a shutdown would wait out its timeout.
        self.link.drop()
        self.runtime.wake()

    def acl_grants(self):
        """What its local client may read and write under an ACL (rules.acl_grants)."""
        return acl_grants(self.bridge.rules)

    def resubscribe(self):
        """After new ACL rules (SIGHUP): the local subscriptions refused or
        removed are asked for again (Bridge.resubscribe)."""
        session = self.driver.broker.sessions.find(self.bridge.local.client_id)
        if self.bridge.resubscribe(session.subs if session is not None else ()):
            self.runtime.wake()

    def restart_with(self):
        """Before a new Runner takes over this bridge (its settings changed):
        stopped, its local connection ended; the local session and its queue
        stay for the new one."""
        self.stop()

    def retire(self):
        """A bridge removed at run time: stopped, its local session ended and
        what it held dead-lettered (counted, logged), its $SYS topics cleared.
        The number of messages dead-lettered."""
        self.stop()
        broker = self.driver.broker
        n = retire_session(broker, self.bridge.local.client_id, self.driver.now, self.log, self.name)
        for topic, _ in self.bridge.sys_values(0, 0, self.runtime.now()):
            broker.publish(topic, b"", 0, True, self.driver.now)  # (an empty retained message clears it)
        self.runtime.flush()
        return n

    def _disconnect(self):
        up = self.bridge.up
        if up.state == CONNECTED and self.opened:
            if self.bridge.notifier is not None:
                self.bridge.notifier.tell_upstream(up, False)  # (DISCONNECT discards the will)
            up.disconnect()
            out = up.take_output()
            if out:
                self.conn.write(out)

    # ---------------------------------------------------------------- figures

    def backlog(self):
        """Messages waiting to go up: the local session's queue and the bridge's own."""
        return self.link.queued()[0] + len(self.bridge.up.queue)

    def status(self):
        """The bridge's figures for the API and /metrics (a dict)."""
        b = self.bridge
        now = self.runtime.now()
        queued_bytes = self.link.queued()[1]
        inflight, window, since = b.health(now)
        return {
            "name": self.name,
            "state": b.state_name(),
            "address": b.address if b.up.state == CONNECTED else "",
            "queued": self.backlog(),
            "queued_bytes": queued_bytes,
            "oldest_queued_age": self.link.oldest_age(now),
            "inflight": inflight,
            "inflight_max": window if b.up.state == CONNECTED else 0,
            "last_ack_age": since,
            "send_rate": b.rate,
            "sent": b.sent,
            "received": b.received,
            "dead_lettered": b.dead_lettered,
            "dropped": b.dropped,
            "retried": b.up.retried,
            "faults": b.faults,
            "restarts": b.restarts,
            "last_error": b.last_error,
            "refused_subscriptions": [t[0] for t in b.refused],
        }



def retire_session(broker, client_id, now, log, name):
    """End the local session of bridge `name` (removed): its queue is
    dead-lettered, counted and logged, as a removed rule's is. The count."""
    from common.broker.delivery import RELEASED
    from common.broker.session_life import destroy_session

    session = broker.sessions.find(client_id)
    if session is None:
        return 0
    n = session.queue.count
    for d in session.inflight:
        if d.state() != RELEASED:  # (a released one was delivered)
            n += 1
    destroy_session(broker, session, now)
    log(
        30 if n else 20,
        "bridge %s removed: its session %s ended, %d queued message(s) dead-lettered" % (name, client_id, n),
    )
    return n

# The bridge's Runner (common/bridge/runner.py): the one task both shells
# run, through a runtime played here by hand (time, connections, sleeps),
# against a real Driver and broker on the edge and a harness broker
# upstream. Whatever the runtime throws is contained, counted and followed
# by back-off and a reconnect; $SYS never says connected when it is not.
# Runs on CPython and MicroPython.

import unittest

from common.bridge.link import local_peer
from common.bridge.runner import Runner
from common.broker import login, security_files
from common.broker.acl import Acl
from common.broker.settings import new_settings
from common.driver import Driver
from common.mqtt.packets import Connect, Publish, encode_packet
from common.store.storeboot import new_broker
from tests.core.harness import Harness
from tests.core.test_bridge import bridge_settings, payloads


class Halt(BaseException):
    """Ends the runner's task in a test (the runtime's sleep raises it)."""


class Conn:
    """An upstream connection as the runtime gives it: to the cloud harness."""

    def __init__(self, rt, runner, address):
        self.rt = rt
        self.runner = runner
        self.address = address
        self.cid = -1
        self.closed = False
        self.raise_on_write = None  # an exception write() throws (a runtime's bug)
        self.written = 0

    def accept(self):
        """The TCP (and TLS) connect completed."""
        cloud = self.rt.cloud
        self.cid = cloud.broker.connection_made(cloud.now, None, None)
        cloud.clients[self.cid] = self
        self.runner.up_opened(self)

    def receive(self, data):  # (the cloud harness's pump)
        if not self.closed:
            self.runner.up_received(self, bytes(data))

    def write(self, data):
        if self.raise_on_write is not None:
            raise self.raise_on_write
        if self.closed:
            return "the connection is closed"
        self.written += 1
        self.rt.cloud.broker.data_received(self.cid, data, self.rt.cloud.now)
        return None

    def close(self):
        if not self.closed:
            self.closed = True
            if self.cid >= 0:
                self.rt.cloud.broker.connection_lost(self.cid, self.rt.cloud.now)

    def cut(self, why="reset by the peer"):
        """The link dies under it (the runtime reports the end)."""
        self.close()
        self.runner.up_ended(self, why)


class Runtime:
    """What runner.py asks of a shell, turned by hand."""

    def __init__(self, cloud):
        self.cloud = cloud
        self.ms = 1000
        self.conns = []
        self.sleeps = 0
        self.sleep_limit = 0  # sleeps before Halt (0: the first)
        self.sleep_raises = None

    def now(self):
        return self.ms

    def wall(self):
        return 1700000000

    def wake(self):
        pass

    def flush(self):
        pass

    def open(self, address, runner):
        conn = Conn(self, runner, address)
        self.conns.append(conn)
        return conn

    async def sleep_until(self, due):
        self.sleeps += 1
        if self.sleep_raises is not None:
            e = self.sleep_raises
            self.sleep_raises = None
            raise e
        if self.sleeps > self.sleep_limit:
            raise Halt()


class Edge:
    """A Driver and broker with a bridge Runner to the cloud harness."""

    def __init__(self, **table):
        self.cloud = Harness()
        self.broker = new_broker(new_settings({"sys_interval": 1}), lambda n: bytes(n), None)
        self.rt = Runtime(self.cloud)
        self.driver = Driver(self.broker, self.rt.now, 1, 2)
        self.logged = []
        table.setdefault("bridge_bit", False)
        table.setdefault("backoff_min", 1.0)
        table.setdefault("backoff_max", 4.0)
        self.runner = Runner(bridge_settings(**table), self.driver, self.rt, self.log, self.cloud.entropy)

    def log(self, level, text):
        self.logged.append((level, text))

    def turn(self, n=1):
        """`n` turns of the task (step, sleep), then the driver's flush."""
        self.rt.sleeps = 0
        self.rt.sleep_limit = n - 1
        coro = self.runner.run()
        try:
            coro.send(None)
        except Halt:
            pass
        self.driver.flush()
        self.cloud.pump()

    def settle(self):
        for _ in range(10):
            self.turn()

    def connect(self):
        """Settle until connected upstream."""
        self.turn()
        conn = self.rt.conns[-1]
        conn.accept()
        self.settle()
        return conn

    def retained(self, key):
        """$SYS/broker/bridge/cloud/<key> as this broker keeps it (retained)."""
        msg = self.broker.routing.retained.current("$SYS/broker/bridge/cloud/" + key, self.driver.now)
        return None if msg is None else bytes(msg.payload).decode()

    def publish(self, topic, payload, qos=1):
        """A message from a device of the edge (its own in-memory connection)."""
        h = _Handle()
        cid = self.driver.connection_made(h)
        self.driver.data_received(cid, encode_packet(Connect(4, True, 0, "dev"), 4))
        self.driver.data_received(cid, encode_packet(Publish(topic, payload, qos, False, False, 1), 4))
        self.driver.flush()
        self.driver.connection_lost(cid)


class _Handle:
    def write(self, data):
        pass

    def half_close(self):
        pass

    def close(self):
        pass

    def abort(self):
        pass

    def pending(self):
        return 0

    def pause_reading(self):
        pass

    def resume_reading(self):
        pass


class TestSupervisor(unittest.TestCase):
    def test_connects_and_says_so(self):
        e = Edge()
        e.connect()
        self.assertEqual(e.runner.bridge.state_name(), "connected")
        self.assertEqual(e.retained("state"), "connected")
        self.assertIn("siskin-bridge-cloud", e.broker.routing.unthrottled)  # never slows a publisher

    def test_a_write_that_throws_is_contained_and_the_bridge_restarts(self):
        # uvloop's "unable to perform operation on <TCPTransport closed=True>"
        # once killed the task for good.
        e = Edge()
        cons = e.cloud.client(4)
        cons.connect("consumer", clean=False)
        cons.subscribe("edge1/#", 1)
        conn = e.connect()
        conn.raise_on_write = RuntimeError("unable to perform operation on <TCPTransport closed=True>; the handler is closed")
        e.publish("up/x", b"1")
        e.turn()
        b = e.runner.bridge
        self.assertEqual((b.faults, b.restarts), (1, 1))
        self.assertTrue(conn.closed)
        self.assertEqual(b.state_name(), "disconnected")
        errors = [t for lvl, t in e.logged if lvl == 40]
        self.assertIn("fault in the bridge task (1 so far): RuntimeError: unable to perform", errors[0])
        self.assertIn("Traceback", errors[1])  # the first of its kind, with where it came from
        e.turn()
        self.assertEqual(e.retained("state"), "disconnected")  # never "connected" for a dead link
        self.assertEqual(e.retained("faults"), "1")
        # The back-off, then a new connection; what was acknowledged goes up.
        e.rt.ms += 5000
        e.turn()
        self.assertEqual(len(e.rt.conns), 2)
        e.rt.conns[-1].accept()
        e.settle()
        self.assertEqual(e.runner.bridge.state_name(), "connected")
        self.assertEqual(payloads(cons), [b"1"])
        self.assertEqual(e.runner.bridge.sent, 1)

    def test_the_same_fault_again_is_counted_not_logged_again(self):
        e = Edge()
        for _ in range(3):
            e.rt.ms += 10000
            e.turn()
            conn = e.rt.conns[-1]
            conn.raise_on_write = ValueError("bad")
            conn.accept()
            e.turn()
        self.assertEqual(e.runner.bridge.faults, 3)
        self.assertEqual(len([t for lvl, t in e.logged if "fault in" in t]), 1)

    def test_a_sleep_that_throws_is_contained(self):
        e = Edge()
        e.rt.sleep_raises = OSError("the runtime broke")
        e.turn(2)
        self.assertEqual(e.runner.bridge.faults, 1)
        self.assertIn("fault in the bridge task", e.logged[0][1])

    def test_a_failed_write_or_a_cut_is_a_lost_connection_not_a_fault(self):
        e = Edge()
        conn = e.connect()
        conn.cut()
        b = e.runner.bridge
        self.assertEqual(b.faults, 0)
        self.assertEqual(b.state_name(), "disconnected")
        self.assertIn("connection to a:1 lost: reset by the peer", e.logged[-1][1])
        e.turn()
        self.assertEqual(e.retained("state"), "disconnected")
        e.rt.ms += 1000  # the back-off after a connection that had its CONNACK: backoff_min, half random
        e.turn()
        conn2 = e.rt.conns[-1]
        self.assertIsNot(conn2, conn)
        conn2.accept()
        e.settle()
        self.assertEqual(e.retained("state"), "connected")

    def test_a_connect_that_never_completes_times_out_and_its_late_events_are_ignored(self):
        e = Edge(connect_timeout=2.0)
        e.turn()
        conn = e.rt.conns[-1]
        e.rt.ms += 2000
        e.turn()
        self.assertTrue(conn.closed)
        self.assertIn("cannot connect to a:1: timed out (TCP and TLS, 2000 ms)", e.logged[-1][1])
        conn.runner.up_ended(conn, "late")  # the runtime's callback after the runner moved on
        self.assertFalse(any("late" in t for _, t in e.logged))

    def test_pause_and_resume(self):
        e = Edge()
        conn = e.connect()
        e.runner.pause()
        self.assertTrue(conn.closed)
        e.turn()
        self.assertEqual(e.retained("state"), "paused")
        e.rt.ms += 60000
        e.turn()
        self.assertEqual(len(e.rt.conns), 1)  # no new connection while paused
        e.runner.resume()
        e.turn()
        self.assertEqual(len(e.rt.conns), 2)

    def test_stop_says_disconnect_upstream(self):
        e = Edge()
        conn = e.connect()
        e.runner.stop()
        self.assertTrue(conn.closed)
        self.assertNotIn("siskin-bridge-cloud", e.broker.routing.unthrottled)
        up = e.cloud.broker.sessions.find("siskin-cloud")
        self.assertIsNone(up.conn)

    def test_health_figures(self):
        e = Edge()
        e.connect()
        e.publish("up/x", b"1")
        e.settle()
        e.rt.ms += 3000
        status = e.runner.status()
        self.assertEqual(status["state"], "connected")
        self.assertEqual(status["sent"], 1)
        self.assertEqual(status["inflight"], 0)
        self.assertEqual(status["inflight_max"], 20)  # max_inflight (the cloud's Receive Maximum is larger)
        self.assertEqual(status["last_ack_age"], 3)
        self.assertEqual(status["oldest_queued_age"], -1)


class TestOldestQueued(unittest.TestCase):
    def test_the_age_of_the_oldest_waiting_message(self):
        e = Edge()
        conn = e.connect()
        conn.cut()
        e.turn()
        e.publish("up/a", b"1")  # at 1 s
        e.turn()
        e.rt.ms += 10000
        e.publish("up/b", b"2")  # at 11 s
        e.turn()
        e.rt.ms += 5000
        e.turn()
        link = e.runner.link
        self.assertEqual(link.oldest_age(e.rt.ms), 15)  # up/a's
        e.rt.conns[-1].accept()  # (the attempt the back-off let through meanwhile)
        e.settle()
        self.assertEqual(e.runner.bridge.sent, 2)
        self.assertEqual(link.oldest_age(e.rt.ms), -1)  # all gone up


class TestUnderAnAcl(unittest.TestCase):
    """An ACL written for devices: the bridge's local client may still read
    its "out" filters and write its "in" topics (login.client_rules)."""

    DEVICES = "topic readwrite up/#\ntopic read down/#\nuser alice\ntopic read x\n"

    def edge(self, extra=""):
        e = Edge()
        security_files.set_security(e.broker, None, Acl.parse(self.DEVICES + extra, "aclfile"), True, e.driver.now)
        return e

    def test_the_bridge_carries_both_ways_with_no_rule_of_its_own(self):
        e = self.edge()
        cons = e.cloud.client(4)
        cons.connect("consumer")
        cons.subscribe("edge1/#", 1)
        e.connect()
        e.publish("up/a", b"1")
        e.settle()
        self.assertEqual([(m.topic, m.payload) for m in cons.take() if m.ptype == 3], [("edge1/a", b"1")])
        cmd = e.cloud.client(4)
        cmd.connect("cmd")
        cmd.publish("cmd/edge1/x", b"2", 1)
        e.settle()
        self.assertEqual((e.runner.bridge.received, e.runner.bridge.dead_lettered), (1, 0))  # stored here
        self.assertEqual(e.retained("refused_subscriptions"), "-")

    def test_a_deny_rule_refuses_it_loudly_and_new_rules_subscribe_again(self):
        e = self.edge("user bridge:cloud\ntopic deny up/secret\n")
        cons = e.cloud.client(4)
        cons.connect("consumer")
        cons.subscribe("edge1/#", 1)
        e.connect()
        self.assertEqual(e.retained("refused_subscriptions"), "up/#")
        self.assertIn("local subscription up/# refused (0x87)", e.runner.status()["last_error"])
        self.assertEqual(e.runner.status()["refused_subscriptions"], ["up/#"])
        self.assertTrue(any(level == 40 and "refused its subscription up/#" in text for level, text in e.logged))
        security_files.set_security(e.broker, None, Acl.parse(self.DEVICES, "aclfile"), True, e.driver.now)
        e.runner.resubscribe()
        e.settle()
        self.assertEqual(e.retained("refused_subscriptions"), "-")
        e.publish("up/b", b"2")
        e.settle()
        self.assertEqual([(m.topic, m.payload) for m in cons.take() if m.ptype == 3], [("edge1/b", b"2")])
        e.runner.resubscribe()  # nothing missing: nothing asked
        self.assertEqual(len(e.runner.bridge.asked), 0)

    def test_refused_while_the_upstream_is_away_new_rules_subscribe_its_offline_session(self):
        e = self.edge("user bridge:cloud\ntopic deny up/secret\n")
        e.settle()  # no upstream: the local session made once, its subscription refused, offline again
        self.assertEqual(e.retained("refused_subscriptions"), "up/#")
        session = e.broker.sessions.find("siskin-bridge-cloud")
        self.assertNotIn("up/#", session.subs)
        self.assertIsNone(session.conn)
        security_files.set_security(e.broker, None, Acl.parse(self.DEVICES, "aclfile"), True, e.driver.now)
        e.runner.resubscribe()
        e.settle()
        self.assertIn("up/#", session.subs)  # online once to ask, then offline: it queues for the upstream
        self.assertIsNone(session.conn)
        self.assertEqual(e.retained("refused_subscriptions"), "-")
        e.publish("up/c", b"3")
        self.assertEqual(session.queue.count, 1)

    def test_the_grant_is_the_bridge_connections_not_its_user_names(self):
        e = self.edge()
        e.connect()

        user = "bridge:cloud"
        peer = ("192.0.2.7:5000", "bridge:cloud", False)  # a TLS identity that says so: no grant
        self.assertFalse(login.client_rules(e.broker, user, peer, "x").may_subscribe("up/#"))
        peer = local_peer("cloud")
        self.assertTrue(login.client_rules(e.broker, user, peer, "x").may_subscribe("up/#"))
        e.runner.stop()
        self.assertNotIn(local_peer("cloud")[0], e.broker.bridge_grants)


if __name__ == "__main__":
    unittest.main()

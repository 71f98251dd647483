# The administrator's operations (common/broker/admin.py): listings, kick,
# drop session, retained list and clear; and the per-QoS message counters.
# Runs under CPython and MicroPython.

import unittest

from common.broker import admin
from common.mqtt import consts as C
from tests.core.harness import Harness


class TestListings(unittest.TestCase):
    def test_clients_and_sessions(self):
        h = Harness()
        a = h.client(level=5, peer=("192.0.2.7:5000", None, True))
        a.connect("a", keep_alive=30)
        a.subscribe("t/#", qos=1)
        b = h.client()
        b.connect("b", clean=False)
        b.subscribe("x", qos=1)
        b.drop()  # b's session stays, offline
        # Three messages for b's offline session, and one for a in flight.
        p = h.client()
        p.connect("p")
        for i in range(3):
            p.publish("x", b"12345", qos=1, packet_id=i + 1)
        p.publish("t/1", b"hi", qos=1, packet_id=9)
        clients = admin.clients(h.broker)
        self.assertEqual([c["client_id"] for c in clients], ["a", "p"])
        first = clients[0]
        self.assertEqual(first["address"], "192.0.2.7:5000")
        self.assertEqual(first["protocol_level"], 5)
        self.assertEqual(first["keep_alive"], 30)
        self.assertEqual(first["inflight"], 1)
        self.assertEqual(first["subscriptions"], 1)
        sessions = {s["client_id"]: s for s in admin.sessions(h.broker)}
        self.assertEqual(sorted(sessions), ["a", "b", "p"])
        self.assertFalse(sessions["b"]["connected"])
        self.assertTrue(sessions["b"]["persistent"])
        self.assertEqual(sessions["b"]["queued"], 3)
        self.assertEqual(sessions["b"]["queued_bytes"], 3 * len(b"x12345"))
        self.assertEqual(sessions["b"]["subscriptions"], ["x"])
        self.assertEqual(admin.queues(h.broker), (3, 18, 1))

    def test_counters_by_qos(self):
        h = Harness()
        s = h.client()
        s.connect("s")
        s.subscribe("t", qos=2)
        p = h.client()
        p.connect("p")
        p.publish("t", b"0")
        p.publish("t", b"1", qos=1, packet_id=1)
        p.publish("t", b"2", qos=2, packet_id=2)
        p.publish("t", b"2", qos=2, packet_id=3)
        snap = h.broker.snapshot()
        self.assertEqual([snap["messages_received_qos%d" % q] for q in range(3)], [1, 1, 2])
        self.assertEqual([snap["messages_sent_qos%d" % q] for q in range(3)], [1, 1, 2])
        self.assertEqual(snap["messages_received"], 4)
        self.assertEqual(snap["messages_sent"], 4)


class TestActions(unittest.TestCase):
    def test_kick_v5_hears_0x98_and_its_will_goes_out(self):
        h = Harness()
        w = h.client()
        w.connect("watcher")
        w.subscribe("will")
        c = h.client(level=5)
        c.connect("c", will=("will", b"gone", 0, False))
        self.assertTrue(admin.kick(h.broker, "c", h.now))
        h.pump()
        d = c.expect(C.DISCONNECT)
        self.assertEqual(d.reason, C.RC_ADMINISTRATIVE_ACTION)
        self.assertTrue(c.closed)
        self.assertEqual(w.expect(C.PUBLISH).payload, b"gone")
        self.assertFalse(admin.kick(h.broker, "c", h.now))
        self.assertFalse(admin.kick(h.broker, "nobody", h.now))

    def test_kick_311_closes_and_keeps_a_persistent_session(self):
        h = Harness()
        c = h.client()
        c.connect("c", clean=False)
        c.subscribe("x", qos=1)
        self.assertTrue(admin.kick(h.broker, "c", h.now))
        h.pump()
        self.assertTrue(c.closed)
        self.assertEqual(c.take(), [])
        self.assertIsNotNone(h.broker.sessions.find("c"))

    def test_drop_session_connected_and_offline(self):
        h = Harness()
        c = h.client(level=5)
        c.connect("c", clean=False, props=[(C.PROP_SESSION_EXPIRY_INTERVAL, 3600)])
        c.subscribe("x", qos=1)
        self.assertTrue(admin.drop_session(h.broker, "c", h.now))
        h.pump()
        self.assertEqual(c.expect(C.DISCONNECT).reason, C.RC_ADMINISTRATIVE_ACTION)
        self.assertIsNone(h.broker.sessions.find("c"))
        self.assertEqual(h.broker.snapshot()["subscriptions"], 0)
        # Offline, with a queued message.
        h.offline_subscriber("o", "x", drop=True)
        p = h.client()
        p.connect("p")
        p.publish("x", b"m", qos=1, packet_id=1)
        self.assertEqual(admin.queues(h.broker)[0], 1)
        self.assertTrue(admin.drop_session(h.broker, "o", h.now))
        self.assertEqual(admin.queues(h.broker), (0, 0, 0))
        self.assertEqual(h.held()["deliveries"], 0)
        self.assertFalse(admin.drop_session(h.broker, "o", h.now))
        # Reconnecting finds no session.
        o2 = h.client()
        self.assertFalse(o2.connect("o", clean=False).session_present)

    def test_retained_list_and_clear(self):
        h = Harness()
        p = h.client()
        p.connect("p")
        p.publish("a/1", b"one", retain=True)
        p.publish("a/2", b"two!", qos=1, retain=True, packet_id=1)
        p.publish("b", b"x", retain=True)
        self.assertEqual(admin.retained(h.broker, "#", h.now), [("a/1", 3, 0), ("a/2", 4, 1), ("b", 1, 0)])
        self.assertEqual(admin.retained(h.broker, "a/+", h.now), [("a/1", 3, 0), ("a/2", 4, 1)])
        self.assertEqual(admin.clear_retained(h.broker, "a/#", h.now), 2)
        self.assertEqual(admin.retained(h.broker, "#", h.now), [("b", 1, 0)])
        self.assertEqual(h.broker.snapshot()["retained"], 1)
        s = h.client()
        s.connect("s")
        s.subscribe("a/#")
        self.assertEqual(s.take(), [])  # nothing retained there any more
        with self.assertRaises(ValueError):
            admin.retained(h.broker, "a/#/b", h.now)
        with self.assertRaises(ValueError):
            admin.clear_retained(h.broker, "", h.now)


if __name__ == "__main__":
    unittest.main()

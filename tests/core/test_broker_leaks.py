# Everything a client makes the broker hold comes back once the client is
# gone and its session has expired: the check the broker fuzz tests
# (tests/host/test_broker_stateful.py, tests/host/fuzz_broker.py) make after
# each run, here on one fixed run through every kind of holding. Runs under
# CPython and MicroPython.

import unittest

from common.broker.pools import Ring
from common.mqtt import consts as C
from tests.core.harness import FUZZ_SETTINGS, Harness


class TestNothingLeaks(unittest.TestCase):
    def test_pools_back_at_baseline_after_every_session_expired(self):
        h = Harness(**FUZZ_SETTINGS)
        # A persistent 3.1.1 subscriber with a will, which leaves without
        # acknowledging: deliveries in flight and queued behind them.
        sub = h.client()
        sub.connect("a", clean=False, will=("w", b"gone", 1, False))
        sub.subscribe("t/#", 1)
        # A v5 member of a shared group, with a Session Expiry.
        member = h.client(level=5)
        member.connect("b", clean=True, props=[(C.PROP_SESSION_EXPIRY_INTERVAL, 30)])
        member.subscribe("$share/g/t/+", 2)
        member.subscribe("w", 0)
        pub = h.client(level=5)
        pub.connect("c")
        for i in range(6):  # (two QoS 2 awaiting PUBREL: the broker's Receive Maximum)
            pub.publish("t/x", bytes([i]), qos=2 if i >= 4 else 1, packet_id=i + 1)
        pub.publish("t/r", b"kept", qos=1, retain=True, packet_id=9)
        sub.drop()
        member.drop()
        held = h.held()
        self.assertTrue(held["sessions"] and held["subscriptions"] and held["messages"] and held["deliveries"], held)
        self.assertEqual(h.broker.routing.retained.count(), 1)
        pub.disconnect()
        h.advance(FUZZ_SETTINGS["persistent_session_expiry"] + 3)
        held = h.held()
        for part in held:
            self.assertEqual(held[part], 0, held)
        # The retained message is the store's own, and still there.
        self.assertEqual(h.broker.routing.retained.count(), 1)
        self.assertEqual(h.broker.routing.messages.in_use(), 1)

    def test_idle_client_holds_no_qos2_set_and_no_queue_slots(self):
        # What an idle client costs is what it holds before it needs it: the
        # inbound QoS 2 id set and the queue's slots come with their first
        # use (an empty set alone was 216 B per client on the host).
        h = Harness()
        sub = h.client()
        sub.connect("idle", clean=False)
        sub.subscribe("t", 1)
        session = h.broker.sessions.find("idle")
        self.assertEqual(session.qos2_in, ())
        self.assertEqual(len(session.queue.buf), 0)
        pub = h.client()
        pub.connect("pub")
        pub.publish("q2", b"x", qos=2, packet_id=5)
        self.assertIn(5, h.broker.sessions.find("pub").qos2_in)
        sub.drop()  # offline: what is routed to it waits in its queue
        for i in range(6):
            pub.publish("t", bytes([i]), qos=1, packet_id=10 + i)
        self.assertEqual(session.queue.count, 6)
        self.assertEqual([d.msg.payload for d in session.queue.items()], [bytes([i]) for i in range(6)])
        # A new session for the client id starts empty-handed again.
        back = h.client()
        back.connect("pub", clean=True)
        self.assertEqual(h.broker.sessions.find("pub").qos2_in, ())

    def test_ring_made_empty_grows_at_first_push_up_to_its_cap(self):
        ring = Ring(6, 0)
        self.assertEqual(len(ring.buf), 0)
        self.assertIsNone(ring.peek())
        self.assertIsNone(ring.pop())
        for i in range(6):
            self.assertTrue(ring.push(i))
        self.assertFalse(ring.push(6))  # at its cap
        self.assertEqual(len(ring.buf), 6)
        self.assertEqual(ring.clear(), [0, 1, 2, 3, 4, 5])


if __name__ == "__main__":
    unittest.main()

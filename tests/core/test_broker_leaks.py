# Everything a client makes the broker hold comes back once the client is
# gone and its session has expired: the check the broker fuzz tests
# (tests/host/test_broker_stateful.py, tests/host/fuzz_broker.py) make after
# each run, here on one fixed run through every kind of holding. Runs under
# CPython and MicroPython.

import unittest

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


if __name__ == "__main__":
    unittest.main()

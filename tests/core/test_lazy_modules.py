# The broker's code for a feature few connections use is a module of its
# own, loaded by the first connection that needs it, so that a board whose
# clients do not use the feature keeps none of it in its heap (docs/boards.md,
# "What the code takes"; tests/host/test_mpy_cross.py checks that the
# default board start-up leaves them unloaded). Each test here unloads the
# module, shows that plain 3.1.1 traffic leaves it unloaded, then uses the
# feature and checks that the module is loaded and the feature works. On
# both interpreters (tests/upy/run.py).

import sys
import unittest

from common.compat import unload
from common.mqtt import consts as C
from tests.core.harness import Harness


def plain_traffic(h):
    """A 3.1.1 client that connects, subscribes, publishes at QoS 1 and
    leaves cleanly; another that publishes to it."""
    sub = h.client()
    sub.connect("plain-sub")
    sub.subscribe("t/#", 1)
    pub = h.client()
    pub.connect("plain-pub")
    pub.publish("t/1", b"x", qos=1, packet_id=1)
    pub.expect(C.PUBACK)
    sub.expect(C.PUBLISH)
    pub.disconnect()
    return sub


class _NoHeap:
    """Stands in sys.modules for a module that there is no heap to load."""

    def __getattr__(self, name):
        raise MemoryError("no heap for the module")


class TestLazyModules(unittest.TestCase):
    def fresh(self, name, **settings):
        """A broker after `name` was unloaded and plain traffic went through
        it: the module must still not be loaded."""
        unload(name)
        h = Harness(**settings)
        watcher = plain_traffic(h)
        self.assertNotIn(name, sys.modules)
        return h, watcher

    def test_wills_load_with_the_first_will(self):
        h, watcher = self.fresh("common.broker.wills")
        watcher.subscribe("will/#", 1, packet_id=2)
        c = h.client()
        self.assertEqual(c.connect("w", will=("will/w", b"bye", 1, False)).reason, 0)
        self.assertIn("common.broker.wills", sys.modules)
        c.drop()  # [MQTT-3.1.2-8]
        msg = watcher.expect(C.PUBLISH)
        self.assertEqual((msg.topic, msg.payload), ("will/w", b"bye"))

    def test_refusal_loads_with_the_first_refused_connect(self):
        h, _watcher = self.fresh("common.broker.refusal", max_client_id_length=12)
        c = h.client()
        self.assertEqual(
            c.connect("a-client-id-too-long").reason, C.CONNACK_REFUSED_IDENTIFIER_REJECTED
        )  # [MQTT-3.1.3-9]
        self.assertIn("common.broker.refusal", sys.modules)
        self.assertTrue(c.closed)

    def test_refusal_loads_with_the_first_failure(self):
        h, _watcher = self.fresh("common.broker.refusal")
        c = h.client(5)
        c.connect("v5")
        c.send_raw(b"\xc0\x01\x00")  # a PINGREQ with a body: malformed
        self.assertIn("common.broker.refusal", sys.modules)
        self.assertEqual(c.expect(C.DISCONNECT).reason, C.RC_MALFORMED_PACKET)

    def test_a_failure_without_heap_for_refusal_still_closes(self):
        # A board out of heap (Broker.data_received's MemoryError) may not
        # be able to load refusal.py: the connection is closed all the same.
        h, _watcher = self.fresh("common.broker.refusal")
        c = h.client(5)
        c.connect("v5")
        sys.modules["common.broker.refusal"] = _NoHeap()
        try:
            sent = h.broker.fail(h.broker.connections.by_id[c.cid], C.RC_QUOTA_EXCEEDED, h.now, text="out of memory")
        finally:
            del sys.modules["common.broker.refusal"]
        h.pump()
        self.assertEqual(sent, "no code (no heap to load refusal.py)")
        self.assertTrue(c.closed)

    def test_refusal_loads_with_a_first_byte_that_is_not_a_connect(self):
        h, _watcher = self.fresh("common.broker.refusal")
        c = h.client()
        c.send_raw(b"GET / HTTP/1.1\r\n\r\n")  # [MQTT-3.1.0-1]
        self.assertIn("common.broker.refusal", sys.modules)
        self.assertTrue(c.closed)
        self.assertEqual(c.take(), [])  # no CONNACK

    def test_refusal_loads_when_a_keep_alive_expires(self):
        h, _watcher = self.fresh("common.broker.refusal")
        c = h.client(5)
        c.connect("silent", keep_alive=2)
        self.assertNotIn("common.broker.refusal", sys.modules)
        h.advance(4)  # [MQTT-3.1.2-22] 1.5 x its keep-alive without a packet
        self.assertIn("common.broker.refusal", sys.modules)
        self.assertEqual(c.expect(C.DISCONNECT).reason, C.RC_KEEP_ALIVE_TIMEOUT)
        self.assertTrue(c.closed)

    def test_connect_v5_loads_with_the_first_v5_client(self):
        h, _watcher = self.fresh("common.broker.connect_v5", max_inflight_in=7)
        c = h.client(5)
        ack = c.connect("v5", props=[(C.PROP_RECEIVE_MAXIMUM, 3)])
        self.assertIn("common.broker.connect_v5", sys.modules)
        self.assertIn((C.PROP_RECEIVE_MAXIMUM, 7), ack.props)
        self.assertEqual(h.broker.connections.by_id[c.cid].receive_maximum, 3)

    def test_rate_hold_loads_with_the_first_debt(self):
        h, _watcher = self.fresh("common.broker.rate_hold", rate_messages=1000)
        self.assertIsNotNone(h.broker.rates)  # (the buckets are charged all along)
        h2 = Harness(rate_messages=2)
        pub = h2.client()
        pub.connect("flooder")
        self.assertNotIn("common.broker.rate_hold", sys.modules)
        for _ in range(3):
            pub.publish("t/1", b"x")
        self.assertIn("common.broker.rate_hold", sys.modules)
        self.assertIn(pub.cid, h2.broker.throttled)
        self.assertEqual(h2.broker.stats.rate_held_messages, 1)


if __name__ == "__main__":
    unittest.main()

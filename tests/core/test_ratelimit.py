# Rate limits per client (common/broker/ratelimit.py), on both interpreters:
# token buckets of PUBLISHes/s, PUBLISH bytes/s and subscribed filters/s; a
# client in debt is held back (not read: what it sent waits in its frame
# reader) until the next refill pays it, counted per cause and logged with
# its client id; one held back for rate_grace seconds in a row is closed
# (v5 DISCONNECT 0x96, 3.1.1 close); a bystander is served all along.

import unittest

from common.mqtt import consts as C
from common.mqtt.packets import Publish, Subscribe, encode_packet
from tests.core.harness import Harness


def burst(client, n, topic="t", payload=b"x", level=4):
    """`n` QoS 0 PUBLISHes in one read, as a flooding client's socket gives them."""
    data = b"".join([encode_packet(Publish(topic, payload, 0, False, False, 0, None), level) for _ in range(n)])
    client.h.broker.data_received(client.cid, data, client.h.now)
    client.h.pump()


def release(h):
    """What the driver does when the broker releases a held-back client: run
    the input it had kept (broker.throttled -> resume reading)."""
    h.broker.take_throttle_changes()
    for cid in list(h.clients):
        c = h.clients[cid]
        if not c.closed and cid not in h.broker.throttled:
            h.broker.data_received(cid, b"", h.now)
    h.pump()


class TestRateLimits(unittest.TestCase):
    def setUp(self):
        self.lines = []

    def rig(self, level=4, **settings):
        h = Harness(**settings)
        h.broker.set_logger(lambda level, text: self.lines.append(text))
        sub = h.client()
        sub.connect("sub")
        sub.subscribe("#")
        pub = h.client(level)
        pub.connect("flooder")
        return h, sub, pub

    def test_off_by_default(self):
        h = Harness()
        self.assertIsNone(h.broker.rates)

    def test_messages_over_the_rate_wait_for_the_next_second(self):
        h, sub, pub = self.rig(rate_messages=5)
        burst(pub, 12)
        # 5 in the bucket, the 6th puts it in debt: handled, then held back.
        self.assertEqual(len(sub.take()), 6)
        self.assertIn(pub.cid, h.broker.throttled)
        self.assertTrue(h.broker.take_throttle_changes())
        self.assertEqual(h.broker.stats.rate_held_messages, 1)
        self.assertTrue([x for x in self.lines if x.startswith("flooder: over rate_messages 5")])
        h.advance(1)  # +5: out of debt (4), read again
        self.assertNotIn(pub.cid, h.broker.throttled)
        release(h)
        self.assertEqual(len(sub.take()), 5)  # 4 tokens, the 5th into debt: held again
        self.assertIn(pub.cid, h.broker.throttled)
        h.advance(1)
        release(h)
        self.assertEqual(len(sub.take()), 1)  # the last of the 12
        self.assertEqual(h.broker.stats.messages_received, 12)
        self.assertFalse(pub.closed)

    def test_bytes(self):
        h, sub, pub = self.rig(rate_bytes=100)
        burst(pub, 2, payload=b"p" * 150)  # the first (155 B) puts it in debt
        self.assertEqual(len(sub.take()), 1)
        h.advance(1)  # -55 + 100 = 45: read again
        release(h)
        self.assertEqual(len(sub.take()), 1)
        self.assertEqual(h.broker.stats.rate_held_bytes, 2)

    def test_subscribes(self):
        h = Harness(rate_subscribes=2)
        c = h.client()
        c.connect("s")
        data = encode_packet(Subscribe(1, [("a", 0), ("b", 0), ("c", 0)], None), 4)
        data += encode_packet(Subscribe(2, [("d", 0)], None), 4)
        h.broker.data_received(c.cid, data, h.now)
        h.pump()
        self.assertEqual(len(c.take()), 1)  # the second SUBSCRIBE waits
        self.assertEqual(h.broker.stats.rate_held_subscribes, 1)
        h.advance(1)
        release(h)
        self.assertEqual(c.expect(C.SUBACK).packet_id, 2)

    def test_grace_then_v5_disconnect_0x96(self):
        h, sub, pub = self.rig(level=5, rate_messages=2, rate_grace=3)
        other = h.client(5)
        other.connect("bystander")
        for _ in range(4):
            burst(pub, 10, level=5)
            other.publish("calm", b"c")
            h.advance(1)
            release(h)
        got = [p for p in pub.take() if p.ptype == C.DISCONNECT]
        self.assertEqual([p.reason for p in got], [0x96])  # Message rate too high
        self.assertTrue(pub.closed)
        self.assertFalse(other.closed)
        self.assertEqual(h.broker.stats.closed_rate_limited, 1)
        self.assertTrue(
            [x for x in self.lines if x.startswith("closing flooder: over its rate limits for rate_grace 3 s")]
        )
        self.assertEqual(len([m for m in sub.take() if m.topic == "calm"]), 4)

    def test_grace_then_311_close(self):
        h, _sub, pub = self.rig(rate_messages=2, rate_grace=2)
        for _ in range(3):
            burst(pub, 10)
            h.advance(1)
            release(h)
        self.assertTrue(pub.closed)
        self.assertEqual(h.broker.stats.closed_rate_limited, 1)

    def test_a_burst_then_calm_is_not_closed(self):
        h, _sub, pub = self.rig(rate_messages=5, rate_grace=2)
        burst(pub, 8)
        for _ in range(5):
            h.advance(1)
            release(h)
        self.assertFalse(pub.closed)
        self.assertEqual(h.broker.rates.held[pub.cid], 0)

    def test_grace_0_only_holds_back(self):
        h, _sub, pub = self.rig(rate_messages=2, rate_grace=0)
        for _ in range(5):
            burst(pub, 10)
            h.advance(1)
            release(h)
        self.assertFalse(pub.closed)

    def test_a_reused_connection_starts_with_full_buckets(self):
        h, _sub, pub = self.rig(rate_messages=3)
        burst(pub, 5)
        pub.drop()
        c = h.client()
        self.assertEqual(c.cid, pub.cid)
        c.connect("next")
        self.assertEqual(h.broker.rates.tokens[0][c.cid], 3)
        self.assertEqual(h.broker.rates.held[c.cid], 0)


class TestBridgeIsNotLimited(unittest.TestCase):
    def test_what_comes_down_a_bridge_is_not_held_back(self):
        # The bridge's local client publishes what its upstream sends; it is
        # registered in routing.unthrottled (as common/bridge/runner.py does).
        from tests.core.test_bridge import Pair

        p = Pair(edge=Harness(rate_messages=2, rate_grace=1), protocol=5)
        p.edge.broker.routing.unthrottled.append(p.bridge.local.client_id)
        p.connect_up()
        dev = p.edge.client(5)
        dev.connect("dev")
        dev.subscribe("down/#", 1)
        cmd = p.cloud.client(4)
        cmd.connect("cmd")
        for i in range(10):
            cmd.publish("cmd/edge1/x", b"%d" % i, 1, packet_id=i + 1)
            p.settle()
        got = [m.payload for m in dev.take() if m.ptype == C.PUBLISH]
        self.assertEqual(got, [b"%d" % i for i in range(10)])
        self.assertEqual(p.edge.broker.stats.rate_held_messages, 0)
        # Without the registration the same flow is held back (the test can fail).
        p.edge.broker.routing.unthrottled.remove(p.bridge.local.client_id)
        for i in range(10, 20):
            cmd.publish("cmd/edge1/x", b"%d" % i, 1, packet_id=i + 1)
            p.settle()
        self.assertGreater(p.edge.broker.stats.rate_held_messages, 0)


class TestQueueThrottleUntouched(unittest.TestCase):
    def test_rate_holds_do_not_start_the_throttle_escape(self):
        # (Broker.tick: publishers held 30 s for a slow subscriber are read
        # again and the queue throttle is suspended; a rate hold is not that.)
        h = Harness(rate_messages=2, rate_grace=0)
        pub = h.client()
        pub.connect("p")
        lines = []
        h.broker.set_logger(lambda level, text: lines.append(text))
        for _ in range(40):
            burst(pub, 5)
            h.advance(1)
            release(h)
        self.assertFalse(pub.closed)
        self.assertEqual(h.broker.throttle_off_until, 0)
        self.assertFalse([x for x in lines if "does not catch up" in x])

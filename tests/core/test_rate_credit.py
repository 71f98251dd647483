# A read that every bucket of its client holds whole is charged after it
# (common/broker/ratelimit.py: reading, settle), on both interpreters: the
# tokens end where charging each PUBLISH would leave them, a read that may
# reach a limit is charged PUBLISH by PUBLISH (the hold falls where it
# would), another client of a shared bucket meets it charged, and a read
# cut short by a protocol error is charged for what was handled.

import unittest

from common.mqtt.packets import Publish, encode_packet
from tests.core.harness import Harness


def publishes(n, topic="t", payload=b"x"):
    return [encode_packet(Publish(topic, payload, 0, False, False, 0, None), 4) for _ in range(n)]


def body_bytes(frames):
    # What a PUBLISH is charged in bytes: its frame after the fixed header
    # (these frames are under 128 B: a one-byte remaining length).
    return sum([len(f) - 2 for f in frames])


class TestChargedAfterTheRead(unittest.TestCase):
    def rig(self, **settings):
        h = Harness(**settings)
        pub = h.client()
        pub.connect("pub")
        calls = []
        rates = h.broker.rates
        charge = rates.charge

        def counting(broker, conn, kind, amount, now):
            calls.append((kind, amount))
            charge(broker, conn, kind, amount, now)

        rates.charge = counting
        return h, pub, rates, calls

    def read(self, h, client, frames):
        h.broker.data_received(client.cid, b"".join(frames), h.now)
        h.pump()

    def test_a_read_its_buckets_hold_is_charged_once_after_it(self):
        h, pub, rates, calls = self.rig(rate_messages=1000, rate_bytes=100000, listener_rate_messages=1000)
        frames = publishes(10, payload=b"p" * 20)
        self.read(h, pub, frames)
        self.assertEqual(calls, [(0, 10), (1, body_bytes(frames))])
        self.assertEqual(rates.tokens[0][pub.cid], 1000 - 10)
        self.assertEqual(rates.tokens[1][pub.cid], 100000 - body_bytes(frames))
        self.assertEqual(rates.listeners.tokens[0][rates.listener_of[pub.cid]], 1000 - 10)
        self.assertEqual(rates.free, -1)  # (no read is charged after it now)

    def test_a_read_that_may_reach_a_limit_is_charged_publish_by_publish(self):
        # 30 PUBLISHes of 6 B: 180 B could hold 45; the bucket holds 40.
        h, pub, rates, calls = self.rig(rate_messages=40)
        frames = publishes(30)
        self.assertEqual(len(b"".join(frames)), 180)
        self.read(h, pub, frames)
        self.assertEqual(calls, [(0, 1), (1, 4)] * 30)
        self.assertEqual(rates.tokens[0][pub.cid], 10)
        self.assertNotIn(pub.cid, h.broker.throttled)
        # Past the limit: held at the PUBLISH that puts it in debt, as always.
        self.read(h, pub, publishes(30))
        self.assertIn(pub.cid, h.broker.throttled)
        self.assertEqual(h.broker.stats.messages_received, 30 + 11)
        self.assertEqual(rates.tokens[0][pub.cid], -1)

    def test_the_next_client_of_a_shared_bucket_meets_it_charged(self):
        h, pub, rates, calls = self.rig(listener_rate_messages=100)
        other = h.client()
        other.connect("other")
        self.read(h, pub, publishes(30))
        slot = rates.listener_of[pub.cid]
        self.assertEqual(rates.listeners.tokens[0][slot], 70)
        # 70 left: 30 PUBLISHes of 6 B fit (180 / 4 = 45), 60 would not (90).
        self.read(h, other, publishes(30))
        self.assertEqual(calls[-1], (1, 4 * 30))
        self.assertEqual(rates.listeners.tokens[0][slot], 40)
        del calls[:]
        self.read(h, other, publishes(60))
        self.assertEqual(len(calls), 2 * 41)  # one by one, and held at the 41st
        self.assertIn(other.cid, h.broker.throttled)

    def test_a_read_cut_short_is_charged_for_what_was_handled(self):
        # (The listener's bucket outlives the connection.)
        h, pub, rates, calls = self.rig(listener_rate_messages=1000)
        slot = rates.listener_of[pub.cid]
        frames = publishes(5) + [b"\x00\x00"]  # then a packet type 0: a protocol error
        self.read(h, pub, frames)
        self.assertTrue(pub.closed)
        self.assertEqual(calls, [(0, 5), (1, 4 * 5)])  # (after its session was let go)
        self.assertEqual(rates.listeners.tokens[0][slot], 1000 - 5)
        self.assertEqual(rates.free, -1)

    def test_a_read_inside_another_is_charged_publish_by_publish(self):
        # Only one read at a time is charged after it.
        h, pub, rates, calls = self.rig(rate_messages=1000)
        rates.free = 99
        self.read(h, pub, publishes(3))
        self.assertEqual(calls, [(0, 1), (1, 4)] * 3)
        self.assertEqual(rates.free, 99)


if __name__ == "__main__":
    unittest.main()

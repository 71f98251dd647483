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

    def test_a_drained_queue_does_not_release_a_client_held_for_its_rate(self):
        # Broker.release_throttled (a subscriber's queue drained, or it left)
        # reads again the publishers held for that queue, not one held for
        # its own rate while in debt: each drained queue let one more PUBLISH
        # of it through (2,468/s against rate_messages 50 with a QoS 1
        # subscriber, on the host and a board alike).
        h = Harness(rate_messages=5, rate_grace=0)
        sub = h.client()
        sub.connect("sub")
        sub.subscribe("#", qos=1)
        pub = h.client()
        pub.connect("flooder")
        calm = h.client()
        calm.connect("calm")
        burst(pub, 12)
        self.assertEqual(len(sub.take()), 6)  # 5 in the bucket, the 6th in debt
        self.assertIn(pub.cid, h.broker.throttled)
        h.broker.throttled.append(calm.cid)  # as Broker.throttle holds one for a slow queue
        h.broker.take_throttle_changes()
        h.broker.release_throttled()
        self.assertEqual(h.broker.throttled, [pub.cid])  # the queue's publisher read again, not the flooder
        self.assertTrue(h.broker.take_throttle_changes())
        release(h)
        self.assertEqual(len(sub.take()), 0)  # nothing more of the flooder's before its debt is paid
        h.advance(1)
        release(h)
        self.assertEqual(len(sub.take()), 5)  # then its rate


def peer(user=None, listener=0, address="127.0.0.1"):
    """A shell's peer: `user` as a TLS identity (a logged-in user name)."""
    return (address + ":1", user, True, listener)


class TestSharedBuckets(unittest.TestCase):
    # (common/broker/rate_groups.py: one bucket per user name, one per listener.)
    def setUp(self):
        self.lines = []

    def rig(self, **settings):
        h = Harness(**settings)
        h.broker.set_logger(lambda level, text: self.lines.append(text))
        sub = h.client()
        sub.connect("sub")
        sub.subscribe("#")
        return h, sub

    def member(self, h, client_id, user=None, listener=0, level=4):
        c = h.client(level, peer(user, listener))
        c.connect(client_id)
        return c

    def test_connections_of_one_user_share_its_bucket(self):
        h, sub = self.rig(user_rate_messages=5)
        a1 = self.member(h, "a1", "alice")
        a2 = self.member(h, "a2", "alice")
        bob = self.member(h, "b", "bob")
        burst(a1, 3)
        self.assertNotIn(a1.cid, h.broker.throttled)
        burst(a2, 3)  # 3 + 3 = 6 of alice's 5: a2 goes into debt
        self.assertIn(a2.cid, h.broker.throttled)
        self.assertNotIn(a1.cid, h.broker.throttled)
        burst(a1, 1)  # a1 too, now: the bucket is alice's, not a2's
        self.assertIn(a1.cid, h.broker.throttled)
        burst(bob, 5)  # another user's bucket is full
        self.assertNotIn(bob.cid, h.broker.throttled)
        self.assertEqual(h.broker.stats.rate_held_user_messages, 2)
        self.assertEqual(h.broker.stats.rate_held_messages, 0)
        self.assertTrue([x for x in self.lines if x.startswith("a2: over user_rate_messages 5")])
        self.assertEqual(len(sub.take()), 12)  # handled, then held: nothing lost
        h.advance(1)  # -2 + 5: both read again
        self.assertNotIn(a1.cid, h.broker.throttled)
        self.assertNotIn(a2.cid, h.broker.throttled)

    def test_without_the_user_limit_the_same_traffic_passes(self):
        # (The test above can fail: per-client rates of 5 do not hold it.)
        h, _sub = self.rig(rate_messages=5)
        a1 = self.member(h, "a1", "alice")
        a2 = self.member(h, "a2", "alice")
        burst(a1, 3)
        burst(a2, 3)
        self.assertEqual(h.broker.throttled, [])

    def test_anonymous_clients_have_no_user_bucket(self):
        h, _sub = self.rig(user_rate_messages=2)
        anon = self.member(h, "anon")
        burst(anon, 10)
        self.assertNotIn(anon.cid, h.broker.throttled)
        self.assertEqual(h.broker.rates.users.in_use(), 0)

    def test_a_users_debt_outlives_its_reconnect(self):
        h, _sub = self.rig(user_rate_messages=5, rate_grace=0)
        a = self.member(h, "a1", "alice")
        burst(a, 20)  # handled 6, the rest waits: 5 - 6 = -1
        a.drop()
        self.assertEqual(h.broker.rates.users.in_use(), 1)  # idle, still in debt
        again = self.member(h, "a1", "alice")
        burst(again, 1)
        self.assertIn(again.cid, h.broker.throttled)
        again.drop()
        h.advance(2)  # full again and no connection: the slot is free
        self.assertEqual(h.broker.rates.users.in_use(), 0)

    def test_the_user_table_is_bounded(self):
        # As many slots as connection slots (max_connections + 4 refusal
        # slots); at the bound the oldest idle debt is forgiven.
        h, _sub = self.rig(user_rate_messages=1, max_connections=3, max_sessions=8)
        users = h.broker.rates.users
        slots = len(users.name)
        self.assertEqual(slots, 3 + 4)
        for i in range(slots + 3):
            c = self.member(h, "u%d" % i, "user%d" % i)
            burst(c, 3)  # in debt
            c.drop()  # idle, in debt
            self.assertLessEqual(users.in_use(), slots)
        self.assertEqual(users.forgiven, 3)
        self.assertTrue([x for x in self.lines if x.startswith("user rate table full (7 users)")])

    def test_clients_of_one_listener_share_its_bucket(self):
        h, _sub = self.rig(listener_rate_bytes=300)
        l1a = self.member(h, "l1a", listener=1)
        l1b = self.member(h, "l1b", listener=1)
        l0 = self.member(h, "l0", listener=0)
        burst(l1a, 1, payload=b"p" * 200)
        burst(l1b, 1, payload=b"p" * 200)  # 400 of listener 1's 300
        self.assertIn(l1b.cid, h.broker.throttled)
        self.assertNotIn(l1a.cid, h.broker.throttled)
        burst(l0, 1, payload=b"p" * 200)  # listener 0's own bucket
        self.assertNotIn(l0.cid, h.broker.throttled)
        self.assertEqual(h.broker.stats.rate_held_listener_bytes, 1)
        self.assertTrue([x for x in self.lines if x.startswith("l1b: over listener_rate_bytes 300")])
        h.advance(1)
        self.assertNotIn(l1b.cid, h.broker.throttled)

    def test_listener_subscribes(self):
        h, _sub = self.rig(listener_rate_subscribes=2)
        c = self.member(h, "s", listener=1)
        h.broker.data_received(c.cid, encode_packet(Subscribe(1, [("a", 0), ("b", 0), ("c", 0)], None), 4), h.now)
        h.pump()
        self.assertIn(c.cid, h.broker.throttled)
        self.assertEqual(h.broker.stats.rate_held_listener_subscribes, 1)

    def test_held_by_its_user_for_the_grace_then_v5_disconnect_0x96(self):
        h, _sub = self.rig(user_rate_messages=2, rate_grace=2)
        a = self.member(h, "a1", "alice", level=5)
        for _ in range(3):
            burst(a, 10, level=5)
            h.advance(1)
            release(h)
        got = [p.reason for p in a.take() if p.ptype == C.DISCONNECT]
        self.assertEqual(got, [0x96])  # Message rate too high
        self.assertEqual(h.broker.stats.closed_rate_limited, 1)
        self.assertEqual(h.broker.rates.user_of[a.cid], -1)  # left its user's bucket


class TestConnectRate(unittest.TestCase):
    # (common/broker/connect_rate.py: CONNECTs/s per source address.)
    def connect(self, h, level, address="192.0.2.7", client_id="c"):
        c = h.client(level, (address + ":5000", None, True))
        return c, c.connect(client_id)

    def test_v5_over_the_rate_gets_0x9f(self):
        h = Harness(rate_connects=2)
        lines = []
        h.broker.set_logger(lambda level, text: lines.append(text))
        for i in range(2):
            _c, ack = self.connect(h, 5, client_id="c%d" % i)
            self.assertEqual(ack.reason, 0)
        _c, ack = self.connect(h, 5, client_id="c2")
        self.assertEqual(ack.reason, 0x9F)  # Connection rate exceeded
        self.assertEqual(h.broker.stats.refused_connect_rate, 1)
        self.assertTrue([x for x in lines if "over rate_connects 2 CONNECTs/s from 192.0.2.7" in x])
        _c, ack = self.connect(h, 5, address="192.0.2.8", client_id="other")
        self.assertEqual(ack.reason, 0)  # another address has its own bucket
        h.advance(1)
        _c, ack = self.connect(h, 5, client_id="c3")
        self.assertEqual(ack.reason, 0)  # a second later: a token again

    def test_311_over_the_rate_gets_0x03_then_close(self):
        h = Harness(rate_connects=1)
        self.connect(h, 4, client_id="a")
        _c, ack = self.connect(h, 4, client_id="b")
        self.assertEqual(ack.reason, 0x03)  # Server unavailable [MQTT-3.2.2-5]: then closed
        self.assertEqual(h.broker.stats.refused_connect_rate, 1)

    def test_off_by_default(self):
        h = Harness()
        self.assertIsNone(h.broker.connect_rate)
        for i in range(20):
            _c, ack = self.connect(h, 5, client_id="c%d" % i)
            self.assertEqual(ack.reason, 0)

    def test_the_address_table_is_bounded(self):
        from common.broker.connect_rate import CONNECT_RATE_ENTRIES

        h = Harness(rate_connects=1, max_connections=4)
        table = h.broker.connect_rate.by_address
        for i in range(CONNECT_RATE_ENTRIES + 20):
            c, _ack = self.connect(h, 4, address="10.0.%d.%d" % (i // 200, i % 200), client_id="x")
            c.drop()
            self.assertLessEqual(len(table), CONNECT_RATE_ENTRIES)
        h.advance(1)
        self.connect(h, 4, address="10.9.9.9")
        self.assertEqual(len(table), 1)  # every bucket was full again: all dropped for the newcomer


class TestPerListenerRates(unittest.TestCase):
    # (common/broker/rate_listeners.py: a listener's own rate_*,
    # listener_rate_* and rate_connects, as a host's [[listener]] table sets
    # them; a key it does not set is [limits]'s, 0 is off there.)
    def setUp(self):
        self.lines = []

    def rig(self, per_listener, **settings):
        h = Harness(per_listener=per_listener, **settings)
        h.broker.set_logger(lambda level, text: self.lines.append(text))
        sub = h.client()
        sub.connect("sub")
        sub.subscribe("#")
        return h, sub

    def member(self, h, client_id, listener, level=4):
        c = h.client(level, peer(None, listener))
        c.connect(client_id)
        return c

    def test_a_listeners_own_client_rate_beside_limits_off(self):
        h, sub = self.rig({1: {"rate_messages": 5}})
        public = self.member(h, "public", 1)
        internal = self.member(h, "internal", 0)
        burst(public, 12)
        burst(internal, 12)
        self.assertEqual(len(sub.take()), 6 + 12)  # the public client's 5, and the 6th into debt
        self.assertIn(public.cid, h.broker.throttled)
        self.assertNotIn(internal.cid, h.broker.throttled)
        self.assertTrue([x for x in self.lines if x.startswith("public: over rate_messages 5 (PUBLISHes/s)")])
        self.assertFalse([x for x in self.lines if x.startswith("internal: over")])
        self.assertEqual(h.broker.rates.held_on, {1: [1, 0, 0, 0, 0, 0, 0, 0, 0]})  # (counted for its listener: /metrics)

    def test_0_on_a_listener_is_unlimited_while_limits_sets_a_rate(self):
        h, sub = self.rig({1: {"rate_messages": 0}}, rate_messages=5)
        internal = self.member(h, "internal", 1)
        public = self.member(h, "public", 0)
        burst(internal, 50)
        burst(public, 50)
        self.assertEqual(len(sub.take()), 50 + 6)
        self.assertNotIn(internal.cid, h.broker.throttled)
        self.assertIn(public.cid, h.broker.throttled)
        self.assertEqual(h.broker.stats.rate_held_messages, 1)

    def test_unset_keys_inherit_limits(self):
        # Listener 1 sets subscribes only: its clients keep [limits]' 5 PUBLISHes/s.
        h, sub = self.rig({1: {"rate_subscribes": 2}}, rate_messages=5, rate_grace=0)
        c = self.member(h, "c", 1)
        h.broker.data_received(c.cid, encode_packet(Subscribe(1, [("a", 0), ("b", 0), ("c", 0)], None), 4), h.now)
        h.pump()
        self.assertIn(c.cid, h.broker.throttled)
        self.assertEqual(h.broker.stats.rate_held_subscribes, 1)
        h.advance(1)
        release(h)
        self.assertNotIn(c.cid, h.broker.throttled)
        burst(c, 12)
        self.assertEqual(len(sub.take()), 6)
        self.assertIn(c.cid, h.broker.throttled)

    def test_a_reused_connection_slot_takes_its_new_listeners_rates(self):
        h, sub = self.rig({1: {"rate_messages": 2}}, rate_messages=20)
        first = self.member(h, "first", 1)
        burst(first, 10)
        self.assertEqual(len(sub.take()), 3)
        self.assertIn(first.cid, h.broker.throttled)
        cid = first.cid
        first.drop()
        again = self.member(h, "again", 0)
        self.assertEqual(again.cid, cid)
        burst(again, 10)
        self.assertEqual(len(sub.take()), 10)  # [limits]' 20, not listener 1's 2
        self.assertNotIn(again.cid, h.broker.throttled)

    def test_a_listeners_own_shared_bucket(self):
        h, sub = self.rig(
            {1: {"listener_rate_messages": 4}, 2: {"listener_rate_messages": 0}}, listener_rate_messages=100
        )
        a = self.member(h, "a", 1)
        b = self.member(h, "b", 1)
        burst(a, 3)
        burst(b, 3)  # 3 + 2 handled of listener 1's 4: b into debt (its 3rd waits)
        self.assertIn(b.cid, h.broker.throttled)
        self.assertTrue(
            [x for x in self.lines if x.startswith("b: over listener_rate_messages 4 (PUBLISHes/s, its listener's)")]
        )
        off = self.member(h, "off", 2)
        burst(off, 150)  # listener 2: off, though [limits] says 100
        self.assertNotIn(off.cid, h.broker.throttled)
        other = self.member(h, "other", 0)
        burst(other, 150)  # listener 0: [limits]' 100
        self.assertIn(other.cid, h.broker.throttled)
        self.assertEqual(len(sub.take()), 5 + 150 + 101)

    def test_a_listener_rate_alone_turns_the_limits_on(self):
        h = Harness(per_listener={3: {"rate_subscribes": 1}})
        self.assertIsNotNone(h.broker.rates)
        self.assertIsNone(h.broker.connect_rate)
        self.assertIsNone(Harness(per_listener={3: {"rate_subscribes": 0}}).broker.rates)

    def connect(self, h, listener, client_id, level=5):
        c = h.client(level, ("192.0.2.7:5000", None, True, listener))
        return c.connect(client_id)

    def test_connects_per_listener(self):
        h = Harness(per_listener={1: {"rate_connects": 0}, 2: {"rate_connects": 3}}, rate_connects=1)
        self.assertEqual([self.connect(h, 1, "a%d" % i).reason for i in range(10)], [0] * 10)  # off there
        # Listener 2: its own 3 a second, its own table of addresses.
        self.assertEqual([self.connect(h, 2, "b%d" % i).reason for i in range(4)], [0, 0, 0, 0x9F])
        # Listener 0: [limits]' 1 (the same address's CONNECTs on 1 and 2 not counted here).
        self.assertEqual([self.connect(h, 0, "c%d" % i).reason for i in range(2)], [0, 0x9F])
        self.assertEqual(h.broker.stats.refused_connect_rate, 2)
        self.assertEqual(h.broker.connect_rate.refused_on, {2: 1, 0: 1})  # (counted for each listener: /metrics)

    def test_a_listener_sets_rate_connects_with_limits_off(self):
        h = Harness(per_listener={1: {"rate_connects": 1}})
        lines = []
        h.broker.set_logger(lambda level, text: lines.append(text))
        self.assertEqual([self.connect(h, 0, "a%d" % i).reason for i in range(3)], [0, 0, 0])
        self.assertEqual([self.connect(h, 1, "b%d" % i, 4).reason for i in range(2)], [0, 0x03])
        self.assertTrue([x for x in lines if "over rate_connects 1 CONNECTs/s from 192.0.2.7" in x])

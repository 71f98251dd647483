# Routing a warm QoS 0 message to plain subscribers allocates nothing
# (docs/benchmarks.md, "MicroPython: heap allocated per routed message").
#
# Under MicroPython the routing runs under micropython.heap_lock(), where
# any allocation raises MemoryError (or, on a port without heap_lock, with
# gc.mem_alloc() deltas). On CPython, where every int is an object, the same
# test checks the means instead: the frame forwarded as it came, no Message
# taken from the pool, the topic name and its match result reused, the
# output buffers swapped rather than made.

import gc
import unittest

from common.mqtt import consts as C
from common.mqtt.packets import Publish, encode_packet
from tests.core.harness import Harness

try:
    import micropython

    heap_lock = getattr(micropython, "heap_lock", None)
except ImportError:
    heap_lock = None
mem_alloc = getattr(gc, "mem_alloc", None)

SUBSCRIBERS = 10


class Rig:
    def __init__(self, qos=0, **more):
        self.h = Harness(
            prealloc=True,
            match_cache_bytes=0,
            max_connections=16,
            max_sessions=16,
            max_subscriptions=48,
            max_messages=96,
            max_queued_messages=32,
            **more,
        )
        self.subs = []
        for i in range(SUBSCRIBERS):
            c = self.h.client()
            c.connect("s%d" % i)
            c.subscribe("plant/+/temp" if i % 2 else "plant/#", qos)
            c.take()
            self.subs.append(c)
        self.pub = self.h.client()
        self.pub.connect("p")
        self.pub.take()
        self.frame = encode_packet(Publish("plant/7/temp", b"21.5 C" * 8, 0, False, False, 0, None), C.LEVEL_311)
        self.outputs = []

    def delivered(self):
        """Route one message the harness's way: the clients decode it."""
        self.h.broker.data_received(self.pub.cid, self.frame, self.h.now)
        self.h.pump()

    def route(self):
        """Route one message as a shell does, keeping only what `outputs` asks."""
        broker = self.h.broker
        broker.data_received(self.pub.cid, self.frame, self.h.now)
        cid = broker.output.next_dirty()
        while cid >= 0:
            out = broker.output.take(cid)
            if self.outputs is not None:
                self.outputs.append((cid, bytes(out), out))
            cid = broker.output.next_dirty()


def route_locked(rig, n):
    """Route `n` messages with the heap locked (MicroPython): any allocation raises."""
    gc.collect()
    heap_lock()
    try:
        for _ in range(n):
            rig.route()
    finally:
        micropython.heap_unlock()


class TestZeroAllocation(unittest.TestCase):
    def test_rate_limits_on_but_not_reached_allocate_nothing(self):
        # (common/broker/ratelimit.py: a charge is list arithmetic.)
        if heap_lock is None:
            self.skipTest("heap_lock: measured under MicroPython")
        rig = Rig(rate_messages=1000, rate_bytes=1000000)
        rig.outputs = None
        for _ in range(3):
            rig.route()
        route_locked(rig, 20)
        self.assertEqual(rig.h.broker.stats.rate_held_messages, 0)

    def test_user_and_listener_rates_on_but_not_reached_allocate_nothing(self):
        # (ratelimit.py + rate_groups.py: the shared buckets are list arithmetic too.)
        if heap_lock is None:
            self.skipTest("heap_lock: measured under MicroPython")
        rig = Rig(user_rate_messages=1000, user_rate_bytes=1000000, listener_rate_messages=1000, listener_rate_bytes=1000000)
        rig.pub = rig.h.client(peer=("127.0.0.1:1", "alice", True, 1))  # a user, on listener 1
        rig.pub.connect("pa")
        rig.pub.take()
        rig.outputs = None
        for _ in range(3):
            rig.route()
        route_locked(rig, 20)
        stats = rig.h.broker.stats
        self.assertEqual(stats.messages_received, 23)
        self.assertEqual(stats.rate_held_user_messages + stats.rate_held_listener_messages, 0)
        self.assertEqual(rig.h.broker.rates.users.tokens[0][rig.h.broker.rates.user_of[rig.pub.cid]], 1000 - 23)

    def test_qos0_to_plain_subscribers_allocates_nothing_once_warm(self):
        rig = Rig()
        broker = rig.h.broker
        rig.outputs = None
        for _ in range(3):
            rig.route()  # warm: buffers at their size, topic cached
        sent = broker.stats.messages_sent
        if heap_lock is not None:
            route_locked(rig, 20)
        elif mem_alloc is not None:
            gc.collect()
            before = mem_alloc()
            for _ in range(20):
                rig.route()
            self.assertEqual(mem_alloc() - before, 0)
        else:
            rig.outputs = []
            created = broker.routing.messages.pool.created
            entry = topic = found = None
            routing = broker.routing
            for _ in range(20):
                rig.route()
                if entry is None:
                    entry = broker.topics.entry
                    topic = broker.inbound.topic
                    found = broker.topics.matches(topic, routing.trie, routing.matches)
                # the same cached name, str and match list every time (not
                # the trie's answer in the scratch list)
                self.assertIs(broker.topics.entry, entry)
                self.assertIs(broker.inbound.topic, topic)
                self.assertIsNot(found, routing.matches)
                self.assertIs(broker.topics.matches(topic, routing.trie, routing.matches), found)
            self.assertEqual(broker.routing.messages.pool.created, created)  # no Message
            self.assertEqual(broker.routing.messages.in_use(), 0)
            # each subscriber got the publisher's frame byte for byte
            self.assertEqual(len(rig.outputs), 20 * SUBSCRIBERS)
            for _, data, _ in rig.outputs:
                self.assertEqual(data, rig.frame)
            # the output buffers are swapped, never made: a few objects in all
            buffers = {id(buf) for _, _, buf in rig.outputs}
            self.assertLessEqual(len(buffers), SUBSCRIBERS + 2)
        self.assertEqual(broker.stats.messages_sent, sent + 20 * SUBSCRIBERS)
        # and the subscribers decode what they get
        rig.delivered()
        for c in rig.subs:
            got = [p for p in c.take() if p.ptype == C.PUBLISH]
            self.assertEqual([(p.topic, p.qos, p.retain) for p in got][-1:], [("plant/7/temp", 0, False)])

    def test_a_new_subscription_is_seen_by_a_cached_topic(self):
        # The cached match result is the trie's of its generation only.
        rig = Rig()
        rig.delivered()
        late = rig.h.client()
        late.connect("late")
        late.subscribe("plant/7/temp", 0)
        late.take()
        rig.delivered()
        self.assertEqual([p.topic for p in late.take() if p.ptype == C.PUBLISH], ["plant/7/temp"])
        late.unsubscribe("plant/7/temp")
        late.take()
        rig.delivered()
        self.assertEqual([p for p in late.take() if p.ptype == C.PUBLISH], [])

    def test_qos1_puback_in_allocates_nothing(self):
        rig = Rig(qos=1)
        broker = rig.h.broker
        rig.outputs = None
        sub = rig.subs[0]
        pid = 0
        for k in range(4):
            rig.pub.publish("plant/7/temp", b"x", qos=1, packet_id=k + 1)
            got = [p for p in sub.take() if p.ptype == C.PUBLISH]
            pid = got[-1].packet_id
            if k < 3:
                sub.ack(got[-1])
        ack = bytes((0x40, 2, pid >> 8, pid & 0xFF))
        inflight = broker.sessions.find("s0").inflight
        self.assertEqual(len(inflight), 1)
        if heap_lock is not None:
            gc.collect()
            heap_lock()
            try:
                broker.data_received(sub.cid, ack, rig.h.now)
            finally:
                micropython.heap_unlock()
        else:
            broker.data_received(sub.cid, ack, rig.h.now)
            self.assertIs(broker.inbound_ack.packet_id, pid)  # decoded into the reused PubAck
        self.assertEqual(len(inflight), 0)

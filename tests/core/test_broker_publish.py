# PUBLISH flows, routing, retained messages, flow control and limits
# (MQTT 3.1.1) on the in-memory harness. Runs under CPython and MicroPython.

import unittest

from common.broker.outbox import QUEUED_COST
from common.broker.routing_table import THROTTLE_COUNT
from common.broker.sys_topics import sys_values
from common.mqtt import consts as C
from common.mqtt.packets import PubAck
from tests.core.harness import Harness


def pair(h, qos, **kw):
    """A subscriber on "t" at `qos` and a connected publisher."""
    sub = h.client()
    sub.connect("sub", **kw)
    sub.subscribe("t", qos)
    pub = h.client()
    pub.connect("pub")
    return sub, pub


class TestQoS(unittest.TestCase):
    def test_qos0_delivery(self):
        h = Harness()
        sub, pub = pair(h, 0)
        pub.publish("t", b"hello")
        msg = sub.expect(C.PUBLISH)
        self.assertEqual((msg.topic, msg.payload, msg.qos, msg.retain), ("t", b"hello", 0, False))
        self.assertEqual(pub.take(), [])  # no ack for QoS 0

    def test_qos1_inbound_acked_and_delivered(self):
        # [MQTT-4.3.2-2] PUBACK with the same packet id
        h = Harness()
        sub, pub = pair(h, 1)
        pub.publish("t", b"one", qos=1, packet_id=77)
        ack = pub.expect(C.PUBACK)
        self.assertEqual(ack.packet_id, 77)
        msg = sub.expect(C.PUBLISH)
        self.assertEqual(msg.qos, 1)
        self.assertTrue(msg.packet_id > 0)  # [MQTT-2.3.1-1]

    def test_qos2_inbound_delivered_once_and_id_held_until_pubrel(self):
        # [MQTT-4.3.3-2] PUBREC; PUBREC again but no second delivery before
        # PUBREL; PUBCOMP; then the id is a new message
        h = Harness()
        sub, pub = pair(h, 2)
        pub.publish("t", b"two", qos=2, packet_id=9)
        self.assertEqual(pub.expect(C.PUBREC).packet_id, 9)
        pub.publish("t", b"two", qos=2, packet_id=9, dup=True)
        self.assertEqual(pub.expect(C.PUBREC).packet_id, 9)
        self.assertEqual(len([p for p in sub.take() if p.ptype == C.PUBLISH]), 1)
        pub.send(PubAck(C.PUBREL, 9, 0, None))
        self.assertEqual(pub.expect(C.PUBCOMP).packet_id, 9)
        # After PUBCOMP the id is free: the same id is a new message.
        pub.publish("t", b"again", qos=2, packet_id=9)
        pub.expect(C.PUBREC)
        self.assertEqual(sub.expect(C.PUBLISH).payload, b"again")

    def test_qos2_outbound_flow(self):
        # [MQTT-4.3.3-1] PUBLISH, PUBREC -> PUBREL, PUBCOMP
        h = Harness()
        sub, pub = pair(h, 2)
        pub.publish("t", b"x", qos=2, packet_id=1)
        msg = sub.expect(C.PUBLISH)
        self.assertEqual(msg.qos, 2)
        sub.send(PubAck(C.PUBREC, msg.packet_id, 0, None))
        rel = sub.expect(C.PUBREL)
        self.assertEqual(rel.packet_id, msg.packet_id)
        sub.send(PubAck(C.PUBCOMP, msg.packet_id, 0, None))
        self.assertEqual(h.broker.sessions.find("sub").inflight, [])

    def test_qos_downgraded_to_granted(self):
        # [MQTT-3.8.4-6]
        h = Harness()
        sub, pub = pair(h, 0)
        pub.publish("t", b"x", qos=2, packet_id=3)
        self.assertEqual(sub.expect(C.PUBLISH).qos, 0)

    def test_subscriber_qos_above_publish_qos_not_upgraded(self):
        h = Harness()
        sub, pub = pair(h, 2)
        pub.publish("t", b"x", qos=1)
        self.assertEqual(sub.expect(C.PUBLISH).qos, 1)

    def test_pubrel_unknown_id_still_completed(self):
        h = Harness()
        _sub, pub = pair(h, 0)
        pub.send(PubAck(C.PUBREL, 4242, 0, None))
        self.assertEqual(pub.expect(C.PUBCOMP).packet_id, 4242)

    def test_redelivery_with_dup_in_order_after_reconnect(self):
        # [MQTT-4.4.0-1] [MQTT-3.3.1-1]
        h = Harness()
        sub = h.client()
        sub.connect("sub", clean=False)
        sub.subscribe("t", 1)
        pub = h.client()
        pub.connect("pub")
        for i in range(3):
            pub.publish("t", bytes([i]), qos=1, packet_id=i + 1)
        first = [m for m in sub.take() if m.ptype == C.PUBLISH]
        self.assertEqual(len(first), 3)
        sub.drop()
        again = h.client()
        again.connect("sub", clean=False)
        resent = again.take()
        self.assertEqual([m.payload for m in resent], [b"\x00", b"\x01", b"\x02"])
        self.assertEqual([m.packet_id for m in resent], [m.packet_id for m in first])
        for m in resent:
            self.assertTrue(m.dup)

    def test_pubrel_resent_after_reconnect(self):
        # [MQTT-4.4.0-1] unacknowledged PUBREL is resent
        h = Harness()
        sub = h.client()
        sub.connect("sub", clean=False)
        sub.subscribe("t", 2)
        pub = h.client()
        pub.connect("pub")
        pub.publish("t", b"x", qos=2, packet_id=1)
        msg = sub.expect(C.PUBLISH)
        sub.send(PubAck(C.PUBREC, msg.packet_id, 0, None))
        sub.expect(C.PUBREL)
        sub.drop()
        again = h.client()
        again.connect("sub", clean=False)
        self.assertEqual(again.expect(C.PUBREL).packet_id, msg.packet_id)

    def test_publish_racing_resume_queues_behind_inflight(self):
        # DESIGN ordering: a publish arriving as the session resumes waits
        # behind the resent messages.
        h = Harness(max_inflight=2)
        sub = h.client()
        sub.connect("sub", clean=False)
        sub.subscribe("t", 1)
        pub = h.client()
        pub.connect("pub")
        for i in range(4):
            pub.publish("t", bytes([i]), qos=1, packet_id=i + 1)
        sub.take()
        sub.drop()
        pub.publish("t", b"\x04", qos=1, packet_id=5)
        again = h.client()
        again.connect("sub", clean=False)
        pub.publish("t", b"\x05", qos=1, packet_id=6)
        seen = []
        for _ in range(10):
            got = [m for m in again.take() if m.ptype == C.PUBLISH]
            if not got:
                break
            for m in got:
                seen.append(m.payload[0])
                again.ack(m)
        self.assertEqual(seen, [0, 1, 2, 3, 4, 5])


class TestFlowControl(unittest.TestCase):
    def test_qos2_window_slows_a_311_client_instead_of_closing_it(self):
        # A 3.1.1 client cannot be told the inbound window (paho's own is 20):
        # beyond max_inflight_in its messages are taken and delivered once,
        # but their PUBREC waits for a PUBREL to make room. [MQTT-4.3.3-2]
        h = Harness(max_inflight_in=2)
        sub, pub = pair(h, 2)
        for i in range(5):
            pub.publish("t", b"m%d" % i, qos=2, packet_id=i + 1)
        self.assertEqual([p.packet_id for p in pub.take()], [1, 2])  # PUBRECs of the window only
        self.assertFalse(pub.closed)
        self.assertEqual(len([p for p in sub.take() if p.ptype == C.PUBLISH]), 5)
        pub.publish("t", b"m2", qos=2, packet_id=3, dup=True)  # resent: its PUBREC still in turn
        self.assertEqual(pub.take(), [])
        released = []
        for pid in (1, 2, 3, 4, 5):
            pub.send(PubAck(C.PUBREL, pid, 0, None))
            got = pub.take()
            self.assertEqual((got[0].ptype, got[0].packet_id), (C.PUBCOMP, pid))
            released += [(p.ptype, p.packet_id) for p in got[1:]]
        self.assertEqual(released, [(C.PUBREC, 3), (C.PUBREC, 4), (C.PUBREC, 5)])
        self.assertEqual(len([p for p in sub.take() if p.ptype == C.PUBLISH]), 0)  # none twice

    def test_qos2_311_beyond_the_withheld_bound_is_closed(self):
        from common.broker.handle_publish import QOS2_LATE_MAX

        h = Harness(max_inflight_in=2)
        _sub, pub = pair(h, 2)
        for i in range(2 + QOS2_LATE_MAX):
            pub.publish("t", b"x", qos=2, packet_id=i + 1)
        self.assertFalse(pub.closed)
        pub.publish("t", b"x", qos=2, packet_id=3 + QOS2_LATE_MAX)
        self.assertTrue(pub.closed)  # 3.1.1: closed without an ack (no reason codes)
        self.assertEqual(h.broker.connections.live, 1)

    def test_inflight_cap_then_queue_in_order(self):
        h = Harness(max_inflight=3)
        sub, pub = pair(h, 1)
        for i in range(10):
            pub.publish("t", bytes([i]), qos=1, packet_id=i + 1)
        first = [m for m in sub.take() if m.ptype == C.PUBLISH]
        self.assertEqual(len(first), 3)  # never more than the cap unacknowledged
        seen = [m.payload[0] for m in first]
        pending = first
        while pending:
            for m in pending:
                sub.ack(m)
            pending = [m for m in sub.take() if m.ptype == C.PUBLISH]
            self.assertTrue(len(pending) <= 3)
            seen += [m.payload[0] for m in pending]
        self.assertEqual(seen, list(range(10)))  # [MQTT-4.6.0-5]

    def test_queue_limit_drops_and_counts(self):
        h = Harness(max_queued_messages=2, queue_full="drop_newest")
        sub = h.client()
        sub.connect("sub", clean=False)
        sub.subscribe("t", 1)
        sub.drop()
        pub = h.client()
        pub.connect("pub")
        for i in range(5):
            pub.publish("t", bytes([i]), qos=1, packet_id=i + 1)
        self.assertEqual(len([p for p in pub.take() if p.ptype == C.PUBACK]), 5)
        self.assertEqual(h.broker.stats.dropped_queue_full, 3)
        again = h.client()
        again.connect("sub", clean=False)
        self.assertEqual([m.payload for m in again.take()], [b"\x00", b"\x01"])

    def test_queue_byte_limit(self):
        h = Harness(max_queued_bytes=10, queue_full="drop_newest")
        sub = h.client()
        sub.connect("sub", clean=False)
        sub.subscribe("t", 1)
        sub.drop()
        pub = h.client()
        pub.connect("pub")
        pub.publish("t", b"12345678", qos=1)  # 1 + 8 bytes
        pub.publish("t", b"12345678", qos=1, packet_id=2)
        self.assertEqual(h.broker.stats.dropped_queue_full, 1)

    def _offline_subscriber(self, h, qos=1):
        sub = h.client()
        sub.connect("sub", clean=False)
        sub.subscribe("t", qos)
        sub.drop()
        return sub

    def test_queue_full_drop_oldest_keeps_the_freshest(self):
        h = Harness(max_queued_messages=3, queue_full="drop_oldest")
        self._offline_subscriber(h)
        pub = h.client()
        pub.connect("pub")
        for i in range(7):
            pub.publish("t", bytes([i]), qos=1, packet_id=i + 1)
        self.assertEqual(len([p for p in pub.take() if p.ptype == C.PUBACK]), 7)
        self.assertEqual(h.broker.stats.dropped_queue_full, 4)
        self.assertEqual(h.broker.sessions.find("sub").dropped, 4)
        again = h.client()
        again.connect("sub", clean=False)
        self.assertEqual([m.payload[0] for m in again.take() if m.ptype == C.PUBLISH], [4, 5, 6])
        self.assertEqual(h.broker.routing.messages.in_use(), 3)  # the dropped ones are released

    def test_queue_full_drop_oldest_by_bytes(self):
        h = Harness(max_queued_bytes=20, queue_full="drop_oldest")
        self._offline_subscriber(h)
        pub = h.client()
        pub.connect("pub")
        for i in range(3):
            pub.publish("t", bytes([i]) * 8, qos=1, packet_id=i + 1)  # 9 bytes each
        pub.publish("t", b"y" * 30, qos=1, packet_id=9)  # alone over the limit: dropped itself
        self.assertEqual(h.broker.stats.dropped_queue_full, 2)
        again = h.client()
        again.connect("sub", clean=False)
        self.assertEqual([m.payload[0] for m in again.take() if m.ptype == C.PUBLISH], [1, 2])

    def test_drop_oldest_never_drops_a_message_already_sent(self):
        # Sent and awaiting its PUBACK, a message is in the window, not in the
        # queue: only queued ones make room [MQTT-4.3.2-1] (it must be resent
        # until acknowledged).
        h = Harness(max_inflight=2, max_queued_messages=2, queue_full="drop_oldest")
        sub, pub = pair(h, 1)
        for i in range(6):
            pub.publish("t", bytes([i]), qos=1, packet_id=i + 1)
        first = [m for m in sub.take() if m.ptype == C.PUBLISH]
        self.assertEqual([m.payload[0] for m in first], [0, 1])
        seen = []
        pending = first
        while pending:
            for m in pending:
                seen.append(m.payload[0])
                sub.ack(m)
            pending = [m for m in sub.take() if m.ptype == C.PUBLISH]
        self.assertEqual(seen, [0, 1, 4, 5])
        self.assertEqual(h.broker.stats.dropped_queue_full, 2)

    def test_queue_full_refuse_is_the_default(self):
        # Nothing acknowledged is dropped unless a drop policy is chosen.
        h = Harness()
        self.assertEqual(h.broker.settings.queue_full, "refuse")

    def test_drops_are_logged_per_client_rate_limited(self):
        h = Harness(max_queued_messages=1, queue_full="drop_newest")
        lines = []
        h.broker.set_logger(lambda level, text: lines.append((level, text)), 30)
        self._offline_subscriber(h)
        pub = h.client()
        pub.connect("pub")
        for i in range(5):
            pub.publish("t", bytes([i]), qos=1, packet_id=i + 1)
        warnings = [t for lv, t in lines if lv == 30 and "dropped" in t]
        self.assertEqual(len(warnings), 1)  # one line for a burst, not one per message
        self.assertIn("sub: queue full, 1 message(s) dropped so far", warnings[0])
        self.assertIn("max_queued_messages 1", warnings[0])
        h.advance(11)
        pub.publish("t", b"late", qos=1, packet_id=9)
        warnings = [t for lv, t in lines if lv == 30 and "dropped" in t]
        self.assertEqual(len(warnings), 2)
        self.assertIn("sub: queue full, 5 message(s) dropped so far", warnings[1])
        self.assertEqual(h.broker.stats.dropped_queue_full, 5)

    def _v5_publishes(self, h, n):
        """A v5 publisher sends n QoS 1 messages to "t": their PUBACK codes, and the last PUBACK."""
        pub = h.client(level=5)
        pub.connect("pub5")
        pub.take()
        codes = []
        for i in range(n):
            pub.publish("t", bytes([i]), qos=1, packet_id=i + 1)
            ack = pub.expect(C.PUBACK)
            codes.append(ack.reason)
        return codes, ack

    def test_queue_full_refuse_tells_a_v5_publisher(self):
        h = Harness(max_queued_messages=2, queue_full="refuse")
        self._offline_subscriber(h)
        other = h.client()
        other.connect("other")
        other.subscribe("t", 1)
        other.take()
        codes, ack = self._v5_publishes(h, 4)
        self.assertEqual(codes, [C.RC_SUCCESS, C.RC_SUCCESS, C.RC_QUOTA_EXCEEDED, C.RC_QUOTA_EXCEEDED])
        self.assertIn("queue of subscriber sub full", dict(ack.props)[C.PROP_REASON_STRING])
        # Refused whole: the subscriber with room did not get it either.
        self.assertEqual([m.payload[0] for m in other.take() if m.ptype == C.PUBLISH], [0, 1])
        self.assertEqual(h.broker.stats.refused_queue_full, 2)
        self.assertEqual(h.broker.stats.dropped_queue_full, 0)

    def test_queue_full_refuse_disconnects_a_311_publisher_without_ack(self):
        # [MQTT-4.8.0-2] (3.1.1 4.3.2) no PUBACK for a message not accepted:
        # the publisher resends it when it reconnects.
        h = Harness(max_queued_messages=1, queue_full="refuse")
        self._offline_subscriber(h)
        pub = h.client()
        pub.connect("pub")
        pub.publish("t", b"a", qos=1, packet_id=1)
        self.assertEqual(pub.expect(C.PUBACK).packet_id, 1)
        pub.publish("t", b"b", qos=1, packet_id=2)
        self.assertEqual([p for p in pub.take() if p.ptype == C.PUBACK], [])
        self.assertTrue(pub.closed)
        # QoS 0 is never refused (nothing is acknowledged): dropped for the full queue.
        pub0 = h.client()
        pub0.connect("pub0")
        pub0.publish("t", b"c", qos=0)
        self.assertFalse(pub0.closed)
        self.assertEqual(h.broker.stats.refused_queue_full, 1)

    # max_queued_total_bytes: every queued copy counts its topic + payload + QUEUED_COST.
    COPY = QUEUED_COST + 2  # topic "t" + a 1-byte payload

    def _two_offline(self, **kw):
        h = Harness(max_queued_total_bytes=3 * self.COPY, **kw)
        for name in ("a", "b"):
            sub = h.client()
            sub.connect(name, clean=False)
            sub.subscribe("t", 1)
            sub.drop()
        pub = h.client()
        pub.connect("pub")
        return h, pub

    def test_all_queues_budget_drops_counted_and_logged(self):
        h, pub = self._two_offline(queue_full="drop_newest")
        lines = []
        h.broker.set_logger(lambda level, text: lines.append((level, text)), 30)
        for i in range(3):
            pub.publish("t", bytes([i]), qos=1, packet_id=i + 1)
        # Three copies fit: a and b get message 0, a gets message 1; b's copy
        # of 1 and both copies of 2 are over the budget.
        st = h.broker.stats
        self.assertEqual((st.dropped_queue_total, st.dropped_queue_full), (3, 0))
        self.assertEqual(h.broker.routing.queued_total, 3 * self.COPY)
        self.assertEqual([h.broker.sessions.find(n).dropped for n in "ab"], [1, 2])
        warnings = [t for lv, t in lines if lv == 30]
        self.assertEqual(len(warnings), 1)  # one line for the whole broker, rate-limited
        want = "all queues full (max_queued_total_bytes %d, queue_full = drop_newest)" % (3 * self.COPY)
        self.assertIn(want, warnings[0])
        self.assertIn("1 message(s) dropped", warnings[0])
        h.advance(11)
        pub.publish("t", b"z", qos=1, packet_id=9)
        self.assertIn("4 message(s) dropped, 0 publish(es) refused so far, the latest for a", lines[-1][1])
        self.assertEqual(h.broker.stats.dropped_queue_total, 5)
        # Counted apart in $SYS, and in the sum of the drops.
        values = dict(sys_values(h.broker.snapshot(), h.now))
        self.assertEqual((values["messages/dropped/queue_total"], values["messages/dropped"]), ("5", "5"))
        # A session that drains gives its bytes back.
        a = h.client()
        a.connect("a", clean=False)
        for m in a.take():
            if m.ptype == C.PUBLISH:
                a.ack(m)
        while True:
            got = [m for m in a.take() if m.ptype == C.PUBLISH]
            if not got:
                break
            for m in got:
                a.ack(m)
        self.assertEqual(h.broker.routing.queued_total, self.COPY)  # b's message 0

    def test_all_queues_budget_refuse_tells_a_v5_publisher(self):
        h, _pub = self._two_offline(queue_full="refuse")
        codes, ack = self._v5_publishes(h, 3)
        # 0 fits for both; 1 would fit a but not b: refused whole.
        self.assertEqual(codes, [C.RC_SUCCESS, C.RC_QUOTA_EXCEEDED, C.RC_QUOTA_EXCEEDED])
        want = "all queues full (max_queued_total_bytes %d)" % (3 * self.COPY)
        self.assertEqual(dict(ack.props)[C.PROP_REASON_STRING], want)
        st = h.broker.stats
        self.assertEqual((st.refused_queue_total, st.refused_queue_full, st.dropped_queue_total), (2, 0, 0))

    def test_all_queues_budget_refuse_disconnects_a_311_publisher(self):
        h, pub = self._two_offline(queue_full="refuse")
        pub.publish("t", b"0", qos=1, packet_id=1)
        self.assertEqual(pub.expect(C.PUBACK).packet_id, 1)
        pub.publish("t", b"1", qos=1, packet_id=2)
        self.assertEqual([p for p in pub.take() if p.ptype == C.PUBACK], [])  # [MQTT-4.8.0-2]
        self.assertTrue(pub.closed)
        self.assertEqual(h.broker.stats.refused_queue_total, 1)

    def test_all_queues_budget_drop_oldest_takes_from_the_full_session(self):
        h, pub = self._two_offline(queue_full="drop_oldest")
        for i in range(3):
            pub.publish("t", bytes([i]), qos=1, packet_id=i + 1)
        # a: 0, 1 then 2 pushes out 0; b: 0, then 1 pushes out 0, then 2 pushes out 1.
        st = h.broker.stats
        self.assertEqual(st.dropped_queue_total, 3)
        for name, want in (("a", [1, 2]), ("b", [2])):
            q = h.broker.sessions.find(name).queue.items()
            self.assertEqual([d.msg.payload[0] for d in q], want)
        self.assertEqual(h.broker.routing.queued_total, 3 * self.COPY)

    def test_large_queues_throttle_at_a_capped_high_water_mark(self):
        # With the host's large queues (bytes bind, not counts), an online
        # subscriber that falls behind still throttles its publisher after
        # THROTTLE_COUNT messages, not half a million: the burst waits in
        # the publisher's socket, not in the broker's RAM.
        h = Harness(max_inflight=1, max_queued_messages=1000000, queue_full="drop_newest")
        sub, pub = pair(h, 1)
        n = 0
        while not h.broker.throttled:
            n += 1
            pub.publish("t", b"x", qos=1, packet_id=n % 60000 + 1)
        self.assertEqual(h.broker.throttled, [pub.cid])
        self.assertEqual(h.broker.sessions.find("sub").queue.count, THROTTLE_COUNT)
        # Read again once the queue is below half the mark.
        while h.broker.throttled:
            for m in [m for m in sub.take() if m.ptype == C.PUBLISH]:
                sub.ack(m)
        self.assertEqual(h.broker.sessions.find("sub").queue.count, THROTTLE_COUNT // 2)

    def test_slow_reader_qos0_dropped_beyond_out_buffer(self):
        h = Harness(max_out_buffer=100)
        sub, pub = pair(h, 0)
        h.broker.output.set_paused(sub.cid, True)
        for _ in range(20):
            pub.publish("t", b"x" * 20)
        self.assertTrue(h.broker.stats.dropped_qos0 > 0)
        self.assertTrue(h.broker.connections.by_id[sub.cid].out_bytes <= 100 + 30)
        h.broker.output.set_paused(sub.cid, False)
        h.pump()
        got = [m for m in sub.take() if m.ptype == C.PUBLISH]
        self.assertEqual(len(got) + h.broker.stats.dropped_qos0, 20)

    def test_message_pool_exhaustion_is_refused_not_crashed(self):
        h = Harness(max_messages=2)
        sub = h.client()
        sub.connect("sub", clean=False)
        sub.subscribe("t", 1)
        sub.drop()
        pub = h.client()
        pub.connect("pub")
        for i in range(4):
            pub.publish("t", bytes([i]), qos=1, packet_id=i + 1)
        # Two fit; the third cannot be kept, and 3.1.1 cannot say so in a
        # PUBACK: the publisher is closed unacknowledged [MQTT-4.8.0-2].
        self.assertEqual([a.packet_id for a in pub.take() if a.ptype == C.PUBACK], [1, 2])
        self.assertTrue(pub.closed)
        self.assertEqual(h.broker.stats.dropped_no_slab, 1)
        other = h.client()
        self.assertEqual(other.connect("other").reason, C.CONNACK_ACCEPTED)  # the broker carries on


class TestRouting(unittest.TestCase):
    def test_steady_qos1_routing_reuses_one_delivery_record(self):
        # A delivery record is recycled when acknowledged: a steady flow of
        # QoS 1 messages allocates no new record (on MicroPython each would
        # be a heap object per message).
        h = Harness()
        sub, pub = pair(h, 1)
        session = h.broker.sessions.find("sub")
        used = []
        for i in range(5):
            pub.publish("t", bytes([i]), qos=1, packet_id=i + 1)
            pub.expect(C.PUBACK)
            used.append(session.inflight[0])
            sub.ack(sub.expect(C.PUBLISH))
            self.assertEqual(session.inflight, [])
        self.assertTrue(all(d is used[0] for d in used))

    def test_overlapping_subscriptions_one_copy_at_max_qos(self):
        # [MQTT-3.3.5-1]
        h = Harness()
        sub = h.client()
        sub.connect("sub")
        sub.subscribe("a/+", 0, packet_id=1)
        sub.subscribe("a/#", 2, packet_id=2)
        sub.subscribe("a/b", 1, packet_id=3)
        pub = h.client()
        pub.connect("pub")
        pub.publish("a/b", b"x", qos=2)
        got = [m for m in sub.take() if m.ptype == C.PUBLISH]
        self.assertEqual(len(got), 1)
        self.assertEqual(got[0].qos, 2)

    def test_retain_flag_cleared_on_live_delivery(self):
        # [MQTT-3.3.1-9]
        h = Harness()
        sub, pub = pair(h, 0)
        pub.publish("t", b"r", retain=True)
        self.assertFalse(sub.expect(C.PUBLISH).retain)

    def test_order_per_publisher_and_topic(self):
        # [MQTT-4.6.0-6]
        h = Harness()
        sub, pub = pair(h, 2)
        for i in range(20):
            pub.publish("t", bytes([i]), qos=i % 3, packet_id=i + 1)
        got = []
        for m in sub.take():
            if m.ptype == C.PUBLISH:
                got.append(m.payload[0])
        self.assertEqual(got, list(range(20)))

    def test_publish_to_sys_refused(self):
        h = Harness()
        sub = h.client()
        sub.connect("sub")
        sub.subscribe("$SYS/#")
        pub = h.client()
        pub.connect("pub")
        pub.publish("$SYS/broker/fake", b"x", qos=1)
        pub.expect(C.PUBACK)
        self.assertEqual(sub.take(), [])

    def test_dollar_topics_not_matched_by_leading_wildcard(self):
        # [MQTT-4.7.2-1]
        h = Harness()
        sub = h.client()
        sub.connect("sub")
        sub.subscribe("#")
        sub.subscribe("+/x", packet_id=2)
        h.broker.publish("$SYS/x", b"sys", 0, False, h.now)
        h.pump()
        self.assertEqual(sub.take(), [])

    def test_topic_limits(self):
        h = Harness(max_topic_levels=3, max_topic_length=10)
        _sub, pub = pair(h, 0)
        pub.publish("a/b/c/d", b"x")
        self.assertTrue(pub.closed)

    def test_wildcard_in_publish_topic_closes(self):
        # [MQTT-3.3.2-2]
        h = Harness()
        _sub, pub = pair(h, 0)
        pub.send_raw(b"\x30\x05\x00\x03a/+")
        self.assertTrue(pub.closed)


class TestRetained(unittest.TestCase):
    def test_retained_sent_on_subscribe_with_retain_flag(self):
        # [MQTT-3.3.1-5] [MQTT-3.3.1-8]
        h = Harness()
        pub = h.client()
        pub.connect("pub")
        pub.publish("r/1", b"one", qos=1, retain=True)
        sub = h.client()
        sub.connect("sub")
        sub.subscribe("r/#", 1)
        msg = sub.expect(C.PUBLISH)
        self.assertEqual((msg.topic, msg.payload, msg.retain, msg.qos), ("r/1", b"one", True, 1))

    def test_retained_replaced(self):
        # [MQTT-3.3.1-5] only the latest is kept
        h = Harness()
        pub = h.client()
        pub.connect("pub")
        pub.publish("r", b"old", retain=True)
        pub.publish("r", b"new", retain=True)
        sub = h.client()
        sub.connect("sub")
        sub.subscribe("r")
        self.assertEqual([m.payload for m in sub.take()], [b"new"])

    def test_zero_length_retained_clears(self):
        # [MQTT-3.3.1-10] [MQTT-3.3.1-11]
        h = Harness()
        pub = h.client()
        pub.connect("pub")
        pub.publish("r", b"x", retain=True)
        pub.publish("r", b"", retain=True)
        sub = h.client()
        sub.connect("sub")
        sub.subscribe("r")
        self.assertEqual(sub.take(), [])
        self.assertEqual(h.broker.routing.retained.count(), 0)

    def test_resubscribe_replaces_and_resends_retained(self):
        # [MQTT-3.8.4-3]
        h = Harness()
        pub = h.client()
        pub.connect("pub")
        pub.publish("r", b"x", qos=1, retain=True)
        sub = h.client()
        sub.connect("sub")
        sub.subscribe("r", 0)
        self.assertEqual(sub.expect(C.PUBLISH).qos, 0)
        sub.subscribe("r", 1, packet_id=5)
        self.assertEqual(sub.expect(C.PUBLISH).qos, 1)
        self.assertEqual(len(h.broker.sessions.find("sub").subs), 1)
        pub.publish("r", b"live", qos=1, packet_id=2)
        live = [m for m in sub.take() if m.ptype == C.PUBLISH]
        self.assertEqual(len(live), 1)  # replaced, not doubled

    def test_retained_store_limit(self):
        h = Harness(max_retained=2)
        pub = h.client()
        pub.connect("pub")
        for i in range(3):
            pub.publish("r/%d" % i, b"x", retain=True)
        self.assertEqual(h.broker.routing.retained.count(), 2)
        self.assertEqual(h.broker.stats.dropped_retained, 1)
        pub.publish("r/0", b"y", retain=True)  # a replacement still fits
        self.assertEqual(h.broker.stats.dropped_retained, 1)

    def test_broker_own_topics_take_no_room_of_the_clients(self):
        # $SYS is the broker's: its retained topics are outside max_retained,
        # so a client still gets the whole budget.
        h = Harness(max_retained=2)
        for name in ("a", "b", "c"):
            h.broker.publish("$SYS/broker/" + name, b"1", 0, True, h.now)
        pub = h.client()
        pub.connect("pub")
        pub.publish("r/0", b"x", retain=True)
        pub.publish("r/1", b"x", retain=True)
        self.assertEqual(h.broker.routing.retained.count(), 5)
        self.assertEqual(h.broker.stats.dropped_retained, 0)
        h.broker.publish("$SYS/broker/a", b"", 0, True, h.now)  # cleared: still no room for a third
        pub.publish("r/2", b"x", retain=True)
        self.assertEqual(h.broker.stats.dropped_retained, 1)

    def test_retained_byte_limit_counts_only_the_clients(self):
        h = Harness(max_retained_bytes=10)
        h.broker.publish("$SYS/broker/big", b"x" * 100, 0, True, h.now)
        pub = h.client()
        pub.connect("pub")
        pub.publish("r", b"123456789", retain=True)  # 1 + 9 bytes: exactly the budget
        self.assertEqual(h.broker.stats.dropped_retained, 0)
        pub.publish("s", b"1", retain=True)
        self.assertEqual(h.broker.stats.dropped_retained, 1)

    def test_refused_retained_is_told_to_a_v5_publisher(self):
        # Kept nowhere, so a v5 QoS 1 publisher hears 0x97 and nobody gets
        # it; a 3.1.1 publisher (no code to be told) is acknowledged and
        # its message reaches the current subscribers, not the store.
        h = Harness(max_retained=1)
        sub = h.client()
        sub.connect("sub")
        sub.subscribe("r/#", 0)
        sub.take()
        v5 = h.client(level=5)
        v5.connect("v5")
        v5.take()
        v5.publish("r/0", b"kept", qos=1, retain=True, packet_id=1)
        self.assertEqual(v5.expect(C.PUBACK).reason, C.RC_SUCCESS)
        v5.publish("r/1", b"refused", qos=1, retain=True, packet_id=2)
        ack = v5.expect(C.PUBACK)
        self.assertEqual(ack.reason, C.RC_QUOTA_EXCEEDED)
        self.assertIn("max_retained 1", dict(ack.props)[C.PROP_REASON_STRING])
        self.assertEqual([p.payload for p in sub.take() if p.ptype == C.PUBLISH], [b"kept"])
        v311 = h.client()
        v311.connect("v311")
        v311.publish("r/2", b"live only", qos=1, retain=True, packet_id=3)
        self.assertEqual(v311.expect(C.PUBACK).reason, C.RC_SUCCESS)
        self.assertEqual([p.payload for p in sub.take() if p.ptype == C.PUBLISH], [b"live only"])
        self.assertEqual(h.broker.stats.dropped_retained, 2)
        self.assertEqual(h.broker.routing.retained.count(), 1)

    def test_retained_messages_release_slabs(self):
        h = Harness()
        pub = h.client()
        pub.connect("pub")
        pub.publish("r", b"x", retain=True)
        pub.publish("r", b"", retain=True)
        self.assertEqual(h.broker.routing.messages.in_use(), 0)


class TestSubscribe(unittest.TestCase):
    def test_suback_codes_in_order(self):
        # [MQTT-3.8.4-1] [MQTT-3.8.4-2] [MQTT-3.9.3-1] [MQTT-3.9.3-2] every
        # failure (invalid, denied) is 0x80
        from common.mqtt.packets import Subscribe

        h = Harness(deny_subscribe=["secret/#"])
        c = h.client()
        c.connect("c")
        c.send(Subscribe(3, [("a", 2), ("a/#/b", 1), ("secret/x", 1), ("b", 1)], None))
        ack = c.expect(C.SUBACK)
        self.assertEqual(ack.packet_id, 3)
        self.assertEqual(ack.reasons, [2, 0x80, 0x80, 1])

    def test_subscription_limit_per_client(self):
        h = Harness(max_subscriptions_per_client=2)
        c = h.client()
        c.connect("c")
        self.assertEqual(c.subscribe("a").reasons, [0])
        self.assertEqual(c.subscribe("b", packet_id=2).reasons, [0])
        self.assertEqual(c.subscribe("c", packet_id=3).reasons, [0x80])
        self.assertEqual(c.subscribe("a", 1, packet_id=4).reasons, [1])  # replacement fits

    def test_unsubscribe_stops_delivery(self):
        # [MQTT-3.10.4-2] [MQTT-3.10.4-4] [MQTT-3.10.4-5]
        h = Harness()
        sub, pub = pair(h, 0)
        ack = sub.unsubscribe("t", packet_id=8)
        self.assertEqual(ack.packet_id, 8)
        pub.publish("t", b"x")
        self.assertEqual(sub.take(), [])
        self.assertEqual(sub.unsubscribe("never", packet_id=9).packet_id, 9)

    def test_session_end_frees_subscriptions(self):
        h = Harness()
        c = h.client()
        c.connect("c")
        c.subscribe("a/#")
        self.assertEqual(h.broker.routing.trie.count, 1)
        c.drop()
        self.assertEqual(h.broker.routing.trie.count, 0)
        self.assertEqual(h.broker.sessions.sub_pool.in_use, 0)


class TestSettings(unittest.TestCase):
    def test_unknown_setting_named(self):
        from common.broker.settings import new_settings

        with self.assertRaises(ValueError) as ctx:
            new_settings({"max_conections": 5})
        self.assertIn("max_conections", str(ctx.exception))

    def test_wrong_type_named(self):
        from common.broker.settings import new_settings

        with self.assertRaises(ValueError):
            new_settings({"max_inflight": "16"})
        with self.assertRaises(ValueError):
            new_settings({"allow_mqtt31": 1})

    def test_invalid_deny_filter_refused(self):
        from common.broker.settings import new_settings

        with self.assertRaises(ValueError):
            new_settings({"deny_subscribe": ["a/#/b"]})

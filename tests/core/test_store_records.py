# What the store writes per message for a persistent subscriber, and that
# what it no longer writes still comes back after a crash
# (docs/persistence.md "Records per message").
# A delivery's record holds its message inline while it is the message's
# only stored delivery (no M record), and a QoS 1 delivery's move from the
# queue to the window is not written (a shutdown writes it). Runs under
# CPython and MicroPython (tests/upy/run.py).

import unittest

from common.mqtt import consts as C
from common.mqtt.packets import PubAck
from common.store import store as store_module
from common.store.store import pack
from common.store.store_open import MAGIC, unpack
from tests.core.harness import Harness
from tests.core.kv_contract import items
from tests.core.memkv import MemKV
from tests.core.test_persist import open_store, restart


class CountingKV(MemKV):
    """MemKV that counts puts and deletes by namespace byte."""

    def __init__(self, durable=None):
        MemKV.__init__(self, durable)
        self.puts = {}
        self.deletes = {}

    def put(self, key, value):
        MemKV.put(self, key, value)
        ns = key[:1]
        self.puts[ns] = self.puts.get(ns, 0) + 1

    def delete(self, key):
        MemKV.delete(self, key)
        ns = key[:1]
        self.deletes[ns] = self.deletes.get(ns, 0) + 1

    def power_cut(self):
        return CountingKV(self.durable)

    def counted(self):
        """(D puts, D deletes, M puts, M deletes) so far."""
        return (self.puts.get(b"D", 0), self.deletes.get(b"D", 0), self.puts.get(b"M", 0), self.deletes.get(b"M", 0))


def complete(sub):
    """The subscriber acknowledges all it has and gets (QoS 2: PUBREC, then
    PUBCOMP for each PUBREL) until nothing more comes; the PUBLISHes."""
    got = []
    while sub.inbox:
        for pkt in sub.take():
            if pkt.ptype == C.PUBLISH:
                got.append(pkt)
                sub.ack(pkt)
            elif pkt.ptype == C.PUBREL:
                sub.send(PubAck(C.PUBCOMP, pkt.packet_id, 0, None))
    return got


def online_subscriber(kv, qos, **settings):
    """A broker over a store on `kv` (with `settings`), a persistent
    subscriber online to t/# at `qos`, and a publisher."""
    h = Harness(store=open_store(kv), **settings)
    sub = h.client()
    sub.connect("sub", clean=False)
    sub.subscribe("t/#", qos=qos)
    pub = h.client()
    pub.connect("pub")
    return h, sub, pub


class TestRecordsPerMessage(unittest.TestCase):
    def storm(self, qos, n=40):
        """`n` messages of `qos` to one online persistent subscriber, the
        publisher ahead of it (most wait in its queue); every one completed.
        The backend and what the store wrote per message."""
        kv = CountingKV()
        h, sub, pub = online_subscriber(kv, qos)
        before = kv.counted()
        for i in range(n):
            pub.publish("t/%d" % i, b"m%d" % i, qos=qos, packet_id=i + 1)
            if qos == 2:
                rec = pub.expect(C.PUBREC)
                pub.send(PubAck(C.PUBREL, rec.packet_id, 0, None))
                pub.expect(C.PUBCOMP)
            else:
                pub.expect(C.PUBACK)
        got = complete(sub)
        self.assertEqual([p.payload for p in got], [b"m%d" % i for i in range(n)])
        after = kv.counted()
        self.assertEqual(items(kv, b"D") + items(kv, b"M"), [])  # nothing left behind
        return [after[i] - before[i] for i in range(4)], h.broker.settings.max_inflight

    def test_qos1_message_is_one_record_and_one_tombstone(self):
        # Before: M and D QUEUED, D SENT, then D and M deleted: five.
        n = 40
        (d_puts, d_deletes, m_puts, m_deletes), window = self.storm(1, n)
        self.assertLess(window, n)  # most of them waited in the queue
        self.assertEqual((d_puts, d_deletes, m_puts, m_deletes), (n, n, 0, 0))

    def test_qos2_message_has_no_record_of_its_own(self):
        # Its delivery's record holds it (QUEUED, then SENT for the queued
        # ones, then RELEASED without it), then one tombstone; no M record.
        n = 40
        (d_puts, d_deletes, m_puts, m_deletes), window = self.storm(2, n)
        self.assertEqual((d_puts, d_deletes, m_puts, m_deletes), (n + (n - window) + n, n, 0, 0))


class TestInlineMessages(unittest.TestCase):
    def test_second_persistent_subscriber_keeps_the_message_after_the_first_acks(self):
        # Two persistent sessions get one message: one delivery record holds
        # it inline, the other's refers to its M record. The holder's
        # acknowledgement deletes its record; the other still gets the
        # message after a power cut [MQTT-3.1.2-5], and its ack leaves nothing.
        kv = MemKV()
        h = Harness(store=open_store(kv))
        h.offline_subscriber("a", "t/#")
        h.offline_subscriber("b", "t/#")
        pub = h.client()
        pub.connect("pub")
        pub.publish("t/x", b"both", qos=1, packet_id=1)
        pub.expect(C.PUBACK)
        records = items(kv, b"D")
        self.assertEqual(len(records), 2)
        self.assertEqual(len(items(kv, b"M")), 1)
        inline = [key for key, value in records if len(unpack(value[2:])) > 7]
        self.assertEqual(len(inline), 1)
        holder_id, other_id = ("a", "b") if inline[0].startswith(b"Da\0") else ("b", "a")
        again = h.client()
        again.connect(holder_id, clean=False)
        self.assertEqual([p.payload for p in complete(again)], [b"both"])
        h.broker.sync_store()  # (the driver's tick: no ack waited for that tombstone)
        self.assertEqual(len(items(kv.power_cut(), b"D")), 1)
        h2, kv2 = restart(kv)
        self.assertEqual(h2.restored["messages"], 1)
        late = h2.client()
        self.assertTrue(late.connect(other_id, clean=False).session_present)
        self.assertEqual([p.payload for p in complete(late)], [b"both"])
        self.assertEqual(items(kv2, b"D") + items(kv2, b"M"), [])

    def test_restore_writes_the_m_record_a_delivery_refers_to_when_only_inline_is_left(self):
        # Damage took a message's M record: one delivery still holds the
        # message inline, another refers to it by id. The restore gives
        # both their message and writes the M record, so the second one
        # still has it after the first is acknowledged and the broker
        # restarts again.
        kv = MemKV()
        store = open_store(kv)
        for cid in ("a", "b"):
            store.put(b"S", cid.encode(), [4, 0xFFFFFFFF, 0, 1, 1, []])
            store.put(b"U", cid.encode() + b"\0t/#", [1, False, False, 0, 0])
        message = ["t/x", b"kept", 1, False, None, 0]
        store.put(b"D", b"a\0" + bytes(7) + b"\x01", [5, 1, False, None, 0, 0, None] + message)  # inline
        store.put(b"D", b"b\0" + bytes(7) + b"\x02", [5, 1, False, None, 0, 0, None])  # by id, no M 5
        store.sync()
        h2, kv2 = restart(kv)
        self.assertEqual((h2.restored["messages"], h2.restored["skipped"]), (1, 0))
        self.assertEqual([k for k, _v in items(kv2, b"M")], [b"M" + bytes(7) + b"\x05"])
        first = h2.client()
        first.connect("a", clean=False)
        self.assertEqual([p.payload for p in complete(first)], [b"kept"])
        h2.broker.sync_store()
        h3, _kv3 = restart(kv2)
        second = h3.client()
        second.connect("b", clean=False)
        self.assertEqual([p.payload for p in complete(second)], [b"kept"])

    def test_queued_qos2_delivery_sent_then_crash_resent_with_dup_and_its_id(self):
        # The QoS 2 delivery that waited in the queue is written SENT (its
        # message inline again) before its PUBLISH leaves: after a power cut
        # it comes again with DUP and the same packet id, so the subscriber
        # does not take it as a new message [MQTT-4.4.0-1] [MQTT-4.3.3-2].
        kv = MemKV()
        _h, sub, pub = online_subscriber(kv, 2, max_inflight=1)
        for i in range(2):
            pub.publish("t/%d" % i, b"m%d" % i, qos=2, packet_id=i + 1)
        first = sub.expect(C.PUBLISH)
        self.assertEqual(sub.take(), [])  # the second waits in the queue (window 1)
        sub.ack(first)
        sub.send(PubAck(C.PUBCOMP, sub.expect(C.PUBREL).packet_id, 0, None))
        second = sub.expect(C.PUBLISH)  # out of the queue now
        self.assertEqual((second.payload, second.dup), (b"m1", False))
        h2, _kv = restart(kv, max_inflight=1)
        again = h2.client()
        again.connect("sub", clean=False)
        resent = again.take()
        self.assertEqual([(p.payload, p.dup, p.packet_id) for p in resent], [(b"m1", True, second.packet_id)])


class TestQos1WindowNotWritten(unittest.TestCase):
    def window_of_two(self):
        """A persistent QoS 1 subscriber with a window of 1 gets m0, acks
        it, and gets m1 out of its queue. The harness, its backend, m1."""
        kv = MemKV()
        h, sub, pub = online_subscriber(kv, 1, max_inflight=1)
        for i in range(2):
            pub.publish("t/%d" % i, b"m%d" % i, qos=1, packet_id=i + 1)
        sub.ack(sub.expect(C.PUBLISH))
        second = sub.expect(C.PUBLISH)
        self.assertEqual(second.payload, b"m1")
        return h, kv, second

    def test_crash_after_a_queued_qos1_delivery_left_resends_it_as_new(self):
        # Its record still says QUEUED: after a power cut it is sent again,
        # once, as a new PUBLISH (a duplicate QoS 1 allows, in order).
        _h, kv, _second = self.window_of_two()
        h2, _kv = restart(kv, max_inflight=1)
        again = h2.client()
        again.connect("sub", clean=False)
        self.assertEqual([(p.payload, p.dup) for p in again.take()], [(b"m1", False)])

    def test_shutdown_writes_the_window_so_a_restart_resends_with_dup_and_its_id(self):
        # A clean shutdown writes what the window did not: a restart then
        # resends the unacknowledged PUBLISH with DUP and its packet id
        # [MQTT-4.4.0-1].
        h, kv, second = self.window_of_two()
        h.broker.shutdown(h.now)
        h2, _kv = restart(kv, max_inflight=1)
        again = h2.client()
        again.connect("sub", clean=False)
        self.assertEqual([(p.payload, p.dup, p.packet_id) for p in again.take()], [(b"m1", True, second.packet_id)])


class TestPacker(unittest.TestCase):
    def test_record_items_round_trip_at_the_packers_bounds(self):
        # The packer writes a list's flags, non-negative ints, str and bytes
        # without a call (the per-message path): each at the bounds of a
        # one-byte length or varint, and what it leaves to the general
        # path (negative ints, nested lists), comes back as it went.
        items_ = [
            True, False, None, 0, 63, 64, 127, 128, 8191, 8192, 1 << 40, -1, -(1 << 40),
            "", "x" * 127, "x" * 128, "\u00e9" * 63, "\u00e9" * 64, "\U0001f600" * 40,
            b"", b"y" * 127, b"y" * 128, [1, [None, b"z"]],
        ]
        self.assertEqual(unpack(pack(items_)), items_)
        for item in items_:
            self.assertEqual(unpack(pack([item])), [item])


class TestSchemaOne(unittest.TestCase):
    def test_store_of_schema_1_restores_and_is_upgraded(self):
        # Records as schema 1 wrote them (each M apart, deliveries refer to
        # it by id; a sent QoS 1 delivery and a queued one) come back, and
        # the meta record says schema 2 afterwards.
        kv = MemKV()

        def put(key, value):
            kv.put(key, bytes([1, 0]) + pack(value))  # schema 1, plain

        kv.put(b"V", MAGIC + bytes([1]) + bytes(4) + bytes([0, 0]))
        put(b"Ssub", [4, 0xFFFFFFFF, 0, 7, 3, []])
        put(b"Usub\0t/#", [1, False, False, 0, 0])
        put(b"M" + bytes(7) + b"\x01", ["t/a", b"a", 1, False, None, 0, None])
        put(b"M" + bytes(7) + b"\x02", ["t/b", b"b", 1, False, None, 0, None])
        put(b"Dsub\0" + bytes(7) + b"\x01", [1, 1, False, None, 1, 2, None])  # SENT, id 2
        put(b"Dsub\0" + bytes(7) + b"\x02", [2, 1, False, None, 0, 0, None])  # QUEUED
        kv.sync()
        h2, kv2 = restart(kv)
        self.assertEqual((h2.restored["sessions"], h2.restored["messages"], h2.restored["skipped"]), (1, 2, 0))
        self.assertEqual(kv2.get(b"V")[4], store_module.SCHEMA)
        self.assertEqual(store_module.SCHEMA, 2)
        again = h2.client()
        again.connect("sub", clean=False)
        got = complete(again)
        self.assertEqual([(p.topic, p.dup, p.packet_id) for p in got], [("t/a", True, 2), ("t/b", False, 3)])
        # A new message after the restore gets an id of its own (no clash with 1, 2).
        pub = h2.client()
        pub.connect("pub")
        pub.publish("t/c", b"c", qos=1, packet_id=1)
        self.assertEqual([p.payload for p in complete(again)], [b"c"])
        self.assertEqual(items(kv2, b"D") + items(kv2, b"M"), [])


if __name__ == "__main__":
    unittest.main()

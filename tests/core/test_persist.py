# Persistence: sessions, subscriptions, queues, inflight state and retained
# messages survive a restart, and a power cut keeps everything acknowledged.
# The backend is tests/core/memkv.py: power_cut() keeps exactly what was
# synced. Runs under CPython and MicroPython.

import unittest

from common.broker.outbox import QUEUED_COST
from common.crypto.aesgcm import AesGcm
from common.mqtt import consts as C
from common.mqtt.packets import PubAck, Publish, encode_packet
from common.store.store import Store, StoreError, pack
from common.store.store_open import open_records, read_items, unpack
from tests.core.ecb_helper import NO_AES, make_ecb
from tests.core.harness import Harness
from tests.core.kv_contract import items
from tests.core.memkv import MemKV

KEY1 = bytes(range(32))
KEY2 = bytes(range(100, 132))


def aead(key):
    ecb = make_ecb(key)
    return AesGcm(key, ecb) if ecb is not None else None


def open_store(backend, **kw):
    store = Store(backend, **kw)
    open_records(store)
    return store


def restart(backend, now=2000, wall=1700001000, keys=None, key_id=0, **settings):
    """A fresh broker over what survives a power cut of `backend`."""
    survivor = backend.power_cut()
    store = open_store(survivor, keys=keys, key_id=key_id)
    return Harness(store=store, now=now, wall=wall, **settings), survivor


def keys_of(backend, ns):
    return sorted(k for k, _v in items(backend, ns))


class TestRecordCodec(unittest.TestCase):
    def test_pack_round_trip(self):
        values = [None, True, False, 0, 1, -1, 127, 128, -129, 2**40, -(2**40), "", "é/x", b"", b"\x00\xff", [], [1, [b"a", "b"], None]]
        for v in values:
            self.assertEqual(unpack(pack(v)), v)
        self.assertEqual(unpack(pack((1, ("k", "v")))), [1, ["k", "v"]])
        # The format on disk: list, count, then each item (small ints and None
        # inside a list take a shorter path in the packer, same bytes).
        self.assertEqual(pack([0, 63, 64, None, -1]), bytes([6, 5, 3, 0, 3, 126, 3, 128, 1, 0, 3, 1]))

    def test_damaged_body_raises(self):
        data = pack(["topic", b"payload"])
        for cut in range(1, len(data)):
            with self.assertRaises((ValueError, IndexError)):
                unpack(data[:cut])
        with self.assertRaises(ValueError):
            unpack(data + b"\x00")


class TestStoreOpen(unittest.TestCase):
    def test_boot_counter_grows_and_is_synced(self):
        kv = MemKV()
        s1 = open_store(kv)
        s2 = open_store(kv.power_cut())
        self.assertEqual(s1.boot, 1)
        self.assertEqual(s2.boot, 2)

    def test_newer_schema_refused_with_advice(self):
        kv = MemKV()
        open_store(kv)
        meta = bytearray(kv.get(b"V"))
        meta[4] = 99
        kv.put(b"V", bytes(meta))
        with self.assertRaises(StoreError) as cm:
            open_store(kv)
        self.assertIn("--wipe-store", str(cm.exception))
        self.assertIn("schema 99", str(cm.exception))

    def test_older_schema_migrated_when_a_path_exists(self):
        from common.store import store as store_module
        from common.store import store_open

        kv = MemKV()
        h = Harness(store=open_store(kv))
        c = h.client(5)
        c.connect("old", clean=False, props=[(C.PROP_SESSION_EXPIRY_INTERVAL, 50)])
        c.drop()
        survivor = kv.power_cut()

        def double_expiry(full, value):
            if full[:1] == b"S":
                value[1] *= 2  # an observable change, as a real migration would make
            return value

        saved = store_module.SCHEMA
        store_module.SCHEMA = saved + 1
        try:
            with self.assertRaises(StoreError) as cm:
                open_store(MemKV(survivor.durable))  # no migration from `saved` yet
            self.assertIn("cannot migrate", str(cm.exception))
            store_open.MIGRATIONS[saved] = double_expiry
            h2 = Harness(store=open_store(survivor))
            self.assertEqual(h2.broker.sessions.find("old").expiry_interval, 100)
            self.assertEqual(survivor.get(b"V")[4], saved + 1)  # the meta record is upgraded
        finally:
            store_module.SCHEMA = saved
            store_open.MIGRATIONS.pop(saved, None)

    def test_records_without_meta_refused(self):
        kv = MemKV()
        kv.put(b"Sx", b"\x01\x00\x00")
        with self.assertRaises(StoreError):
            open_store(kv)

    def test_wipe_discards_everything(self):
        kv = MemKV()
        meta = bytearray(b"SKNS\x63\x00\x00\x00\x01\x00\x00")
        kv.put(b"V", bytes(meta))
        kv.put(b"Sx", b"junk")
        store = Store(kv)
        open_records(store, wipe=True)
        self.assertEqual(keys_of(kv, b"S"), [])
        self.assertEqual(store.boot, 1)

    def test_damaged_record_skipped_and_counted(self):
        kv = MemKV()
        h = Harness(store=open_store(kv))
        c = h.client()
        c.connect("keep", clean=False)
        c.subscribe("t", qos=1)
        kv.put(b"Sbroken", b"\x01\x00\x06\x09")  # a list that claims 9 items
        kv.put(b"Sold", b"\x07\x00\x00")  # an unknown schema
        kv.sync()
        h2, _kv = restart(kv)
        self.assertEqual(h2.restored["skipped"], 2)
        self.assertEqual(h2.restored["sessions"], 1)


class TestRestart(unittest.TestCase):
    def persistent_subscriber(self, h, qos=1, level=4, props=None):
        c = h.client(level)
        c.connect("sub", clean=False, props=props)
        c.subscribe("t/#", qos=qos)
        return c

    def test_offline_queue_survives_power_cut_in_order(self):
        # [MQTT-3.1.2-5] QoS 1/2 messages for an offline persistent session are
        # kept; here across a power cut right after the last PUBACK.
        kv = MemKV()
        h = Harness(store=open_store(kv))
        sub = self.persistent_subscriber(h)
        sub.disconnect()
        pub = h.client()
        pub.connect("pub")
        for i in range(5):
            pub.publish("t/%d" % i, b"m%d" % i, qos=1, packet_id=i + 1)
            self.assertEqual(pub.expect(C.PUBACK).packet_id, i + 1)
        h2, _kv = restart(kv)
        self.assertEqual(h2.restored["sessions"], 1)
        # The restored queue counts against max_queued_total_bytes as before.
        self.assertEqual(h2.broker.routing.queued_total, h.broker.routing.queued_total)
        self.assertEqual(h2.broker.routing.queued_total, 5 * (len("t/0m0") + QUEUED_COST))
        again = h2.client()
        ack = again.connect("sub", clean=False)
        self.assertTrue(ack.session_present)
        self.assertEqual(h2.broker.routing.queued_total, 0)
        got = again.take()
        self.assertEqual([p.topic for p in got], ["t/%d" % i for i in range(5)])
        self.assertEqual([p.payload for p in got], [b"m%d" % i for i in range(5)])

    def test_drop_oldest_deletes_the_dropped_records(self):
        # queue_full = drop_oldest: what was dropped is gone from the store
        # too, so a restart brings back exactly the kept (freshest) ones.
        kv = MemKV()
        h = Harness(store=open_store(kv), max_queued_messages=2, queue_full="drop_oldest")
        self.persistent_subscriber(h).disconnect()
        pub = h.client()
        pub.connect("pub")
        for i in range(5):
            pub.publish("t/%d" % i, b"m%d" % i, qos=1, packet_id=i + 1)
            self.assertEqual(pub.expect(C.PUBACK).packet_id, i + 1)
        h2, _kv = restart(kv, max_queued_messages=2, queue_full="drop_oldest")
        self.assertEqual(h2.restored["messages"], 2)
        again = h2.client()
        again.connect("sub", clean=False)
        self.assertEqual([p.payload for p in again.take()], [b"m3", b"m4"])

    def test_lowered_queue_cap_keeps_every_stored_message(self):
        # max_queued_messages lowered between two runs: what was acknowledged
        # stays queued, in order (the queue widens past the new cap).
        kv = MemKV()
        h = Harness(store=open_store(kv), max_queued_messages=10)
        self.persistent_subscriber(h).disconnect()
        pub = h.client()
        pub.connect("pub")
        for i in range(7):
            pub.publish("t/%d" % i, b"m%d" % i, qos=1, packet_id=i + 1)
            self.assertEqual(pub.expect(C.PUBACK).packet_id, i + 1)
        h2, _kv = restart(kv, max_queued_messages=2)
        self.assertEqual(h2.restored["messages"], 7)
        again = h2.client()
        again.connect("sub", clean=False)
        self.assertEqual([p.payload for p in again.take()], [b"m%d" % i for i in range(7)])

    def test_sessions_get_their_own_queues_back_in_order(self):
        # The deliveries are read in key order (client id, then sequence):
        # each session's queue and inflight window come back as they were.
        kv = MemKV()
        h = Harness(store=open_store(kv), max_inflight=2)
        for cid in ("b-sub", "a-sub"):
            c = h.client()
            c.connect(cid, clean=False)
            c.subscribe("t/#" if cid == "a-sub" else "t/odd/#", qos=1)
            c.disconnect()
        pub = h.client()
        pub.connect("pub")
        for i in range(6):
            pub.publish("t/odd/%d" % i if i % 2 else "t/%d" % i, b"m%d" % i, qos=1, packet_id=i + 1)
            self.assertEqual(pub.expect(C.PUBACK).packet_id, i + 1)
        h2, _kv = restart(kv)
        self.assertEqual(h2.restored["messages"], 6)
        for cid, wanted in (("a-sub", range(6)), ("b-sub", (1, 3, 5))):
            again = h2.client()
            again.connect(cid, clean=False)
            self.assertEqual([p.payload for p in again.take()], [b"m%d" % i for i in wanted])

    def test_restored_messages_share_their_topic(self):
        # As live routing's TopicCache shares one str among a topic's messages,
        # so does the restore (without it the host took 11 MB more per 200,000).
        kv = MemKV()
        h = Harness(store=open_store(kv))
        self.persistent_subscriber(h).disconnect()
        pub = h.client()
        pub.connect("pub")
        for i in range(3):
            pub.publish("t/same", b"m%d" % i, qos=1, packet_id=i + 1)
            self.assertEqual(pub.expect(C.PUBACK).packet_id, i + 1)
        h2, _kv = restart(kv)
        queued = h2.broker.sessions.find("sub").queue.items()
        self.assertEqual(len(queued), 3)
        self.assertTrue(queued[0].msg.topic is queued[1].msg.topic is queued[2].msg.topic)

    def test_records_are_read_one_at_a_time(self):
        # read_items reads a record when the loop asks for it: the restore
        # never holds every record of a namespace at once.
        kv = MemKV()
        store = open_store(kv)
        for i in range(5):
            store.put(b"M", b"k%d" % i, ["t", b"x", 1, False, None, 0, None])
        reads = []
        get = kv.get

        def counted(key):
            reads.append(key)
            return get(key)

        kv.get = counted
        records = read_items(store, b"M")
        self.assertEqual(reads, [])
        first = next(records)[0]
        self.assertEqual(len(reads), 1)
        rest = [k for k, _v in records]
        self.assertEqual(sorted([first] + rest), [b"k%d" % i for i in range(5)])
        self.assertEqual(len(reads), 5)

    def test_restore_reports_its_progress(self):
        # monitor.progress("restore", records read, records in the store): at
        # the start, every PROGRESS_STEP records and at the end (the shell
        # logs it and tells systemd: cpython_host/operations/store_monitor.py).
        import common.store.store as S
        import common.store.store_open as opener

        # A step of 8 records instead of 4096: the store fits a MicroPython heap.
        step = opener.PROGRESS_STEP
        opener.PROGRESS_STEP = PROGRESS_STEP = 8
        self.addCleanup(setattr, opener, "PROGRESS_STEP", step)
        u64be = S.u64be
        kv = MemKV()
        store = open_store(kv)
        for i in range(2 * PROGRESS_STEP + 5):
            store.put(b"M", u64be(i + 1), ["t", b"x", 1, False, None, 0, None])
        store.sync()
        calls = []

        class Monitor:
            def progress(self, phase, done, total):
                calls.append((phase, done, total))

        survivor = open_store(kv.power_cut())
        survivor.monitor = Monitor()
        total = len(survivor.backend)
        h2 = Harness(store=survivor)
        self.assertEqual(h2.restored["messages"], 0)  # no delivery held them: dropped
        wanted = [0, PROGRESS_STEP, 2 * PROGRESS_STEP, total]
        self.assertEqual(calls, [("restore", n, total) for n in wanted])

    def test_restore_code_is_dropped_after_the_restore(self):
        # Restore runs once at start-up; its module must not stay in a
        # board's heap (common/store/persist.py Persist.restore).
        import sys

        import common.store

        kv = MemKV()
        h = Harness(store=open_store(kv))
        self.persistent_subscriber(h).disconnect()
        h2, _kv = restart(kv)
        self.assertEqual(h2.restored["sessions"], 1)
        self.assertFalse("common.store.restore" in sys.modules)
        self.assertFalse(hasattr(common.store, "restore"))

    def test_store_written_by_earlier_versions_restores(self):
        # Records as the broker wrote them before Core v2 (the publisher's
        # client id in the last slot of M and R, a shared delivery, one sent
        # and one queued): the layout is unchanged, so they come back.
        kv = MemKV()
        store = open_store(kv)
        store.put(b"S", b"sub", [4, 0xFFFFFFFF, 0, 7, 3, []])
        store.put(b"U", b"sub\0t/#", [1, False, False, 0, 0])
        store.put(b"U", b"sub\0$share/g/s", [1, False, False, 0, 0])
        for mid, topic in ((1, "t/a"), (2, "t/b"), (3, "s")):
            store.put(b"M", bytes(7) + bytes([mid]), [topic, topic.encode(), 1, False, None, 0, "pub"])
        store.put(b"D", b"sub\0" + bytes(7) + b"\x01", [1, 1, False, None, 1, 2, None])  # SENT, id 2
        store.put(b"D", b"sub\0" + bytes(7) + b"\x02", [2, 1, False, None, 0, 0, None])  # QUEUED
        store.put(b"D", b"sub\0" + bytes(7) + b"\x03", [3, 1, False, None, 0, 0, "g/s"])  # QUEUED, shared
        store.put(b"R", b"r/x", [b"kept", 0, None, 0, "pub"])
        store.sync()
        h2, _kv = restart(kv)
        self.assertEqual((h2.restored["sessions"], h2.restored["messages"], h2.restored["retained"]), (1, 3, 1))
        self.assertEqual(h2.broker.sessions.find("sub").generation, 7)
        again = h2.client()
        self.assertTrue(again.connect("sub", clean=False).session_present)
        got = again.take()
        self.assertEqual([(p.topic, p.dup, p.packet_id) for p in got], [("t/a", True, 2), ("t/b", False, 3), ("s", False, 4)])
        again.subscribe("r/#", 0)
        self.assertEqual(again.expect(C.PUBLISH).payload, b"kept")

    def test_forwarded_properties_keep_their_record_form(self):
        # A message keeps its forwarded v5 properties encoded once a delivery
        # encoded them (common/broker/pools.py Message.props); its M and R
        # records still hold the list of (id, value) every version wrote,
        # and records written by hand the old way restore the same
        # [MQTT-3.3.2-17] [MQTT-3.3.2-18].
        kv = MemKV()
        h = Harness(store=open_store(kv))
        sub = self.persistent_subscriber(h, level=5, props=[(C.PROP_SESSION_EXPIRY_INTERVAL, 100)])
        pub = h.client(5)
        pub.connect("pub")
        props = [
            (C.PROP_USER_PROPERTY, ("k", "1")),
            (C.PROP_CONTENT_TYPE, "text/plain"),
            (C.PROP_USER_PROPERTY, ("k", "2")),
            (C.PROP_CORRELATION_DATA, b"\x00\x01"),
        ]
        record = [[38, ["k", "1"]], [3, "text/plain"], [38, ["k", "2"]], [9, b"\x00\x01"]]
        pub.publish("t/a", b"one", qos=1, packet_id=3, props=props)
        first = sub.expect(C.PUBLISH)  # sent, then its record written (the message inline): encoded by now
        self.assertEqual(first.props, props)
        pub.publish("t/r", b"kept", retain=True, props=props)
        self.assertEqual(sub.expect(C.PUBLISH).props, props)  # encoded by this delivery
        store = open_store(kv.power_cut())
        self.assertEqual([rec[7 + 4] for _k, rec in read_items(store, b"D")], [record])
        self.assertEqual([rec[2] for _k, rec in read_items(store, b"R")], [record])
        # Records as an earlier version wrote them, by hand.
        store.put(b"R", b"t/old", [b"old", 0, [[3, "a/b"], [38, ["x", "y"]], [38, ["x", "z"]]], 0, "pub"])
        store.sync()
        h2, _kv = restart(store.backend)
        again = h2.client(5)
        again.connect("sub", clean=False, props=[(C.PROP_SESSION_EXPIRY_INTERVAL, 100)])
        resent = again.expect(C.PUBLISH)
        self.assertEqual((resent.dup, resent.payload, resent.props), (True, b"one", props))
        again.subscribe("t/#", 0, packet_id=2)  # Retain Handling 0: the retained messages again
        got = [(p.topic, p.props) for p in again.take() if p.ptype == C.PUBLISH]
        old = [(C.PROP_CONTENT_TYPE, "a/b"), (C.PROP_USER_PROPERTY, ("x", "y")), (C.PROP_USER_PROPERTY, ("x", "z"))]
        self.assertEqual(sorted(got), [("t/old", old), ("t/r", props)])

    def test_subscriptions_restored_without_reconnect(self):
        kv = MemKV()
        h = Harness(store=open_store(kv))
        sub = self.persistent_subscriber(h, qos=2)
        sub.drop()
        h2, _kv = restart(kv)
        pub = h2.client()
        pub.connect("pub")
        pub.publish("t/x", b"after", qos=2, packet_id=9)
        self.assertEqual(pub.expect(C.PUBREC).reason, C.RC_SUCCESS)
        again = h2.client()
        again.connect("sub", clean=False)
        pkt = again.expect(C.PUBLISH)
        self.assertEqual((pkt.topic, pkt.payload, pkt.qos), ("t/x", b"after", 2))

    def test_unacknowledged_publish_resent_with_dup_and_same_id(self):
        # [MQTT-4.4.0-1] across a restart.
        kv = MemKV()
        h = Harness(store=open_store(kv))
        sub = self.persistent_subscriber(h)
        pub = h.client()
        pub.connect("pub")
        pub.publish("t/a", b"one", qos=1, packet_id=3)
        first = sub.expect(C.PUBLISH)
        self.assertFalse(first.dup)
        h2, _kv = restart(kv)
        again = h2.client()
        again.connect("sub", clean=False)
        resent = again.expect(C.PUBLISH)
        self.assertTrue(resent.dup)
        self.assertEqual(resent.packet_id, first.packet_id)
        self.assertEqual(resent.payload, b"one")

    def test_pubrel_stage_survives(self):
        # QoS 2 outbound: after PUBREC the broker owes PUBREL, never the PUBLISH again.
        kv = MemKV()
        h = Harness(store=open_store(kv))
        sub = self.persistent_subscriber(h, qos=2)
        pub = h.client()
        pub.connect("pub")
        pub.publish("t/a", b"two", qos=2, packet_id=3)
        pkt = sub.expect(C.PUBLISH)
        sub.ack(pkt)
        self.assertEqual(sub.expect(C.PUBREL).packet_id, pkt.packet_id)
        h2, kv2 = restart(kv)
        again = h2.client()
        again.connect("sub", clean=False)
        rel = again.expect(C.PUBREL)
        self.assertEqual(rel.packet_id, pkt.packet_id)
        self.assertEqual(again.take(), [])
        again.send_raw(bytes([0x70, 2, 0, pkt.packet_id]))  # PUBCOMP
        self.assertEqual(keys_of(kv2, b"D"), [])

    def test_inbound_qos2_not_delivered_twice_across_restart(self):
        # [MQTT-4.3.3-9] the packet id held until PUBREL survives the restart.
        kv = MemKV()
        h = Harness(store=open_store(kv))
        sub = self.persistent_subscriber(h, qos=2)
        sub.disconnect()
        pub = h.client()
        pub.connect("pub", clean=False)
        pub.publish("t/q", b"once", qos=2, packet_id=7)
        self.assertEqual(pub.expect(C.PUBREC).packet_id, 7)
        h2, _kv = restart(kv)
        pub2 = h2.client()
        pub2.connect("pub", clean=False)
        pub2.publish("t/q", b"once", qos=2, packet_id=7, dup=True)
        self.assertEqual(pub2.expect(C.PUBREC).packet_id, 7)
        pub2.send_raw(bytes([0x62, 2, 0, 7]))  # PUBREL
        self.assertEqual(pub2.expect(C.PUBCOMP).reason, C.RC_SUCCESS)
        again = h2.client()
        again.connect("sub", clean=False)
        got = [p for p in again.take() if p.ptype == C.PUBLISH]
        self.assertEqual([p.payload for p in got], [b"once"])

    def test_retained_restored_and_cleared_stays_cleared(self):
        kv = MemKV()
        h = Harness(store=open_store(kv))
        pub = h.client()
        pub.connect("pub")
        pub.publish("r/keep", b"kept", qos=1, retain=True, packet_id=1)
        pub.publish("r/gone", b"soon gone", qos=1, retain=True, packet_id=2)
        pub.publish("r/gone", b"", qos=1, retain=True, packet_id=3)
        pub.take()
        h2, _kv = restart(kv)
        self.assertEqual(h2.restored["retained"], 1)
        c = h2.client()
        c.connect("late")
        c.subscribe("r/#", qos=1)
        got = c.take()
        self.assertEqual([(p.topic, p.payload, p.retain) for p in got], [("r/keep", b"kept", True)])

    def test_clean_sessions_are_not_stored(self):
        kv = MemKV()
        h = Harness(store=open_store(kv))
        c = h.client()
        c.connect("clean", clean=True)
        c.subscribe("t", qos=1)
        self.assertEqual(keys_of(kv, b"S") + keys_of(kv, b"U"), [])

    def test_acknowledged_deliveries_leave_no_records(self):
        kv = MemKV()
        h = Harness(store=open_store(kv))
        sub = self.persistent_subscriber(h, qos=2)
        pub = h.client()
        pub.connect("pub")
        for i in range(3):
            pub.publish("t/%d" % i, b"x", qos=1 + i % 2, packet_id=i + 1)
        for pkt in sub.take():
            sub.ack(pkt)
            if pkt.qos == 2:
                rel = sub.expect(C.PUBREL)
                sub.send_raw(bytes([0x70, 2, 0, rel.packet_id]))
        self.assertEqual(keys_of(kv, b"D") + keys_of(kv, b"M"), [])
        sub.unsubscribe("t/#")
        self.assertEqual(keys_of(kv, b"U"), [])

    def test_expiry_runs_across_restart(self):
        # v5 Session Expiry: the time the broker was down counts.
        kv = MemKV()
        h = Harness(store=open_store(kv))
        c = self.persistent_subscriber(h, level=5, props=[(C.PROP_SESSION_EXPIRY_INTERVAL, 100)])
        c.disconnect()
        # Down for 50 s: the session is still there.
        h2, kv2 = restart(kv, now=10, wall=1700000000 + 50)
        self.assertEqual(h2.restored["sessions"], 1)
        # Down for 200 s in all: it expired while the broker was down.
        h3, kv3 = restart(kv2, now=10, wall=1700000000 + 200)
        self.assertEqual(h3.restored["sessions"], 0)
        self.assertEqual(keys_of(kv3, b"S") + keys_of(kv3, b"U"), [])

    def test_session_expires_by_clock_after_restart(self):
        kv = MemKV()
        h = Harness(store=open_store(kv))
        c = self.persistent_subscriber(h, level=5, props=[(C.PROP_SESSION_EXPIRY_INTERVAL, 30)])
        c.disconnect()
        h2, kv2 = restart(kv, now=500, wall=1700000000 + 10)  # 20 s of 30 left
        h2.advance(15)
        self.assertIsNotNone(h2.broker.sessions.find("sub"))
        h2.advance(10)
        self.assertIsNone(h2.broker.sessions.find("sub"))
        self.assertEqual(keys_of(kv2, b"S"), [])

    def test_clock_going_back_is_clamped(self):
        kv = MemKV()
        h = Harness(store=open_store(kv))
        c = self.persistent_subscriber(h, level=5, props=[(C.PROP_SESSION_EXPIRY_INTERVAL, 60)])
        c.disconnect()
        # A board without a real-time clock restarts at wall time "0".
        h2, _kv = restart(kv, now=5, wall=100)
        session = h2.broker.sessions.find("sub")
        self.assertLessEqual(session.expires_at, 5 + 60)

    def test_session_no_longer_persistent_is_forgotten(self):
        kv = MemKV()
        h = Harness(store=open_store(kv))
        c = self.persistent_subscriber(h, level=5, props=[(C.PROP_SESSION_EXPIRY_INTERVAL, 60)])
        c.disconnect()
        again = h.client(5)
        again.connect("sub", clean=False)  # Session Expiry 0 now
        self.assertEqual(keys_of(kv, b"S") + keys_of(kv, b"U"), [])

    def test_message_expiry_counts_downtime(self):
        # [MQTT-3.3.2-6] the interval less the time waited, across a restart.
        kv = MemKV()
        h = Harness(store=open_store(kv))
        sub = self.persistent_subscriber(h, level=5, props=[(C.PROP_SESSION_EXPIRY_INTERVAL, 1000)])
        sub.disconnect()
        pub = h.client(5)
        pub.connect("pub")
        pub.publish("t/short", b"s", qos=1, packet_id=1, props=[(C.PROP_MESSAGE_EXPIRY_INTERVAL, 20)])
        pub.publish("t/long", b"l", qos=1, packet_id=2, props=[(C.PROP_MESSAGE_EXPIRY_INTERVAL, 500)])
        pub.take()
        h2, _kv = restart(kv, now=3, wall=1700000000 + 100)
        again = h2.client(5)
        again.connect("sub", clean=False, props=[(C.PROP_SESSION_EXPIRY_INTERVAL, 1000)])
        got = [p for p in again.take() if p.ptype == C.PUBLISH]
        self.assertEqual([p.topic for p in got], ["t/long"])
        left = [v for k, v in got[0].props if k == C.PROP_MESSAGE_EXPIRY_INTERVAL]
        self.assertEqual(left, [400])

    def test_generations_keep_increasing(self):
        kv = MemKV()
        h = Harness(store=open_store(kv))
        c = self.persistent_subscriber(h)
        before = h.broker.sessions.find("sub").generation
        c.drop()
        h2, _kv = restart(kv)
        other = h2.client()
        other.connect("other", clean=False)
        self.assertGreater(h2.broker.sessions.find("other").generation, before)

    def test_batch_sync_leaves_the_window_to_the_shell(self):
        kv = MemKV()
        h = Harness(store=open_store(kv), store_sync="batch")
        sub = self.persistent_subscriber(h)
        sub.disconnect()
        syncs = kv.syncs
        pub = h.client()
        pub.connect("pub")
        pub.publish("t/a", b"x", qos=1, packet_id=1)
        pub.expect(C.PUBACK)
        self.assertEqual(kv.syncs, syncs)  # acked, not yet durable: the batch window
        h.broker.sync_store()
        h2, _kv = restart(kv)
        again = h2.client()
        again.connect("sub", clean=False)
        self.assertEqual(again.expect(C.PUBLISH).payload, b"x")


class ObservedKV(MemKV):
    """MemKV that counts the writes not yet synced."""

    def __init__(self):
        MemKV.__init__(self)
        self.unsynced = 0

    def put(self, key, value):
        MemKV.put(self, key, value)
        self.unsynced += 1

    def delete(self, key):
        MemKV.delete(self, key)
        self.unsynced += 1

    def sync(self):
        MemKV.sync(self)
        self.unsynced = 0


class TestGroupCommit(unittest.TestCase):
    """store_sync = "always": one sync per turn covers every record of the
    turn, and no output (PUBACK, PUBREC, PUBCOMP, a delivery) is taken while
    a record is not durable."""

    def run_turns(self, store_sync):
        """Persistent subscribers (3.1.1 QoS 2, v5 QoS 1) and three publishers
        whose inputs arrive in the same turn; returns ([outputs taken while
        records were unsynced, outputs taken], syncs per turn)."""
        kv = ObservedKV()
        h = Harness(store=open_store(kv), store_sync=store_sync)
        broker = h.broker
        late = [0, 0]
        take = broker.output.take

        def observed(cid):
            data = take(cid)
            if data:
                late[1] += 1
                if kv.unsynced:
                    late[0] += 1
            return data

        broker.output.take = observed
        sub3 = h.client()
        sub3.connect("sub3", clean=False)
        sub3.subscribe("t/#", qos=2)
        sub5 = h.client(5)
        sub5.connect("sub5", clean=True, props=[(C.PROP_SESSION_EXPIRY_INTERVAL, 600)])
        sub5.subscribe("t/#", qos=1)
        pubs = []
        for i in range(3):
            p = h.client()
            p.connect("pub%d" % i)
            pubs.append(p)
        per_turn = []
        for turn in range(4):
            syncs = kv.syncs
            for i, p in enumerate(pubs):  # one turn: every publisher's input, then one flush
                qos = 1 + (i + turn) % 2
                broker.data_received(p.cid, encode_packet(Publish("t/%d" % i, b"m%d" % turn, qos, False, False, turn + 1, None), 4), h.now)
            h.pump()
            per_turn.append(kv.syncs - syncs)
            for p in pubs:
                for pkt in p.take():
                    if pkt.ptype == C.PUBREC:
                        p.send(PubAck(C.PUBREL, pkt.packet_id, 0, None))
            for sub in (sub3, sub5):
                for pkt in sub.take():
                    if pkt.ptype == C.PUBLISH:
                        sub.ack(pkt)
                    elif pkt.ptype == C.PUBREL:
                        sub.send(PubAck(C.PUBCOMP, pkt.packet_id, 0, None))
        return late, per_turn

    def test_no_output_before_its_records_are_durable(self):
        late, per_turn = self.run_turns("always")
        self.assertGreater(late[1], 30)
        self.assertEqual(late[0], 0)  # (writes with no output to wait for them, the last acks' deletes, wait for the next)
        self.assertEqual(per_turn, [1, 1, 1, 1])  # three publishers' records, one sync
        # The observer sees it when output goes first (the batch mode's window).
        late, _per_turn = self.run_turns("batch")
        self.assertGreater(late[0], 10)


class FullKV(MemKV):
    """A backend that runs out of space after `room` puts."""

    def __init__(self, room):
        MemKV.__init__(self)
        self.room = room

    def put(self, key, value):
        if self.room <= 0:
            raise OSError(28, "No space left on device")
        self.room -= 1
        MemKV.put(self, key, value)


class TestStoreFailure(unittest.TestCase):
    def test_full_store_is_logged_and_the_broker_keeps_serving(self):
        kv = FullKV(room=4)
        store = open_store(kv)
        logged = []
        store.log = lambda level, text: logged.append((level, text))
        h = Harness(store=store)
        sub = h.client()
        sub.connect("sub", clean=False)
        sub.subscribe("t/#", qos=1)
        pub = h.client()
        pub.connect("pub")
        for i in range(5):
            pub.publish("t/%d" % i, b"x", qos=1, packet_id=i + 1)
            self.assertEqual(pub.expect(C.PUBACK).packet_id, i + 1)
            self.assertEqual(sub.expect(C.PUBLISH).topic, "t/%d" % i)
        self.assertFalse(pub.closed or sub.closed)
        self.assertGreater(store.errors, 0)
        self.assertEqual(logged[0][0], 40)
        self.assertIn("write failed", logged[0][1])


class TestEncryptedStore(unittest.TestCase):
    def setUp(self):
        self.a1 = aead(KEY1)
        if self.a1 is None:
            self.skipTest(NO_AES)
        self.a2 = aead(KEY2)

    def seeded(self):
        kv = MemKV()
        h = Harness(store=open_store(kv, keys={1: self.a1}, key_id=1))
        h.offline_subscriber("sub", "t/#")
        pub = h.client()
        pub.connect("pub")
        pub.publish("t/secret", b"payload-in-clear?", qos=1, packet_id=1)
        pub.expect(C.PUBACK)
        return kv

    def test_records_are_sealed_and_restore(self):
        kv = self.seeded()
        for key, value in items(kv, b""):
            self.assertEqual(value.find(b"payload-in-clear?"), -1)
            if key != b"V":
                self.assertEqual(value[1], 1)  # flags: encrypted
        store = open_store(kv.power_cut(), keys={1: self.a1}, key_id=1)
        h2 = Harness(store=store)
        again = h2.client()
        again.connect("sub", clean=False)
        self.assertEqual(again.expect(C.PUBLISH).payload, b"payload-in-clear?")

    def test_wrong_key_refused_by_name(self):
        kv = self.seeded()
        with self.assertRaises(StoreError) as cm:
            open_store(kv.power_cut(), keys={1: self.a2}, key_id=1)
        self.assertIn("wrong key", str(cm.exception))

    def test_missing_key_id_and_missing_key_refused(self):
        kv = self.seeded()
        with self.assertRaises(StoreError) as cm:
            open_store(kv.power_cut(), keys={2: self.a2}, key_id=2)
        self.assertIn("key id 1", str(cm.exception))
        with self.assertRaises(StoreError) as cm:
            open_store(kv.power_cut())
        self.assertIn("encrypted", str(cm.exception))

    def test_tampered_record_skipped_not_fatal(self):
        kv = self.seeded()
        tampered = items(kv, b"D")  # (the message is inline in its delivery's record)
        self.assertEqual(len(tampered), 1)
        for key, value in tampered:
            bad = bytearray(value)
            bad[-20] ^= 0x04  # a ciphertext bit; the record's own CRC is the backend's business
            kv.put(key, bytes(bad))
        kv.sync()
        h2, _kv = restart(kv, keys={1: self.a1}, key_id=1)
        self.assertGreaterEqual(h2.restored["skipped"], 1)

    def test_record_moved_under_another_key_fails(self):
        # The AAD binds a record to its key: a session record copied under
        # another client id does not authenticate.
        kv = self.seeded()
        kv.put(b"Sintruder", kv.get(b"Ssub"))
        kv.sync()
        h2, _kv = restart(kv, keys={1: self.a1}, key_id=1)
        self.assertEqual(h2.restored["skipped"], 1)
        self.assertIsNone(h2.broker.sessions.find("intruder"))
        self.assertIsNotNone(h2.broker.sessions.find("sub"))

    def test_nonces_never_repeat_across_restarts(self):
        kv = self.seeded()
        seen = set()
        for boot in range(3):
            store = open_store(kv, keys={1: self.a1}, key_id=1)
            for i in range(5):
                store.put(b"X", b"%d" % i, [boot, i])
            store.sync()
            for _key, value in items(kv, b"X"):
                seen.add(bytes(value[3:15]))
            for key, _value in items(kv, b"X"):
                kv.delete(key)
        self.assertEqual(len(seen), 15)

    def test_key_rotation_reads_old_writes_new(self):
        kv = self.seeded()
        store = open_store(kv.power_cut(), keys={1: self.a1, 2: self.a2}, key_id=2)
        h2 = Harness(store=store)
        self.assertEqual(h2.restored["sessions"], 1)
        h2.client().connect("newcomer", clean=False)
        self.assertEqual(store.backend.get(b"Snewcomer")[2], 2)  # new records under key id 2


if __name__ == "__main__":
    unittest.main()

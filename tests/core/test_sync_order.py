# store_sync = "always": what leaves before the store's sync and what after
# it, over a real Driver, Turns and Broker with a store on an in-memory
# backend that counts the records not yet synced; the shell is played by
# in-memory handles (as tests/core/test_turns.py). A subscriber's QoS 0/1
# PUBLISHes go before the sync; every acknowledgement to a publisher
# (PUBACK, PUBREC, PUBCOMP), a CONNACK, a SUBACK, a PUBREL, a QoS 2 PUBLISH
# and a close go only when nothing is unsynced, and one connection's output
# keeps its order (docs/persistence.md, "Deliveries before the sync").
# Runs unchanged under MicroPython (tests/upy/run.py).

import unittest

from common.mqtt import consts as C
from common.mqtt.packets import Connect, Disconnect, PubAck, Publish, Subscribe, encode_packet
from tests.core.harness import Harness
from tests.core.test_driver import Handle
from tests.core.test_persist import ObservedKV, open_store, restart
from tests.core.test_turns import Shell


class Watched(Handle):
    """A handle that notes, for each packet and close, how many records
    were not yet synced when it left."""

    def __init__(self, kv, level=4):
        Handle.__init__(self, level)
        self.kv = kv
        self.left = []  # (packet type or "close", unsynced records then)

    def write(self, data):
        n = len(self.inbox)
        Handle.write(self, data)
        for p in self.inbox[n:]:
            self.left.append((p.ptype, self.kv.unsynced))

    def half_close(self):
        self.left.append(("close", self.kv.unsynced))
        Handle.half_close(self)

    def close(self):
        self.left.append(("close", self.kv.unsynced))
        Handle.close(self)

    def took(self):
        """What left since the last call."""
        got = self.left
        self.left = []
        return got


def publish(topic, payload, qos, pid, level=4):
    return encode_packet(Publish(topic, payload, qos, False, False, pid, None), level)


class Rig(Shell):
    def __init__(self, **overrides):
        self.kv = ObservedKV()
        Shell.__init__(self, store=open_store(self.kv), store_sync="always", **overrides)
        self.driver.restore(1)

    def join(self, client_id, level=4, clean=True, sub=None, qos=1):
        """A client connected (and subscribed to `sub`) in turns of its own."""
        h = Watched(self.kv, level)
        cid = self.driver.connection_made(h)
        self.turn(cid, encode_packet(connect_packet(client_id, level, clean), level))
        if sub is not None:
            self.turn(cid, encode_packet(Subscribe(1, [(sub, qos)], None), level))
        h.took()
        return cid, h

    def turn(self, cid, data):
        """One loop turn with this one input."""
        self.read(cid, data)
        while self.end_of_turn():
            pass


def connect_packet(client_id, level, clean):
    props = None
    if level == 5 and not clean:
        props = [(C.PROP_SESSION_EXPIRY_INTERVAL, 600)]
        clean = True  # v5: Clean Start, the session kept by its expiry
    return Connect(level, clean, 0, client_id, props=props)


class TestDeliveriesBeforeTheSync(unittest.TestCase):
    def check_qos1(self, level):
        r = Rig()
        _sub, hs = r.join("sub", level, clean=False, sub="t/#")
        pub, hp = r.join("pub", level)
        r.read(pub, publish("t/1", b"one", 1, 7, level))
        # In the turn: the delivery is out while its records are not durable,
        # the publisher's PUBACK is not.
        sent = hs.took()
        self.assertEqual([t for t, _u in sent], [C.PUBLISH])
        self.assertGreater(sent[0][1], 0)
        self.assertEqual(hp.took(), [])
        self.assertTrue(r.turns.due)
        syncs = r.kv.syncs
        r.end_of_turn()
        # [MQTT-4.3.2-2] the PUBACK, once the message is durable for the subscriber.
        self.assertEqual(hp.took(), [(C.PUBACK, 0)])
        self.assertEqual(r.kv.syncs, syncs + 1)

    def test_qos1_v311_delivery_goes_first_its_puback_after_the_sync(self):
        self.check_qos1(4)

    def test_qos1_v5_delivery_goes_first_its_puback_after_the_sync(self):
        self.check_qos1(5)

    def test_qos0_delivery_and_an_ack_with_nothing_to_sync_go_at_once(self):
        # Granted QoS 0: nothing is stored for the subscriber, so the
        # publisher's PUBACK has nothing to wait for either.
        r = Rig()
        _sub, hs = r.join("sub", clean=False, sub="t/#", qos=0)
        pub, hp = r.join("pub", clean=False)
        r.read(pub, publish("t/0", b"zero", 1, 3))
        self.assertEqual(hs.took(), [(C.PUBLISH, 0)])
        self.assertEqual(hp.took(), [(C.PUBACK, 0)])
        # With a QoS 1 subscriber too, the PUBACK waits; the QoS 0 copy does not.
        _sub1, hs1 = r.join("sub1", clean=False, sub="t/#", qos=1)
        r.read(pub, publish("t/0", b"zero", 1, 4))
        self.assertEqual([t for t, _u in hs.took()], [C.PUBLISH])
        self.assertEqual([t for t, _u in hs1.took()], [C.PUBLISH])
        self.assertEqual(hp.took(), [])
        r.end_of_turn()
        self.assertEqual(hp.took(), [(C.PUBACK, 0)])

    def test_qos2_waits_for_the_sync_at_every_step(self):
        # Outbound QoS 2 stays in step with the store: its PUBLISH leaves once
        # SENT is durable, its PUBREL once RELEASED is; the publisher's PUBREC
        # and PUBCOMP once its packet id is (un)recorded [MQTT-4.3.3-8].
        r = Rig()
        sub, hs = r.join("sub", clean=False, sub="t/#", qos=2)
        pub, hp = r.join("pub", clean=False)
        r.read(pub, publish("t/2", b"two", 2, 9))
        self.assertEqual((hs.took(), hp.took()), ([], []))
        r.end_of_turn()
        out = hs.took()
        self.assertEqual(out, [(C.PUBLISH, 0)])
        self.assertEqual(hp.took(), [(C.PUBREC, 0)])
        d = r.broker.sessions.find("sub").inflight[0]
        r.read(sub, encode_packet(PubAck(C.PUBREC, d.packet_id(), 0, None), 4))
        self.assertEqual(hs.took(), [])
        r.end_of_turn()
        self.assertEqual(hs.took(), [(C.PUBREL, 0)])
        r.read(pub, encode_packet(PubAck(C.PUBREL, 9, 0, None), 4))
        self.assertEqual(hp.took(), [])
        r.end_of_turn()
        self.assertEqual(hp.took(), [(C.PUBCOMP, 0)])

    def test_one_connections_output_keeps_its_order(self):
        # A client subscribed to what it publishes: its own PUBLISH may go
        # before the sync, its PUBACK not, and nothing written after that
        # PUBACK overtakes it (the rest of its output waits with it).
        r = Rig()
        me, h = r.join("me", clean=False, sub="t/#")
        r.read(me, publish("t/a", b"a", 1, 1) + publish("t/b", b"b", 1, 2))
        self.assertEqual([t for t, _u in h.took()], [C.PUBLISH])  # t/a, before the sync
        r.end_of_turn()
        self.assertEqual([t for t, _u in h.took()], [C.PUBACK, C.PUBLISH, C.PUBACK])
        self.assertEqual([(p.topic, p.qos) for p in h.inbox if p.ptype == C.PUBLISH], [("t/a", 1), ("t/b", 1)])

    def test_connack_suback_and_a_close_wait_for_the_sync(self):
        r = Rig()
        h = Watched(r.kv)
        cid = r.driver.connection_made(h)
        r.read(cid, encode_packet(connect_packet("p", 4, False), 4))
        r.read(cid, encode_packet(Subscribe(1, [("t/#", 1)], None), 4))
        self.assertEqual(h.took(), [])
        r.end_of_turn()
        self.assertEqual(h.took(), [(C.CONNACK, 0), (C.SUBACK, 0)])
        r.read(cid, encode_packet(Disconnect(0, None), 4))  # its session's end is written
        self.assertEqual(h.took(), [])
        r.end_of_turn()
        self.assertEqual(h.took(), [("close", 0)])

    def test_a_driver_flush_writes_deliveries_then_syncs_then_acks(self):
        # A shell without turns.py (the firmware): one flush, two rounds.
        r = Rig()
        _sub, hs = r.join("sub", clean=False, sub="t/#")
        pub, hp = r.join("pub")
        r.driver.data_received(pub, publish("t/1", b"x", 1, 5))
        syncs = r.kv.syncs
        r.driver.flush()
        self.assertEqual(r.kv.syncs, syncs + 1)
        sent = hs.took()
        self.assertEqual([t for t, _u in sent], [C.PUBLISH])
        self.assertGreater(sent[0][1], 0)
        self.assertEqual(hp.took(), [(C.PUBACK, 0)])

    def test_a_subscribers_acks_cost_no_sync_the_tick_syncs_them(self):
        # A change no ack waits for (a delivery done: its records deleted)
        # is not worth a sync of its own: the next ack's, or the driver's
        # tick within a second, makes it durable.
        r = Rig()
        sub, _hs = r.join("sub", clean=False, sub="t/#")
        pub, _hp = r.join("pub")
        r.turn(pub, publish("t/1", b"x", 1, 5))
        d = r.broker.sessions.find("sub").inflight[0]
        syncs = r.kv.syncs
        r.turn(sub, encode_packet(PubAck(C.PUBACK, d.packet_id(), 0, None), 4))
        self.assertEqual(r.kv.syncs, syncs)
        self.assertGreater(r.kv.unsynced, 0)
        r.driver.tick()
        self.assertEqual((r.kv.syncs, r.kv.unsynced), (syncs + 1, 0))

    def test_a_power_cut_before_the_sync_loses_only_what_was_not_acknowledged(self):
        # The crash argument (docs/persistence.md): the subscriber has the
        # QoS 1 message, the store may not, and its publisher was never
        # acknowledged, so it sends it again; once acknowledged, it is kept.
        r = Rig()
        _sub, hs = r.join("sub", clean=False, sub="t/#")
        pub, hp = r.join("pub", clean=False)
        r.read(pub, publish("t/1", b"early", 1, 4))
        self.assertEqual([t for t, _u in hs.took()], [C.PUBLISH])
        self.assertEqual(hp.took(), [])
        h2, _kv = restart(r.kv, store_sync="always")
        self.assertEqual(h2.restored["messages"], 0)  # not kept, and not acknowledged
        r.end_of_turn()
        self.assertEqual(hp.took(), [(C.PUBACK, 0)])
        h3, _kv = restart(r.kv, store_sync="always")
        self.assertEqual(h3.restored["messages"], 1)  # acknowledged: kept (the subscriber's SENT delivery)
        again = h3.client()
        self.assertTrue(again.connect("sub", clean=False).session_present)
        got = again.take()
        self.assertEqual([(p.topic, p.payload, p.dup) for p in got], [("t/1", b"early", True)])


class TestHarnessRounds(unittest.TestCase):
    def test_a_round_without_the_driver_still_syncs_first(self):
        # next_dirty() as other callers use it (a round that is not early):
        # the sync, then everything.
        kv = ObservedKV()
        h = Harness(store=open_store(kv), store_sync="always")
        sub = h.client()
        sub.connect("sub", clean=False)
        sub.subscribe("t/#", qos=1)
        pub = h.client()
        pub.connect("pub")
        h.broker.data_received(pub.cid, publish("t/1", b"x", 1, 2), h.now)
        self.assertGreater(kv.unsynced, 0)
        h.pump()
        self.assertEqual(kv.unsynced, 0)
        self.assertEqual([p.ptype for p in pub.take()], [C.PUBACK])
        self.assertEqual([p.ptype for p in sub.take()], [C.PUBLISH])

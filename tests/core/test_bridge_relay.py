# The bridge as a faithful relay (common/bridge/bridge.py, client.py):
# QoS 2 upward survives a power cut of the edge at every step of its flow,
# exactly once; a "not now" refusal is retried, never dead-lettered; the
# bridge's queue never slows a local publisher; a silent upstream is seen
# as stalled. Between two sans-I/O brokers (tests/core/test_bridge.py's
# Pair). Runs on CPython and MicroPython.

import unittest

from common.client.client import CONNECTED, RECEIVED, Client
from common.mqtt import consts as C
from common.mqtt.packets import PubAck
from tests.core.harness import Harness
from tests.core.memkv import MemKV
from tests.core.test_bridge import Pair, payloads, rule
from tests.core.test_persist import open_store, restart
from tests.core.wire import Recorder, Wire


def to_client(wire):
    """What `wire`'s broker has for its clients goes to them (half a round)."""
    h = wire.h
    moved = False
    cid = h.broker.output.next_dirty()
    while cid >= 0:
        client = h.clients.get(cid)
        data = h.broker.output.take(cid)
        if data and client is not None:
            client.receive(bytes(data))
            moved = True
        cid = h.broker.output.next_dirty()
    return moved


def to_broker(wire):
    """What `wire`'s client wrote goes to the broker (the other half)."""
    out = wire.client.take_output()
    if out and not wire.closed:
        wire.h.broker.data_received(wire.cid, out, wire.h.now)
        return True
    return False


def one_round(wire):
    """One exchange each way on `wire`; False when neither side had anything."""
    return to_client(wire) | to_broker(wire)


# Orders in which the two links move, half a round per letter (l / L: the
# local link to the bridge / to the broker; u / U: the upstream link), so
# that a power cut finds each side ahead of the other in turn. (The third
# lets the local side finish a step while the upstream's answer to it is
# still in transit: the order that lost a PUBREL before.)
ORDERS = ("lLuU", "uUlL", "ulLlLUlL")


def open_up(p):
    """The upstream connection of Pair `p` opens; nothing moves yet."""
    p.up = Wire(p.cloud, p.bridge.up)
    p.bridge.up_open(0)


def half_steps(p, n, order):
    """`n` half rounds over both links of Pair `p` in `order` (repeated): what
    a client wrote and was not yet moved is in transit (a power cut loses it).
    False when the last whole turn of `order` moved nothing (all done)."""
    moved = True
    for k in range(n):
        if k % len(order) == 0:
            if k and not moved:
                return False
            moved = False
        p.sync_local()
        step = order[k % len(order)]
        wire = p.local if step in "lL" else p.up
        if wire is not None:
            moved = (to_client if step in "lu" else to_broker)(wire) or moved
    return True


def publish_qos2(h, n):
    """`n` QoS 2 messages from a device of harness `h`, each flow completed
    (PUBREC, PUBREL, PUBCOMP): the publisher handed them over for good."""
    dev = h.client(5)
    dev.connect("device")
    done = 0
    for i in range(n):
        dev.publish("up/q", b"%d" % i, 2, packet_id=i + 1)
        for p in dev.take():
            if p.ptype == C.PUBREC:
                dev.send(PubAck(C.PUBREL, p.packet_id))
        for p in dev.take():
            if p.ptype == C.PUBCOMP:
                done += 1
    dev.disconnect()
    return done


class TestQos2Upward(unittest.TestCase):
    def run_cut(self, cut, level, order):
        """Forward 3 QoS 2 messages; the edge loses power after `cut` rounds
        (only what its store synced survives, the link breaks); then it comes
        back and the bridge finishes. What the cloud's consumer got."""
        backend = MemKV()
        p = Pair(edge=Harness(store=open_store(backend)), window=4, max_inflight=4, protocol=level)
        p.connect_up()
        cons = p.consumer("edge1/#")
        p.drop_up()  # (the messages wait in the edge's store)
        self.assertEqual(publish_qos2(p.edge, 3), 3)
        p.settle()
        open_up(p)  # from here on, half a round at a time
        going = half_steps(p, cut, order)
        got = payloads(cons)  # (what reached the consumer before the cut)
        p.up.drop()  # the power cut: the link goes with the edge
        edge2, _ = restart(backend)
        p2 = Pair(edge=edge2, cloud=p.cloud, window=4, max_inflight=4, protocol=level)
        p2.connect_up()
        got += payloads(cons)
        session = edge2.broker.sessions.find("siskin-bridge-cloud")
        self.assertEqual(session.queue.count + len(session.inflight), 0, (order, cut))
        # The cloud holds no QoS 2 id of the bridge's awaiting a PUBREL (a
        # stuck id would take its receive quota for good) [MQTT-4.3.3-9].
        up = p.cloud.broker.sessions.find("siskin-cloud")
        self.assertEqual(list(up.qos2_in), [], (order, cut))
        return got, going

    def test_a_power_cut_at_every_step_loses_nothing_and_duplicates_nothing(self):
        # [MQTT-4.3.3-10] a resent PUBLISH whose PUBREC was sent is not
        # delivered again; [MQTT-4.4.0-1] PUBREL resent on resume.
        for level, order in ((5, ORDERS[2]), (4, ORDERS[1])):
            cut = 0
            going = True
            while going:  # every cut until the flow was over before it
                got, going = self.run_cut(cut, level, order)
                self.assertEqual(sorted(got), [b"0", b"1", b"2"], (level, order, cut, got))
                cut += 1

    def test_the_local_record_stays_until_the_upstream_pubcomp(self):
        p = Pair(window=4)
        p.connect_up()
        p.consumer("edge1/#")
        publish_qos2(p.edge, 1)
        session = p.edge.broker.sessions.find("siskin-bridge-cloud")
        # Round by round until the upstream's PUBREC is in.
        while p.bridge.up.holds(1) != RECEIVED:
            self.assertTrue(one_round(p.local) | one_round(p.up))
        self.assertEqual(len(session.inflight), 1)  # not yet released here
        p.settle()
        self.assertEqual(len(session.inflight), 0)
        self.assertEqual(p.bridge.up.pending(), 0)
        self.assertEqual(p.bridge.sent, 1)

    def test_qos1_is_at_least_once_through_a_power_cut(self):
        for cut in range(40):
            backend = MemKV()
            p = Pair(edge=Harness(store=open_store(backend)), window=4, max_inflight=4)
            p.connect_up()
            cons = p.consumer("edge1/#", 1)
            p.drop_up()
            dev = p.edge.client(4)
            dev.connect("device")
            for i in range(4):
                dev.publish("up/q", b"%d" % i, 1, packet_id=i + 1)
            self.assertEqual(len([x for x in dev.take() if x.ptype == C.PUBACK]), 4)
            p.settle()
            open_up(p)
            half_steps(p, cut, ORDERS[cut % 3])
            got = payloads(cons)
            p.up.drop()
            edge2, _ = restart(backend)
            p2 = Pair(edge=edge2, cloud=p.cloud, window=4, max_inflight=4)
            p2.connect_up()
            got += payloads(cons)
            self.assertEqual(sorted(set(got)), [b"0", b"1", b"2", b"3"], (cut, got))


class TestNotNow(unittest.TestCase):
    def test_quota_exceeded_is_retried_slower_never_dead_lettered(self):
        # The cloud refuses (v5 PUBACK 0x97) while its consumer's queue is
        # full; the bridge sends the refused message again later, in front.
        cloud = Harness(max_queued_messages=2, queue_full="refuse")
        p = Pair(cloud=cloud, protocol=5, window=8, max_inflight=8, rules=[rule("out", "#", "up/", "edge1/", 1)])
        p.connect_up()
        cons = p.consumer("edge1/#", 1)
        cons.disconnect()  # offline: its queue fills
        dev = p.edge.client(4)
        dev.connect("device")
        for i in range(6):
            dev.publish("up/q", b"%d" % i, 1, packet_id=i + 1)
        p.settle()
        b = p.bridge
        self.assertEqual(b.dead_lettered, 0)
        self.assertGreater(b.up.retried, 0)
        self.assertEqual(b.sent, 2)
        self.assertEqual(b.up.window, 1)  # slowed down
        session = p.edge.broker.sessions.find("siskin-bridge-cloud")
        self.assertEqual(session.queue.count + len(session.inflight), 4)  # still here, not acknowledged
        # The consumer comes back and drains its queue; the bridge's retries go through.
        cons2 = p.cloud.client(4)
        cons2.connect("consumer", clean=False)
        got = payloads(cons2)
        for _ in range(40):
            p.cloud.now += 1
            p.edge.now += 1
            b.tick(p.cloud.now * 1000)
            p.settle()
            got += payloads(cons2)
            if b.sent == 6:
                break
        self.assertEqual(sorted(got), [b"%d" % i for i in range(6)])
        self.assertEqual(b.dead_lettered, 0)
        self.assertEqual(session.queue.count + len(session.inflight), 0)

    def test_a_refusal_for_good_is_dead_lettered(self):
        p = Pair(rules=[rule("out", "#", "up/", "$SYS/")], protocol=5)  # not authorized (0x87)
        p.connect_up()
        dev = p.edge.client(4)
        dev.connect("device")
        dev.publish("up/x", b"x", 1, packet_id=1)
        p.settle()
        self.assertEqual((p.bridge.dead_lettered, p.bridge.up.retried), (1, 0))


class TestNeverInTheWay(unittest.TestCase):
    def test_a_silent_upstream_does_not_hold_a_publisher_back(self):
        # The upstream takes the messages in flight and answers nothing: the
        # bridge's online session fills past its high-water mark, and the
        # publisher is still read and acknowledged (only the queue budget
        # and queue_full apply). Throttled before the bridge v2.
        edge = Harness(max_queued_messages=40)
        p = Pair(edge=edge, window=4, max_inflight=4)
        edge.broker.routing.unthrottled.append("siskin-bridge-cloud")  # (what the Runner does)
        p.connect_up()
        dev = edge.client(4)
        dev.connect("device")
        acked = 0
        for i in range(30):
            dev.publish("up/q", b"%d" % i, 1, packet_id=i + 1)
            p.local.settle()  # the bridge takes what the broker hands it; nothing comes back from upstream
            acked += len([x for x in dev.take() if x.ptype == C.PUBACK])
        session = edge.broker.sessions.find("siskin-bridge-cloud")
        self.assertIsNotNone(session.conn)  # online: the upstream is connected (and silent)
        self.assertGreaterEqual(session.queue.count, edge.broker.routing.high_count)
        self.assertEqual(edge.broker.throttled, [])
        self.assertEqual(acked, 30)


class TestSilentUpstream(unittest.TestCase):
    def test_stalled_when_an_ack_is_overdue_then_dropped_at_keep_alive(self):
        rec = Recorder()
        c = Client(rec, "x", 4)
        c.keep_alive = 30
        c.stall_ms = 5000
        c.connect(0)
        c.data_received(b"\x20\x02\x00\x00", 10)  # CONNACK
        c.publish("t", b"p", 1, token=1)
        c.pump(1000)
        c.take_output()
        self.assertEqual(c.tick(1000), 6000)
        self.assertFalse(c.stalled(5999))
        c.tick(6000)
        self.assertTrue(c.stalled(6000))
        c.data_received(b"\xd0\x00", 7000)  # a byte: alive; the clock restarts
        self.assertFalse(c.stalled(7000))
        self.assertTrue(c.stalled(12000))
        c.tick(36999)
        self.assertEqual(c.state, CONNECTED)
        c.tick(37000)  # keep-alive seconds of silence with an answer owed
        self.assertEqual(rec.events[-1][0], "closed")

    def test_the_bridge_says_stalled(self):
        p = Pair(stall_timeout=2.0, keepalive=30)
        p.connect_up()
        dev = p.edge.client(4)
        dev.connect("device")
        dev.publish("up/q", b"1", 1, packet_id=1)
        p.local.settle()  # up it goes; the cloud never reads it
        b = p.bridge
        ms = p.edge.now * 1000
        b.tick(ms)
        self.assertEqual(b.state_name(), "connected")
        b.tick(ms + 2000)
        self.assertEqual(b.state_name(), "stalled")
        self.assertIn("stalled: no answer for 2 s", p.logged[-1])
        values = dict(b.sys_values(0, 0, ms + 2000))
        self.assertEqual(values["$SYS/broker/bridge/cloud/state"], "stalled")
        self.assertEqual(values["$SYS/broker/bridge/cloud/inflight"], "1")
        p.up.settle()  # the upstream answers
        b.tick(ms + 3000)
        self.assertEqual(b.state_name(), "connected")
        self.assertIn("answers again (stalled for 1 s)", p.logged[-1])


if __name__ == "__main__":
    unittest.main()

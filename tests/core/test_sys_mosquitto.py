# $SYS figures under Mosquitto's names: the load/ moving averages
# (common/broker/sys_load.py), publish/bytes/*, store/messages/bytes.

import unittest

from common.broker.sys_load import HORIZONS, LOAD_FIGURES, ONE, Load, decay, hundredths
from common.broker.sys_topics import PREFIX, publish_sys, sys_values
from common.mqtt import consts as C
from tests.core.harness import Harness


def snap_with(**counts):
    snap = {key: 0 for _, key in LOAD_FIGURES if key is not None}
    snap.update(counts)
    return snap


def retained_sys(h, suffix):
    msg = h.broker.routing.retained.current(PREFIX + suffix, h.now)
    return None if msg is None else bytes(msg.payload).decode()


class TestLoad(unittest.TestCase):
    def test_decay_is_exp_in_fixed_point(self):
        self.assertEqual(decay(HORIZONS[0][1], 0), ONE)
        # exp(-60/60) = 0.36788, exp(-10/300) = 0.96722, exp(-900/900) = 0.36788
        for factor, seconds, want in (
            (HORIZONS[0][1], 60, 0.36788),
            (HORIZONS[1][1], 10, 0.96722),
            (HORIZONS[2][1], 900, 0.36788),
        ):
            self.assertAlmostEqual(decay(factor, seconds) / ONE, want, places=3)

    def test_a_steady_rate_is_approached_as_mosquitto_does(self):
        # 10 messages a second = 600 a minute; after one minute of 10 s
        # rounds the 1-minute average is 600 * (1 - e^-1) = 379.27, the
        # 5-minute one 600 * (1 - e^-0.2) = 108.76.
        load = Load(snap_with(), 0, 100)
        for i in range(1, 7):
            load.update(snap_with(messages_received=100 * i), 0, 100 + 10 * i)
        values = dict(load.values())
        self.assertAlmostEqual(float(values["load/messages/received/1min"]), 379.27, delta=0.1)
        self.assertAlmostEqual(float(values["load/messages/received/5min"]), 108.76, delta=0.1)
        self.assertAlmostEqual(
            float(values["load/publish/received/15min"]), 600 * (1 - 2.718281828 ** (-60 / 900)), delta=0.1
        )
        self.assertEqual(values["load/messages/sent/1min"], "0.00")
        # Then nothing: the averages decay towards 0, never below.
        for i in range(7, 100):
            load.update(snap_with(messages_received=600), 0, 100 + 10 * i)
        self.assertEqual(dict(load.values())["load/messages/received/1min"], "0.00")

    def test_the_drops_and_a_round_within_the_same_second(self):
        load = Load(snap_with(), 0, 5)
        load.update(snap_with(), 30, 5)  # no time passed: no rate from it
        load.update(snap_with(), 30, 65)  # 30 drops in 60 s: 30 a minute
        values = dict(load.values())
        # 30 * (1 - e^-1) = 18.96 (a hundredth off at most: integers)
        self.assertAlmostEqual(float(values["load/publish/dropped/1min"]), 18.96, delta=0.011)
        self.assertEqual(hundredths(1896), "18.96")
        self.assertEqual(len(values), len(LOAD_FIGURES) * 3)


class TestMosquittoNames(unittest.TestCase):
    def test_payload_bytes_in_and_out_and_held(self):
        h = Harness()
        sub3 = h.client(4)
        sub3.connect("sub3")
        sub3.subscribe("t/#", 1)
        sub5 = h.client(5)
        sub5.connect("sub5")
        sub5.subscribe("t/#", 0)
        pub = h.client(4)
        pub.connect("pub")
        pub.publish("t/1", b"12345", 0)  # 3.1.1 and v5 subscribers: routed, copied
        pub.publish("t/2", b"1234567", 1, packet_id=1)
        pub.publish("t/kept", b"abc", 0, retain=True)
        got = [m for c in (sub3, sub5) for m in c.take() if m.ptype == C.PUBLISH]
        self.assertEqual(len(got), 6)
        values = dict(sys_values(h.broker.snapshot(), h.now))
        self.assertEqual(values["publish/bytes/received"], "15")
        self.assertEqual(values["publish/bytes/sent"], "30")
        # Held: the retained message, and the QoS 1 copy until sub3 acks it.
        self.assertEqual(values["store/messages/bytes"], "10")
        for m in got:
            if m.qos:
                sub3.ack(m)
        self.assertEqual(dict(sys_values(h.broker.snapshot(), h.now))["store/messages/bytes"], "3")

    def test_a_3_1_1_frame_forwarded_as_it_came_counts_its_payload(self):
        h = Harness()
        sub = h.client(4)
        sub.connect("sub")
        sub.subscribe("t", 0)
        pub = h.client(4)
        pub.connect("pub")
        pub.publish("t", b"0123456789", 0)
        self.assertEqual(len([m for m in sub.take() if m.ptype == C.PUBLISH]), 1)
        st = h.broker.stats
        self.assertEqual((st.publish_bytes_received, st.publish_bytes_sent), (10, 10))
        self.assertEqual(h.broker.routing.messages.payload_bytes, 0)  # nothing kept

    def test_publish_sys_publishes_the_load_averages(self):
        h = Harness()
        publish_sys(h.broker, h.now)
        self.assertEqual(retained_sys(h, "load/connections/1min"), "0.00")
        for i in range(6):
            c = h.client(4)
            c.connect("c%d" % i)
        h.advance(60)
        publish_sys(h.broker, h.now)
        # 6 connections in a minute: 6 * (1 - e^-1) = 3.79 a minute
        self.assertAlmostEqual(float(retained_sys(h, "load/connections/1min")), 3.79, delta=0.011)
        self.assertEqual(retained_sys(h, "load/sockets/1min"), retained_sys(h, "load/connections/1min"))

    def test_sys_taking_most_of_the_message_slabs_is_said_once(self):
        # Each $SYS topic keeps a retained message, a slab of max_messages: a
        # pool that leaves the clients fewer than half gets a warning that
        # says how many are left, at the first publication only.
        lines = []
        first = Harness()
        publish_sys(first.broker, first.now, 1)
        topics = first.broker.routing.retained.own
        for slabs, warned in ((topics * 2 - 1, True), (topics * 2, False)):
            h = Harness(max_messages=slabs)
            h.broker.set_logger(lambda level, text: lines.append((level, text)))
            del lines[:]
            publish_sys(h.broker, h.now, 1)
            publish_sys(h.broker, h.now + 1, 1)
            said = [t for level, t in lines if level == 30 and "message slabs" in t]
            if warned:
                left = slabs - topics
                self.assertEqual(len(said), 1, lines)
                self.assertIn("%d retained topics hold %d of the %d message slabs" % (topics, topics, slabs), said[0])
                self.assertIn("leaves %d for the clients' messages" % left, said[0])
            else:
                self.assertEqual(said, [], lines)


if __name__ == "__main__":
    unittest.main()

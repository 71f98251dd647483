# Bridge egress pacing (common/bridge/pacing.py), on both interpreters: the
# token arithmetic (spacing, a credit of one publish, bytes, the upstream not connected, a
# local resend replacing its waiting copy, QoS 0 over the window dropped),
# the aws profile's defaults, and a bridge between two in-memory brokers
# whose backlog goes up at its rate, in order, nothing lost.

import unittest

from common.bridge.bridge import Bridge
from common.bridge.pacing import DROP, SEND, WAIT, Pacer
from common.mqtt.packets import Publish
from tests.core.test_bridge import Pair, bridge_settings, payloads, publish_acked, rule


def msg(pid=1, qos=1, size=10):
    return Publish("t", b"x" * (size - 1), qos, False, False, pid, None)


class TestPacer(unittest.TestCase):
    def test_publishes_are_spaced(self):
        p = Pacer(100, 0, 32)
        self.assertEqual(p.defer(msg(1), 1000, True), SEND)
        self.assertEqual(p.defer(msg(2), 1000, True), WAIT)
        self.assertEqual(p.defer(msg(3), 1000, True), WAIT)
        sent = []
        self.assertEqual(p.drain(1005, sent.append), 1010)  # the next at +10 ms
        self.assertEqual(sent, [])
        self.assertEqual(p.drain(1010, sent.append), 1020)
        self.assertEqual([m.packet_id for m in sent], [2])
        # A long idle saves up one publish (CREDIT), no more: two at once, then 10 ms again.
        self.assertEqual(p.drain(60000, sent.append), 0)
        self.assertEqual([m.packet_id for m in sent], [2, 3])
        self.assertEqual(p.defer(msg(4), 60000, True), SEND)
        self.assertEqual(p.defer(msg(5), 60000, True), WAIT)

    def test_at_most_the_rate_in_any_second(self):
        p = Pacer(50, 0, 1000)
        sent = []
        for i in range(200):
            if p.defer(msg(i + 1), 0, True) == SEND:
                sent.append(0)
        times = list(sent)
        for ms in range(1, 4001):
            p.drain(ms, lambda m, ms=ms: times.append(ms))
        for start in range(0, 3000, 7):
            self.assertLessEqual(len([t for t in times if start <= t < start + 1000]), 51)  # the rate + CREDIT
        self.assertEqual(len(times), 200)  # all went, in 4 s

    def test_bytes(self):
        p = Pacer(0, 1000, 32)
        self.assertEqual(p.defer(msg(1, size=500), 0, True), SEND)
        self.assertEqual(p.defer(msg(2, size=10), 0, True), WAIT)
        self.assertEqual(p.drain(1, list().append), 500)  # its 500 bytes are paid at 0.5 s

    def test_waits_while_the_upstream_is_away(self):
        p = Pacer(100, 0, 32)
        self.assertEqual(p.defer(msg(1), 0, False), WAIT)
        self.assertEqual(len(p.waiting), 1)

    def test_a_resend_replaces_its_waiting_copy(self):
        p = Pacer(100, 0, 32)
        p.defer(msg(1), 0, True)
        p.defer(msg(2), 0, True)
        again = msg(2)
        self.assertEqual(p.defer(again, 0, True), WAIT)
        self.assertEqual(len(p.waiting), 1)
        self.assertIs(p.waiting[0], again)

    def test_qos0_beyond_the_window_is_dropped(self):
        p = Pacer(100, 0, 2)
        p.defer(msg(0, 0), 0, True)
        self.assertEqual(p.defer(msg(0, 0), 0, True), WAIT)
        self.assertEqual(p.defer(msg(0, 0), 0, True), WAIT)
        self.assertEqual(p.defer(msg(0, 0), 0, True), DROP)
        self.assertEqual(p.defer(msg(7, 1), 0, True), WAIT)  # QoS 1 is bounded by the window itself

    def test_reconnect_resends_count(self):
        p = Pacer(100, 0, 32)
        p.charge(5, 50)
        self.assertEqual(p.defer(msg(1), 0, True), WAIT)
        self.assertEqual(p.drain(1, list().append), 50)


class TestProfiles(unittest.TestCase):
    def test_aws_defaults_and_overrides(self):
        aws = dict(profile="aws", certfile="c.pem", keyfile="k.pem")
        b = Bridge(bridge_settings(**aws), None, None)
        self.assertEqual(b.pacer.rates, (90, 471859))  # 90 % of 100/s and 512 KB/s
        b = Bridge(bridge_settings(publish_rate=20, **aws), None, None)
        self.assertEqual(b.pacer.rates, (20, 471859))
        self.assertIsNone(Bridge(bridge_settings(publish_rate=0, bytes_rate=0, **aws), None, None).pacer)
        self.assertIsNone(Bridge(bridge_settings(), None, None).pacer)  # mqtt: not paced

    def test_azure_defaults_by_tier_and_units(self):
        # 90 % of IoT Hub's device-to-cloud throttle: Free/B1/S1 12/s a
        # unit but at least 100/s; B2/S2 120/s a unit; B3/S3 6,000/s a unit.
        azure = dict(profile="azure", client_id="dev1", device_key="a2V5", addresses=["hub.example:8883"])
        azure["topic"] = [rule("out", "#", "up/", "devices/dev1/messages/events/", 1)]

        def rates(**more):
            return Bridge(bridge_settings(**dict(azure, **more)), None, None).pacer.rates

        self.assertEqual(rates(), (90, 0))  # S1, 1 unit: the 100/s floor
        self.assertEqual(rates(azure_units=20), (216, 0))  # 20 x 12 = 240/s
        self.assertEqual(rates(azure_tier="free"), (90, 0))
        self.assertEqual(rates(azure_tier="s2", azure_units=2), (216, 0))  # 2 x 120
        self.assertEqual(rates(azure_tier="b3"), (5400, 0))
        self.assertEqual(rates(azure_tier="s1", publish_rate=10), (10, 0))  # set: it wins
        self.assertIsNone(Bridge(bridge_settings(publish_rate=0, **azure), None, None).pacer)


class TestPacedBridge(unittest.TestCase):
    def test_backlog_goes_up_at_its_rate_in_order(self):
        p = Pair(rules=[{"pattern": "#", "direction": "out", "local_prefix": "up/", "qos": 1}], publish_rate=10)
        cons = p.consumer("#")
        self.assertEqual(publish_acked(p.edge, "up/t", 25), 25)  # the backlog, while the upstream is away
        p.connect_up()
        got = payloads(cons)
        self.assertEqual(len(got), 1)  # the first at once, the rest at the rate
        base = p.bridge.local.now  # (the harness's clock: its ms ticks)
        for ms in range(100, 3100, 100):
            p.bridge.tick(base + ms)
            p.settle()
            got += payloads(cons)
            self.assertLessEqual(len(got), ms // 100 + 1)
        self.assertEqual(got, [b"%d" % i for i in range(25)])  # in order, none lost
        self.assertGreater(p.bridge.pacer.held, 0)

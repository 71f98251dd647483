# The MQTT-SN gateway (common/mqttsn/gateway.py) over a real Broker and
# Driver: SN clients as datagrams by hand, an MQTT client on an in-memory
# handle (tests/core/test_driver.py's), a hand-turned clock. Each test names
# the MQTT-SN v1.2 flow (§6.x) it drives. Runs under MicroPython too.

import unittest

from common.broker.settings import new_settings
from common.driver import Driver
from common.mqtt import consts as C
from common.mqtt.packets import Connect, Publish, Subscribe, encode_packet
from common.mqttsn import consts as S
from common.mqttsn.codec import SnMessage, encode_message, parse_datagram
from common.mqttsn.gateway import Gateway
from common.mqttsn.settings import SnSettings
from common.store.storeboot import new_broker
from tests.core.test_driver import Clock, Handle

SENSOR = ("10.0.0.7", 5000)  # an address: opaque to the core


class GatewayTest(unittest.TestCase):
    def setUp(self, limits=None):
        self.clock = Clock(0)
        self.broker = new_broker(new_settings(limits or {}), lambda n: bytes(n), None)
        self.logged = []
        self.broker.logger = lambda level, text: self.logged.append(text)
        self.driver = Driver(self.broker, self.clock.read, 2, 5)
        sn = SnSettings()
        sn.max_clients = 2
        sn.max_topic_ids = 2
        sn.predefined = {7: "plant/alarm"}
        self.woken = 0
        self.gw = Gateway(self.driver, sn, self.clock.read, lambda a: "%s:%d" % a, self.wake)

    def wake(self):
        self.woken += 1

    def sn(self, msg, addr=SENSOR):
        """Send one SN message (or raw bytes); the SN messages that came back to addr."""
        data = msg if isinstance(msg, bytes) else encode_message(msg)
        self.gw.datagram_received(addr, data)
        self.gw.pump()
        return self.replies(addr)

    def replies(self, addr=SENSOR):
        got = []
        for to, data in self.gw.take_datagrams():
            self.assertEqual(to, addr)
            msg, why = parse_datagram(data)
            self.assertIsNone(why)
            got.append(msg)
        return got

    def connect(self, client_id="s1", addr=SENSOR, duration=60):
        got = self.sn(SnMessage(S.CONNECT, clean=True, duration=duration, client_id=client_id), addr)
        self.assertEqual([(m.mtype, m.return_code) for m in got], [(S.CONNACK, 0)])

    def mqtt(self, client_id, *filters):
        h = Handle(4)
        cid = self.driver.connection_made(h)
        self.driver.data_received(cid, encode_packet(Connect(4, True, 0, client_id), 4))
        for i, f in enumerate(filters):
            self.driver.data_received(cid, encode_packet(Subscribe(i + 1, [(f, 1)]), 4))
        self.driver.flush()
        h.types()
        return cid, h

    def publish(self, cid, topic, payload, qos=0, retain=False):
        self.driver.data_received(
            cid, encode_packet(Publish(topic, payload, qos, retain, False, 1 if qos else 0, None), 4)
        )
        self.driver.flush()
        self.gw.pump()


class TestConnect(GatewayTest):
    def test_connect_connack_and_a_broker_session(self):
        # §6.2: CONNECT -> CONNACK accepted; the client is an ordinary session
        self.connect("s1")
        self.assertIsNotNone(self.broker.sessions.find("s1"))

    def test_will_handshake(self):
        # §6.2: CONNECT with Will -> WILLTOPICREQ, WILLTOPIC -> WILLMSGREQ, WILLMSG -> CONNACK;
        # the will is published when the client is lost (§6.11 keep alive)
        _cid, h = self.mqtt("watcher", "w/#")
        got = self.sn(SnMessage(S.CONNECT, will=True, clean=True, duration=10, client_id="s1"))
        self.assertEqual([m.mtype for m in got], [S.WILLTOPICREQ])
        got = self.sn(SnMessage(S.WILLTOPIC, qos=1, topic_name="w/s1"))
        self.assertEqual([m.mtype for m in got], [S.WILLMSGREQ])
        got = self.sn(SnMessage(S.WILLMSG, data=b"gone"))
        self.assertEqual([(m.mtype, m.return_code) for m in got], [(S.CONNACK, 0)])
        self.clock.ms = 14999
        self.gw.tick()
        self.driver.flush()
        self.assertEqual(h.types(), [])
        self.clock.ms = 15000  # 1.5 x Duration
        self.gw.tick()
        self.driver.tick()
        self.driver.flush()
        self.assertEqual([(p.topic, bytes(p.payload)) for p in h.inbox], [("w/s1", b"gone")])
        self.assertEqual(self.broker.stats.sn_keep_alive_lost, 1)

    def test_max_clients_is_congestion(self):
        # a limit: CONNACK 0x01 "rejected: congestion", counted
        self.connect("a", ("h", 1))
        self.connect("b", ("h", 2))
        got = self.sn(SnMessage(S.CONNECT, clean=True, duration=60, client_id="c"), ("h", 3))
        self.assertEqual([(m.mtype, m.return_code) for m in got], [(S.CONNACK, S.RC_CONGESTION)])
        self.assertEqual(self.broker.stats.sn_refused_connects, 1)

    def test_broker_out_of_sessions_is_congestion(self):
        # the broker's max_sessions (CONNACK 0x88 server unavailable to the MQTT
        # client) is a limit, not a refusal of the client: CONNACK 0x01, counted, logged
        self.setUp({"max_sessions": 1})
        self.connect("a", ("h", 1))
        got = self.sn(SnMessage(S.CONNECT, clean=True, duration=60, client_id="b"), ("h", 2))
        self.assertEqual([(m.mtype, m.return_code) for m in got], [(S.CONNACK, S.RC_CONGESTION)])
        self.assertEqual(self.broker.stats.sn_refused_connects, 1)
        self.assertIn("MQTT-SN client b refused by the broker (CONNACK 0x88)", self.logged)
        self.assertEqual(list(self.gw.clients), [("h", 1)])

    def test_disconnect(self):
        # §6.12: DISCONNECT -> DISCONNECT; the MQTT connection ends politely (no will)
        self.connect("s1")
        got = self.sn(SnMessage(S.DISCONNECT))
        self.assertEqual([m.mtype for m in got], [S.DISCONNECT])
        self.assertEqual(self.gw.clients, {})
        self.assertEqual(self.broker.connections.live, 0)

    def test_message_before_the_will_handshake_ends_refused(self):
        # §6.2: between CONNECT and WILLTOPIC only WILLTOPIC is taken
        self.sn(SnMessage(S.CONNECT, will=True, clean=True, duration=10, client_id="s1"))
        got = self.sn(SnMessage(S.SUBSCRIBE, qos=1, msg_id=4, topic_name="a/b"))
        self.assertEqual([(m.mtype, m.return_code) for m in got], [(S.SUBACK, S.RC_CONGESTION)])
        self.assertEqual(self.broker.stats.sn_wrong_state, 1)
        got = self.sn(SnMessage(S.WILLTOPIC, topic_name="w/s1"))
        self.assertEqual([m.mtype for m in got], [S.WILLMSGREQ])

    def test_unknown_client_gets_disconnect(self):
        got = self.sn(SnMessage(S.PINGREQ))
        self.assertEqual([m.mtype for m in got], [S.DISCONNECT])
        self.assertEqual(self.broker.stats.sn_unknown_clients, 1)

    def test_pingreq_pingresp_and_searchgw(self):
        # §6.11 PINGREQ -> PINGRESP; §6.1 SEARCHGW -> GWINFO
        self.connect("s1")
        self.assertEqual([m.mtype for m in self.sn(SnMessage(S.PINGREQ))], [S.PINGRESP])
        got = self.sn(SnMessage(S.SEARCHGW, radius=1), ("x", 9))
        self.assertEqual([(m.mtype, m.gw_id) for m in got], [(S.GWINFO, 1)])

    def test_malformed_counted(self):
        for data in (b"", b"\x03\x0d", b"\x02\x03", b"\x01\x00\x09\x16"):
            self.assertEqual(self.sn(data), [])
        self.assertEqual(self.broker.stats.sn_malformed, 4)


class TestWillUpdate(GatewayTest):
    """§6.4 WILLTOPICUPD / WILLMSGUPD: the gateway's MQTT connection ends with
    a normal DISCONNECT (the old will discarded, [MQTT-3.1.2-10]) and connects
    again with clean_start off and the new will."""

    def connect_with_will(self, topic, message):
        self.sn(SnMessage(S.CONNECT, will=True, clean=True, duration=10, client_id="s1"))
        self.sn(SnMessage(S.WILLTOPIC, qos=1, topic_name=topic))
        got = self.sn(SnMessage(S.WILLMSG, data=message))
        self.assertEqual([(m.mtype, m.return_code) for m in got], [(S.CONNACK, 0)])

    def lose_by_keep_alive(self):
        self.clock.ms = 15000  # 1.5 x Duration of silence (§6.11)
        self.gw.tick()
        self.driver.tick()
        self.driver.flush()

    def test_updated_will_is_published_not_the_old(self):
        _cid, h = self.mqtt("watcher", "w/#")
        self.connect_with_will("w/old", b"old")
        got = self.sn(SnMessage(S.WILLTOPICUPD, qos=1, retain=True, topic_name="w/new"))
        self.assertEqual([(m.mtype, m.return_code) for m in got], [(S.WILLTOPICRESP, 0)])
        got = self.sn(SnMessage(S.WILLMSGUPD, data=b"new"))
        self.assertEqual([(m.mtype, m.return_code) for m in got], [(S.WILLMSGRESP, 0)])
        self.driver.flush()
        self.assertEqual(h.types(), [])  # the swaps published no will
        self.lose_by_keep_alive()
        self.assertEqual([(p.topic, bytes(p.payload), p.retain) for p in h.inbox], [("w/new", b"new", False)])
        _cid, late = self.mqtt("late")  # the new will's retain flag was kept
        self.driver.data_received(_cid, encode_packet(Subscribe(1, [("w/new", 0)]), 4))
        self.driver.flush()
        self.assertEqual([(p.topic, p.retain) for p in late.inbox if p.ptype == C.PUBLISH], [("w/new", True)])

    def test_empty_willtopicupd_removes_the_will(self):
        # §5.4.23: an empty WILLTOPICUPD deletes the will topic and message
        _cid, h = self.mqtt("watcher", "w/#")
        self.connect_with_will("w/old", b"old")
        got = self.sn(SnMessage(S.WILLTOPICUPD))
        self.assertEqual([(m.mtype, m.return_code) for m in got], [(S.WILLTOPICRESP, 0)])
        self.lose_by_keep_alive()
        self.assertEqual(h.types(), [])
        self.assertEqual(self.broker.stats.sn_keep_alive_lost, 1)

    def test_qos1_message_during_the_update_arrives(self):
        self.connect_with_will("w/old", b"old")
        self.sn(SnMessage(S.SUBSCRIBE, qos=1, topic_id_type=S.TOPIC_PREDEFINED, msg_id=1, topic_id=7))
        cid, _h = self.mqtt("pub")
        # the update is under way (its DISCONNECT not yet moved) when the message comes
        self.gw.datagram_received(SENSOR, encode_message(SnMessage(S.WILLMSGUPD, data=b"new")))
        self.publish(cid, "plant/alarm", b"fire", 1)
        got = self.replies()
        self.assertIn((S.WILLMSGRESP, 0), [(m.mtype, m.return_code) for m in got])
        pubs = [m for m in got if m.mtype == S.PUBLISH]
        self.assertTrue(pubs)
        self.assertEqual({m.data for m in pubs}, {b"fire"})
        for m in pubs:
            self.sn(SnMessage(S.PUBACK, topic_id=7, msg_id=m.msg_id))
        session = self.broker.sessions.find("s1")
        self.assertEqual(len(session.inflight), 0)
        self.assertEqual(session.queue.count, 0)


class TestPublishFromSn(GatewayTest):
    def test_register_then_publish_qos0_1_2(self):
        # §6.5 REGISTER/REGACK, §6.6 PUBLISH QoS 0/1 (PUBACK), QoS 2 (PUBREC, PUBREL, PUBCOMP)
        _cid, h = self.mqtt("watcher", "a/#")
        self.connect("s1")
        got = self.sn(SnMessage(S.REGISTER, msg_id=1, topic_name="a/b"))
        self.assertEqual([(m.mtype, m.topic_id, m.msg_id, m.return_code) for m in got], [(S.REGACK, 1, 1, 0)])
        self.assertEqual(self.sn(SnMessage(S.PUBLISH, topic_id=1, data=b"q0")), [])
        got = self.sn(SnMessage(S.PUBLISH, qos=1, topic_id=1, msg_id=5, data=b"q1"))
        self.assertEqual([(m.mtype, m.msg_id, m.return_code) for m in got], [(S.PUBACK, 5, 0)])
        got = self.sn(SnMessage(S.PUBLISH, qos=2, topic_id=1, msg_id=6, data=b"q2"))
        self.assertEqual([(m.mtype, m.msg_id) for m in got], [(S.PUBREC, 6)])
        # a resent QoS 2 PUBLISH is not published twice
        got = self.sn(SnMessage(S.PUBLISH, qos=2, dup=True, topic_id=1, msg_id=6, data=b"q2"))
        self.assertEqual([(m.mtype, m.msg_id) for m in got], [(S.PUBREC, 6)])
        got = self.sn(SnMessage(S.PUBREL, msg_id=6))
        self.assertEqual([(m.mtype, m.msg_id) for m in got], [(S.PUBCOMP, 6)])
        self.driver.flush()
        pubs = [p for p in h.inbox if p.ptype == C.PUBLISH]
        self.assertEqual([(p.topic, bytes(p.payload)) for p in pubs], [("a/b", b"q0"), ("a/b", b"q1"), ("a/b", b"q2")])

    def test_unknown_topic_id_rejected(self):
        # §6.6: PUBLISH with an unknown topic id -> PUBACK 0x02
        self.connect("s1")
        got = self.sn(SnMessage(S.PUBLISH, qos=1, topic_id=9, msg_id=2, data=b"x"))
        self.assertEqual([(m.mtype, m.return_code) for m in got], [(S.PUBACK, S.RC_INVALID_TOPIC_ID)])
        self.assertEqual(self.broker.stats.sn_unknown_topic_ids, 1)

    def test_predefined_and_short_topics(self):
        # §6.7: predefined ids (settings) and short names need no REGISTER
        _cid, h = self.mqtt("watcher", "#")
        self.connect("s1")
        self.sn(SnMessage(S.PUBLISH, topic_id_type=S.TOPIC_PREDEFINED, topic_id=7, data=b"p"))
        self.sn(SnMessage(S.PUBLISH, topic_id_type=S.TOPIC_SHORT, topic_id=0x6162, data=b"s"))
        self.driver.flush()
        self.assertEqual([(p.topic, bytes(p.payload)) for p in h.inbox], [("plant/alarm", b"p"), ("ab", b"s")])

    def test_topic_id_table_full(self):
        # the per-client bound: REGACK 0x01 congestion, counted
        self.connect("s1")
        self.sn(SnMessage(S.REGISTER, msg_id=1, topic_name="t/1"))
        self.sn(SnMessage(S.REGISTER, msg_id=2, topic_name="t/2"))
        got = self.sn(SnMessage(S.REGISTER, msg_id=3, topic_name="t/3"))
        self.assertEqual([(m.mtype, m.return_code) for m in got], [(S.REGACK, S.RC_CONGESTION)])
        self.assertEqual(self.broker.stats.sn_topic_ids_refused, 1)
        self.assertIn("MQTT-SN client s1: no topic id for t/3: max_topic_ids (2) given", self.logged)
        got = self.sn(SnMessage(S.SUBSCRIBE, qos=1, msg_id=4, topic_name="t/4"))
        self.assertEqual([(m.mtype, m.return_code) for m in got], [(S.SUBACK, S.RC_CONGESTION)])
        self.assertEqual(self.broker.stats.sn_topic_ids_refused, 2)
        self.assertIn("MQTT-SN client s1: no topic id for t/4: max_topic_ids (2) given", self.logged)


class TestDeliveryToSn(GatewayTest):
    def test_wildcard_subscription_register_before_publish(self):
        # §6.9 SUBSCRIBE with a wildcard -> SUBACK topic id 0; §6.10 the gateway's REGISTER
        # comes before the first PUBLISH on a new topic, which waits for the REGACK
        self.connect("s1")
        got = self.sn(SnMessage(S.SUBSCRIBE, qos=1, msg_id=3, topic_name="s/+"))
        self.assertEqual([(m.mtype, m.topic_id, m.msg_id, m.qos, m.return_code) for m in got], [(S.SUBACK, 0, 3, 1, 0)])
        cid, _h = self.mqtt("pub")
        self.publish(cid, "s/t", b"one", 1)
        self.publish(cid, "s/t", b"two", 1)
        got = self.replies()
        self.assertEqual([(m.mtype, m.topic_name) for m in got], [(S.REGISTER, "s/t")])
        got = self.sn(SnMessage(S.REGACK, topic_id=got[0].topic_id, msg_id=got[0].msg_id))
        self.assertEqual(
            [(m.mtype, m.topic_id, m.qos, m.data) for m in got], [(S.PUBLISH, 1, 1, b"one"), (S.PUBLISH, 1, 1, b"two")]
        )
        # PUBACK from the SN client acknowledges the MQTT delivery
        for m in got:
            self.sn(SnMessage(S.PUBACK, topic_id=1, msg_id=m.msg_id))
        self.assertEqual(len(self.broker.sessions.find("s1").inflight), 0)

    def test_qos0_behind_a_register_bounded_by_max_buffered(self):
        # what waits for the REGACK (§6.10) is bounded: QoS 0 past max_buffered
        # is dropped as for any slow client, counted, logged once
        self.gw.settings.max_buffered = 3
        self.connect("s1")
        self.sn(SnMessage(S.SUBSCRIBE, qos=0, msg_id=3, topic_name="s/+"))
        cid, _h = self.mqtt("pub")
        for i in range(6):
            self.publish(cid, "s/t", b"m%d" % i, 0)
        got = self.replies()
        self.assertEqual([m.mtype for m in got], [S.REGISTER])
        self.assertEqual(self.broker.stats.dropped_qos0, 3)  # m0 waits (the REGISTER names it), m1, m2 behind it
        self.assertEqual(len([t for t in self.logged if "wait for its REGACK" in t]), 1)
        got = self.sn(SnMessage(S.REGACK, topic_id=got[0].topic_id, msg_id=got[0].msg_id))
        self.assertEqual([m.data for m in got], [b"m0", b"m1", b"m2"])

    def test_subscribe_topic_name_gets_id_and_retained(self):
        # §6.9: SUBSCRIBE to a name -> SUBACK with its topic id; a retained message follows
        cid, _h = self.mqtt("pub")
        self.publish(cid, "r/x", b"kept", 0, True)
        self.connect("s1")
        got = self.sn(SnMessage(S.SUBSCRIBE, msg_id=4, topic_name="r/x"))
        self.assertEqual([(m.mtype, m.topic_id) for m in got], [(S.SUBACK, 1), (S.PUBLISH, 1)])
        self.assertTrue(got[1].retain)
        self.assertEqual(got[1].data, b"kept")

    def test_subscribe_short_and_predefined_qos2(self):
        # §6.7 and §6.9; QoS 2 to the SN client: PUBLISH, PUBREC -> PUBREL, PUBCOMP
        self.connect("s1")
        self.sn(SnMessage(S.SUBSCRIBE, qos=2, topic_id_type=S.TOPIC_PREDEFINED, msg_id=1, topic_id=7))
        cid, _h = self.mqtt("pub")
        self.publish(cid, "plant/alarm", b"fire", 2)
        got = self.replies()
        self.assertEqual(
            [(m.mtype, m.topic_id_type, m.topic_id, m.qos) for m in got], [(S.PUBLISH, S.TOPIC_PREDEFINED, 7, 2)]
        )
        got = self.sn(SnMessage(S.PUBREC, msg_id=got[0].msg_id))
        self.assertEqual([m.mtype for m in got], [S.PUBREL])
        self.sn(SnMessage(S.PUBCOMP, msg_id=got[0].msg_id))
        self.assertEqual(len(self.broker.sessions.find("s1").inflight), 0)

    def test_unsubscribe(self):
        # §6.9 UNSUBSCRIBE -> UNSUBACK; nothing more is delivered
        self.connect("s1")
        self.sn(SnMessage(S.SUBSCRIBE, topic_id_type=S.TOPIC_SHORT, msg_id=1, topic_id=0x6162))
        got = self.sn(SnMessage(S.UNSUBSCRIBE, topic_id_type=S.TOPIC_SHORT, msg_id=2, topic_id=0x6162))
        self.assertEqual([(m.mtype, m.msg_id) for m in got], [(S.UNSUBACK, 2)])
        cid, _h = self.mqtt("pub")
        self.publish(cid, "ab", b"x")
        self.assertEqual(self.replies(), [])


class TestRetransmission(GatewayTest):
    """§6.13: the gateway's PUBLISH (QoS 1/2), PUBREL and REGISTER are sent again after
    Tretry (retry_interval, 10 s) until acknowledged, at most Nretry (max_retries, 5) times."""

    def at(self, ms):
        self.clock.ms = ms
        due = self.gw.tick()
        return due, self.replies()

    def test_publish_resent_with_dup_until_puback(self):
        self.connect("s1", duration=0)
        self.sn(SnMessage(S.SUBSCRIBE, qos=1, topic_id_type=S.TOPIC_PREDEFINED, msg_id=1, topic_id=7))
        cid, _h = self.mqtt("pub")
        self.publish(cid, "plant/alarm", b"fire", 1)
        (first,) = self.replies()  # lost on the way
        self.assertEqual((first.mtype, first.dup), (S.PUBLISH, False))
        self.assertEqual(self.at(9999), (10000, []))
        _due, got = self.at(10000)
        self.assertEqual([(m.mtype, m.dup, m.msg_id, m.data) for m in got], [(S.PUBLISH, True, first.msg_id, b"fire")])
        self.sn(SnMessage(S.PUBACK, topic_id=7, msg_id=first.msg_id))
        self.assertEqual(self.at(20000), (0, []))
        self.assertEqual(len(self.broker.sessions.find("s1").inflight), 0)

    def test_pubrel_and_register_resent(self):
        self.connect("s1", duration=0)
        self.sn(SnMessage(S.SUBSCRIBE, qos=2, msg_id=1, topic_name="s/+"))
        cid, _h = self.mqtt("pub")
        self.publish(cid, "s/t", b"two", 2)
        (reg,) = self.replies()
        _due, got = self.at(10000)
        self.assertEqual([(m.mtype, m.dup, m.msg_id) for m in got], [(S.REGISTER, False, reg.msg_id)])
        (pub,) = self.sn(SnMessage(S.REGACK, topic_id=reg.topic_id, msg_id=reg.msg_id))
        self.assertEqual((pub.mtype, pub.qos), (S.PUBLISH, 2))
        (rel,) = self.sn(SnMessage(S.PUBREC, msg_id=pub.msg_id))
        self.assertEqual(rel.mtype, S.PUBREL)
        _due, got = self.at(20000)  # the PUBREL, not the PUBLISH (acked by PUBREC), nor the REGISTER
        self.assertEqual([(m.mtype, m.msg_id) for m in got], [(S.PUBREL, pub.msg_id)])
        self.sn(SnMessage(S.PUBCOMP, msg_id=pub.msg_id))
        self.assertEqual(self.at(40000), (0, []))

    def test_no_ack_after_max_retries_is_lost_with_its_will(self):
        _cid, h = self.mqtt("watcher", "w/#")
        self.sn(SnMessage(S.CONNECT, will=True, clean=True, duration=0, client_id="s1"))
        self.sn(SnMessage(S.WILLTOPIC, qos=1, topic_name="w/s1"))
        self.sn(SnMessage(S.WILLMSG, data=b"gone"))
        self.sn(SnMessage(S.SUBSCRIBE, qos=1, topic_id_type=S.TOPIC_PREDEFINED, msg_id=1, topic_id=7))
        cid, _h = self.mqtt("pub")
        self.publish(cid, "plant/alarm", b"fire", 1)
        self.replies()
        for n in range(1, 6):  # Nretry = 5 resends, each with DUP
            _due, got = self.at(n * 10000)
            self.assertEqual([(m.mtype, m.dup) for m in got], [(S.PUBLISH, True)])
        self.assertEqual(self.broker.stats.sn_retries_exhausted, 0)
        self.at(60000)
        self.driver.tick()
        self.driver.flush()
        self.assertEqual([(p.topic, bytes(p.payload)) for p in h.inbox], [("w/s1", b"gone")])
        self.assertEqual(self.broker.stats.sn_retries_exhausted, 1)
        self.assertEqual(self.gw.clients, {})
        # the session keeps what is owed ([MQTT-4.4.0-1] at the next CONNECT with clean off)
        self.assertEqual(len(self.broker.sessions.find("s1").inflight), 1)


class TestAdvertise(GatewayTest):
    def test_advertise_every_interval_to_its_address(self):
        # §6.1: ADVERTISE (gateway id, Duration till the next one) every advertise_interval s
        sn = SnSettings()
        sn.gw_id = 5
        sn.advertise_interval = 900
        sn.advertise_to = ("255.255.255.255", 1884)
        self.clock.ms = 1000
        gw = Gateway(self.driver, sn, self.clock.read, lambda a: "%s:%d" % a, self.wake)
        seen = []
        for ms in (1000, 900999, 901000):
            self.clock.ms = ms
            due = gw.tick()
            for to, data in gw.take_datagrams():
                msg, _why = parse_datagram(data)
                seen.append((ms, to, msg.mtype, msg.gw_id, msg.duration))
            self.assertEqual(due, 901000 if ms < 901000 else 1801000)
        ad = (("255.255.255.255", 1884), S.ADVERTISE, 5, 900)
        self.assertEqual(seen, [(1000,) + ad, (901000,) + ad])

    def test_off_by_default(self):
        self.assertEqual(self.gw.tick(), 0)
        self.assertEqual(self.gw.take_datagrams(), [])


class TestSleepingClients(GatewayTest):
    def sleep(self, duration=100):
        got = self.sn(SnMessage(S.DISCONNECT, duration=duration))
        self.assertEqual([m.mtype for m in got], [S.DISCONNECT])

    def asleep_with_will(self, topic, message):
        """A watcher of w/#; s1 connected with a will (Duration 10), then asleep for 20 s."""
        _cid, h = self.mqtt("watcher", "w/#")
        self.sn(SnMessage(S.CONNECT, will=True, clean=False, duration=10, client_id="s1"))
        self.sn(SnMessage(S.WILLTOPIC, topic_name=topic))
        self.sn(SnMessage(S.WILLMSG, data=message))
        self.sleep(20)
        return h

    def test_buffered_while_asleep_flushed_on_pingreq_pingresp_last(self):
        # §6.14: DISCONNECT with Duration -> asleep; the session queues; PINGREQ -> the
        # buffered messages, then PINGRESP last; asleep again after it
        self.connect("s1")
        self.sn(SnMessage(S.SUBSCRIBE, qos=1, msg_id=1, topic_name="s/+"))
        self.sleep()
        self.assertEqual(self.broker.connections.live, 0)
        cid, _h = self.mqtt("pub")
        for i in range(3):
            self.publish(cid, "s/t", b"m%d" % i, 1)
        self.assertEqual(self.replies(), [])
        self.assertEqual(self.broker.sessions.find("s1").queue.count, 3)
        got = self.sn(SnMessage(S.PINGREQ, client_id="s1"))
        self.assertEqual([m.mtype for m in got], [S.REGISTER])
        got = self.sn(SnMessage(S.REGACK, topic_id=got[0].topic_id, msg_id=got[0].msg_id))
        self.assertEqual([(m.mtype, m.data) for m in got], [(S.PUBLISH, b"m0"), (S.PUBLISH, b"m1"), (S.PUBLISH, b"m2")])
        answers = []
        for m in got:
            answers += self.sn(SnMessage(S.PUBACK, topic_id=m.topic_id, msg_id=m.msg_id))
        self.assertEqual([m.mtype for m in answers], [S.PINGRESP])  # last, after every PUBACK
        self.assertEqual(self.broker.connections.live, 1)  # (the publisher only: asleep again)
        self.publish(cid, "s/t", b"later", 1)
        self.assertEqual(self.replies(), [])
        # awake with nothing more than the one queued: PUBLISH (known id now), PUBACK, PINGRESP
        got = self.sn(SnMessage(S.PINGREQ, client_id="s1"))
        self.assertEqual([(m.mtype, m.data) for m in got], [(S.PUBLISH, b"later")])
        got = self.sn(SnMessage(S.PUBACK, topic_id=1, msg_id=got[0].msg_id))
        self.assertEqual([m.mtype for m in got], [S.PINGRESP])

    def test_pingreq_with_nothing_buffered(self):
        self.connect("s1")
        self.sleep()
        self.assertEqual([m.mtype for m in self.sn(SnMessage(S.PINGREQ, client_id="s1"))], [S.PINGRESP])

    def test_sleep_expiry_publishes_the_will(self):
        # §6.14: a client asleep past its Duration is lost: its will goes out
        h = self.asleep_with_will("w/s1", b"gone")
        self.clock.ms = 29999
        self.gw.tick()
        self.driver.flush()
        self.assertEqual(h.types(), [])
        self.clock.ms = 30000  # 1.5 x 20 s
        self.gw.tick()
        self.driver.tick()
        self.driver.flush()
        self.assertEqual([(p.topic, bytes(p.payload)) for p in h.inbox], [("w/s1", b"gone")])
        self.assertEqual(self.gw.clients, {})
        self.assertEqual(self.broker.stats.sn_keep_alive_lost, 1)

    def test_will_updated_while_asleep_is_the_will_published_at_expiry(self):
        # §6.14 + §6.4: WILLTOPICUPD / WILLMSGUPD from an asleep client are
        # answered at once; it stays asleep, and when the sleep runs out the
        # broker publishes the NEW will, never the old one
        h = self.asleep_with_will("w/old", b"old")
        self.clock.ms = 5000
        got = self.sn(SnMessage(S.WILLTOPICUPD, qos=1, topic_name="w/new"))
        self.assertEqual([(m.mtype, m.return_code) for m in got], [(S.WILLTOPICRESP, 0)])
        got = self.sn(SnMessage(S.WILLMSGUPD, data=b"new"))
        self.assertEqual([(m.mtype, m.return_code) for m in got], [(S.WILLMSGRESP, 0)])
        self.assertEqual(self.broker.connections.live, 1)  # (the watcher: still asleep)
        self.driver.flush()
        self.assertEqual(h.types(), [])
        self.clock.ms = 29999  # the sleep timer runs from the DISCONNECT, not from the update
        self.gw.tick()
        self.driver.flush()
        self.assertEqual(h.types(), [])
        self.clock.ms = 30000
        self.gw.tick()
        self.driver.tick()
        self.driver.flush()
        self.assertEqual([(p.topic, bytes(p.payload), p.qos) for p in h.inbox], [("w/new", b"new", 1)])
        self.assertEqual(self.broker.stats.sn_keep_alive_lost, 1)
        self.assertEqual(self.broker.stats.sn_wrong_state, 0)

    def test_will_removed_while_asleep_then_woken_by_pingreq(self):
        # an empty WILLTOPICUPD asleep removes the will (§5.4.23); the PINGREQ's
        # connection carries no will, so the expiry after it publishes nothing
        h = self.asleep_with_will("w/old", b"old")
        got = self.sn(SnMessage(S.WILLTOPICUPD))
        self.assertEqual([(m.mtype, m.return_code) for m in got], [(S.WILLTOPICRESP, 0)])
        self.assertEqual([m.mtype for m in self.sn(SnMessage(S.PINGREQ, client_id="s1"))], [S.PINGRESP])
        self.clock.ms = 30000
        self.gw.tick()
        self.driver.tick()
        self.driver.flush()
        self.assertEqual(h.types(), [])
        self.assertEqual(self.gw.clients, {})

    def test_asleep_client_messages_refused_counted_answered_congestion(self):
        # §6.14 fig. 4: asleep, a client PINGREQs or CONNECTs before anything
        # else; a PUBLISH / SUBSCRIBE / REGISTER meanwhile gets 0x01 (try later),
        # an ack has no answer; each is counted, and nothing reaches the broker
        _cid, h = self.mqtt("watcher", "plant/#")
        self.connect("s1")
        self.sleep()
        cases = [
            (SnMessage(S.PUBLISH, qos=1, topic_id_type=S.TOPIC_PREDEFINED, topic_id=7, msg_id=3, data=b"x"), S.PUBACK),
            (SnMessage(S.SUBSCRIBE, qos=1, msg_id=4, topic_name="a/b"), S.SUBACK),
            (SnMessage(S.REGISTER, msg_id=5, topic_name="a/b"), S.REGACK),
        ]
        for msg, ack in cases:
            got = self.sn(msg)
            self.assertEqual([(m.mtype, m.msg_id, m.return_code) for m in got], [(ack, msg.msg_id, S.RC_CONGESTION)])
        self.assertEqual(self.sn(SnMessage(S.PUBACK, topic_id=1, msg_id=9)), [])
        self.assertEqual(self.broker.stats.sn_wrong_state, 4)
        why = "MQTT-SN client s1: message type 0x0c refused: asleep (PINGREQ or CONNECT first, §6.14)"
        self.assertIn(why, self.logged)
        self.driver.flush()
        self.assertEqual(h.types(), [])
        self.assertEqual(self.broker.connections.live, 1)  # still asleep: the watcher's only

    def test_clean_client_disconnect_ends_its_session(self):
        self.connect("s1")
        self.sn(SnMessage(S.DISCONNECT))
        self.assertIsNone(self.broker.sessions.find("s1"))


class TestQosMinusOne(GatewayTest):
    def test_publish_without_connection(self):
        # §6.8: QoS -1 to a predefined id and a short name, no CONNECT; a normal id is refused
        _cid, h = self.mqtt("watcher", "#")
        self.assertEqual(
            self.sn(SnMessage(S.PUBLISH, qos=-1, topic_id_type=S.TOPIC_PREDEFINED, topic_id=7, data=b"a")), []
        )
        self.sn(SnMessage(S.PUBLISH, qos=-1, topic_id_type=S.TOPIC_SHORT, topic_id=0x6162, data=b"b"))
        self.sn(SnMessage(S.PUBLISH, qos=-1, topic_id=1, data=b"c"))
        self.driver.flush()
        self.assertEqual([(p.topic, bytes(p.payload)) for p in h.inbox], [("plant/alarm", b"a"), ("ab", b"b")])
        self.assertEqual(self.broker.stats.sn_unknown_topic_ids, 1)


class TestShellHooks(GatewayTest):
    def test_wake_when_the_broker_writes_to_an_sn_client(self):
        # the shell pumps the gateway when the broker has output for an SN client
        self.connect("s1")
        self.sn(SnMessage(S.SUBSCRIBE, topic_id_type=S.TOPIC_SHORT, msg_id=1, topic_id=0x6162))
        woken = self.woken
        cid, _h = self.mqtt("pub")
        self.driver.data_received(cid, encode_packet(Publish("ab", b"x", 0, False, False, 0, None), 4))
        self.driver.flush()
        self.assertGreater(self.woken, woken)
        self.gw.pump()
        self.assertEqual([(m.mtype, m.data) for m in self.replies()], [(S.PUBLISH, b"x")])

    def test_a_datagram_pumps_its_own_client_not_every_client(self):
        # a datagram's cost does not grow with the clients connected: pump()
        # takes the MQTT output of the clients something happened to, not of all
        self.gw.settings.max_clients = 12
        for i in range(12):
            self.connect("c%d" % i, ("h", i))
        looked = []
        for c in self.gw.clients.values():
            c.mqtt.take_output = (lambda take, name: lambda: looked.append(name) or take())(
                c.mqtt.take_output, c.client_id
            )
        got = self.sn(SnMessage(S.PINGREQ), ("h", 5))
        self.assertEqual([m.mtype for m in got], [S.PINGRESP])
        self.assertEqual(looked, ["c5"])
        del looked[:]
        cid, _h = self.mqtt("pub")
        got = self.sn(SnMessage(S.SUBSCRIBE, qos=1, msg_id=1, topic_name="a/b"), ("h", 3))
        self.assertEqual([m.mtype for m in got], [S.SUBACK])
        self.publish(cid, "a/b", b"x", 1)  # the broker writes to c3: c3 only
        self.assertEqual(sorted(set(looked)), ["c3"])

    def test_max_packet_size_both_ways(self):
        # a limit: a datagram over max_packet_size is dropped, and so is a delivery; counted
        self.gw.settings.max_packet_size = 40
        self.connect("s1")
        self.sn(SnMessage(S.SUBSCRIBE, qos=1, topic_id_type=S.TOPIC_SHORT, msg_id=1, topic_id=0x6162))
        big = SnMessage(S.PUBLISH, qos=1, topic_id_type=S.TOPIC_SHORT, topic_id=0x6162, msg_id=2, data=b"x" * 40)
        self.assertEqual(self.sn(big), [])
        cid, _h = self.mqtt("pub")
        self.publish(cid, "ab", b"y" * 34, 1)
        self.assertEqual(self.replies(), [])
        self.assertEqual(self.broker.stats.sn_too_large, 2)
        self.assertEqual(len(self.broker.sessions.find("s1").inflight), 0)  # acked: not owed again
        self.publish(cid, "ab", b"y" * 33, 1)
        self.assertEqual([m.mtype for m in self.replies()], [S.PUBLISH])

    def test_max_buffered_bounds_a_sleeping_clients_queue(self):
        # §6.14 buffered while asleep, bounded by max_buffered (the broker's queue_full policy past it)
        self.gw.settings.max_buffered = 2
        self.connect("s1")
        self.sn(SnMessage(S.SUBSCRIBE, qos=1, topic_id_type=S.TOPIC_SHORT, msg_id=1, topic_id=0x6162))
        self.sn(SnMessage(S.DISCONNECT, duration=100))
        cid, _h = self.mqtt("pub")
        for i in range(3):
            self.publish(cid, "ab", b"m%d" % i, 1)
        self.assertEqual(self.broker.sessions.find("s1").queue.count, 2)


if __name__ == "__main__":
    unittest.main()

# MQTT 5.0 server features on the in-memory harness, and 3.1.1/5.0 mixed.
# Runs under CPython and MicroPython.

import unittest

from common.mqtt import consts as C
from common.mqtt.packets import Auth, PubAck, Publish, Subscribe, encode_packet, prop_get
from common.mqtt.properties import encode_property_items
from tests.core.harness import Harness, heap_per_packet

SEI = C.PROP_SESSION_EXPIRY_INTERVAL
SID = C.PROP_SUBSCRIPTION_IDENTIFIER


def props_of(pkt, pid):
    return [v for k, v in (pkt.props or []) if k == pid]


def v5(h, client_id="c", clean=True, props=None, **kw):
    c = h.client(level=5)
    ack = c.connect(client_id, clean=clean, props=props, **kw)
    return c, ack


class TestConnack(unittest.TestCase):
    def test_connack_announces_limits(self):
        h = Harness(max_inflight_in=20, max_packet_size=5000, topic_alias_maximum=7)
        _c, ack = v5(h)
        self.assertEqual(ack.reason, C.RC_SUCCESS)
        self.assertEqual(prop_get(ack.props, C.PROP_RECEIVE_MAXIMUM), 20)
        self.assertEqual(prop_get(ack.props, C.PROP_MAXIMUM_PACKET_SIZE), 5000)
        self.assertEqual(prop_get(ack.props, C.PROP_TOPIC_ALIAS_MAXIMUM), 7)
        self.assertIsNone(prop_get(ack.props, C.PROP_MAXIMUM_QOS))  # 2 is the default
        self.assertIsNone(prop_get(ack.props, C.PROP_RETAIN_AVAILABLE))

    def test_connack_tells_truth_when_features_off(self):
        h = Harness(
            maximum_qos=1,
            retain_available=False,
            wildcard_subscriptions=False,
            subscription_identifiers=False,
            shared_subscriptions=False,
        )
        _c, ack = v5(h)
        self.assertEqual(prop_get(ack.props, C.PROP_MAXIMUM_QOS), 1)
        self.assertEqual(prop_get(ack.props, C.PROP_RETAIN_AVAILABLE), 0)
        self.assertEqual(prop_get(ack.props, C.PROP_WILDCARD_SUBSCRIPTION_AVAILABLE), 0)
        self.assertEqual(prop_get(ack.props, C.PROP_SUBSCRIPTION_IDENTIFIER_AVAILABLE), 0)
        self.assertEqual(prop_get(ack.props, C.PROP_SHARED_SUBSCRIPTION_AVAILABLE), 0)

    def test_assigned_client_identifier(self):
        # [MQTT-3.2.2-16]
        h = Harness()
        _c, ack = v5(h, client_id="", clean=False)
        assigned = prop_get(ack.props, C.PROP_ASSIGNED_CLIENT_IDENTIFIER)
        self.assertTrue(assigned)
        self.assertIsNotNone(h.broker.sessions.find(assigned))

    def test_server_keep_alive(self):
        # [MQTT-3.2.2-21]
        h = Harness(max_keepalive=30)
        c, ack = v5(h, keep_alive=300)
        self.assertEqual(prop_get(ack.props, C.PROP_SERVER_KEEP_ALIVE), 30)
        h.advance(44)
        self.assertFalse(c.closed)
        h.advance(2)
        self.assertTrue(c.closed)

    def test_response_information(self):
        # [MQTT-3.1.2-28] none unless asked for
        h = Harness(response_information="resp/")
        _c, ack = v5(h, props=[(C.PROP_REQUEST_RESPONSE_INFORMATION, 1)])
        self.assertEqual(prop_get(ack.props, C.PROP_RESPONSE_INFORMATION), "resp/")
        _d, ack2 = v5(h, client_id="d")
        self.assertIsNone(prop_get(ack2.props, C.PROP_RESPONSE_INFORMATION))

    def test_unknown_auth_method(self):
        # [MQTT-4.12.0-1]
        h = Harness()
        c, ack = v5(h, props=[(C.PROP_AUTHENTICATION_METHOD, "KERBEROS")])
        self.assertEqual(ack.reason, C.RC_BAD_AUTHENTICATION_METHOD)
        self.assertTrue(c.closed)

    def test_connection_limit_server_busy(self):
        h = Harness(max_connections=1)
        v5(h, client_id="a")
        _c, ack = v5(h, client_id="b")
        self.assertEqual(ack.reason, C.RC_SERVER_BUSY)


class TestSessionExpiry(unittest.TestCase):
    def test_session_expires_by_clock(self):
        # [MQTT-4.1.0-2]
        h = Harness()
        c, _ack = v5(h, clean=False, props=[(SEI, 10)])
        c.drop()
        h.advance(9)
        self.assertIsNotNone(h.broker.sessions.find("c"))
        h.advance(2)
        self.assertIsNone(h.broker.sessions.find("c"))

    def test_zero_expiry_ends_with_connection(self):
        h = Harness()
        c, _ack = v5(h, clean=False)
        c.drop()
        self.assertIsNone(h.broker.sessions.find("c"))

    def test_clean_start_discards_existing_session(self):
        # [MQTT-3.1.2-4]
        h = Harness()
        c, ack = v5(h, clean=False, props=[(SEI, 100)])
        c.drop()
        _d, ack = v5(h, clean=True, props=[(SEI, 100)])
        self.assertFalse(ack.session_present)

    def test_resume_reports_session_present(self):
        h = Harness()
        c, ack = v5(h, clean=False, props=[(SEI, 100)])
        c.drop()
        _d, ack = v5(h, clean=False, props=[(SEI, 100)])
        self.assertTrue(ack.session_present)

    def test_disconnect_updates_expiry(self):
        h = Harness()
        c, _ack = v5(h, clean=False, props=[(SEI, 100)])
        c.disconnect(props=[(SEI, 5)])
        h.advance(6)
        self.assertIsNone(h.broker.sessions.find("c"))

    def test_disconnect_cannot_set_expiry_after_zero(self):
        # [MQTT-3.14.2-2]
        h = Harness()
        c, _ack = v5(h)
        c.disconnect(props=[(SEI, 5)])
        d = c.expect(C.DISCONNECT)
        self.assertEqual(d.reason, C.RC_PROTOCOL_ERROR)
        self.assertEqual(props_of(d, SEI), [])  # never sent by the Server

    def test_expiry_capped_by_setting_and_reported(self):
        h = Harness(max_session_expiry=60)
        _c, ack = v5(h, clean=False, props=[(SEI, 3600)])
        self.assertEqual(prop_get(ack.props, SEI), 60)


class TestMessageExpiry(unittest.TestCase):
    def test_queued_message_expires(self):
        h = Harness()
        s, _ = v5(h, "s", clean=False, props=[(SEI, 1000)])
        s.subscribe("t", 1)
        s.drop()
        p, _ = v5(h, "p")
        p.publish("t", b"short", qos=1, props=[(C.PROP_MESSAGE_EXPIRY_INTERVAL, 5)])
        p.publish("t", b"long", qos=1, packet_id=2, props=[(C.PROP_MESSAGE_EXPIRY_INTERVAL, 50)])
        h.advance(10)
        s2, _ = v5(h, "s", clean=False, props=[(SEI, 1000)])
        got = [m for m in s2.take() if m.ptype == C.PUBLISH]
        self.assertEqual([m.payload for m in got], [b"long"])  # [MQTT-3.3.2-5]
        # [MQTT-3.3.2-6] the interval less the time waited
        self.assertEqual(props_of(got[0], C.PROP_MESSAGE_EXPIRY_INTERVAL), [40])

    def test_retained_message_expires(self):
        h = Harness()
        p, _ = v5(h, "p")
        p.publish("r", b"x", retain=True, props=[(C.PROP_MESSAGE_EXPIRY_INTERVAL, 3)])
        h.advance(4)
        s, _ = v5(h, "s")
        s.subscribe("r")
        self.assertEqual(s.take(), [])
        self.assertEqual(h.broker.routing.retained.count(), 0)


class TestFlowAndSize(unittest.TestCase):
    def test_client_receive_maximum_caps_inflight(self):
        # [MQTT-3.3.4-9] [MQTT-4.9.0-1] the quota starts at 2, [MQTT-4.9.0-2]
        # nothing more at zero
        h = Harness(max_inflight=16)
        s, _ = v5(h, "s", props=[(C.PROP_RECEIVE_MAXIMUM, 2)])
        s.subscribe("t", 1)
        p, _ = v5(h, "p")
        for i in range(5):
            p.publish("t", bytes([i]), qos=1, packet_id=i + 1)
        got = [m for m in s.take() if m.ptype == C.PUBLISH]
        self.assertEqual(len(got), 2)
        s.ack(got[0])
        self.assertEqual([m.payload for m in s.take()], [b"\x02"])

    def test_resumed_session_resends_within_a_lowered_receive_maximum(self):
        # [MQTT-4.4.0-1] unacknowledged PUBLISHes are resent with their
        # original packet ids, and [MQTT-3.3.4-9] never more at once than the
        # Receive Maximum of the new connection: the rest follow the acks.
        h = Harness(max_inflight=16)
        a = h.client()
        a.connect("a", clean=False)
        a.subscribe("t", 1)
        p = h.client()
        p.connect("p")
        for i in range(3):
            p.publish("t", bytes([i]), qos=1, packet_id=i + 1)
        first = [m for m in a.take() if m.ptype == C.PUBLISH]
        self.assertEqual(len(first), 3)  # none acknowledged
        a.drop()
        again, _ = v5(h, "a", clean=False, props=[(C.PROP_RECEIVE_MAXIMUM, 1), (C.PROP_SESSION_EXPIRY_INTERVAL, 100)])
        got = []
        for _ in range(5):
            sent = [m for m in again.take() if m.ptype == C.PUBLISH]
            self.assertTrue(len(sent) <= 1)
            if not sent:
                break
            got.append((sent[0].packet_id, sent[0].dup, sent[0].payload))
            again.ack(sent[0])
        self.assertEqual(got, [(m.packet_id, True, m.payload) for m in first])

    def test_receive_maximum_exceeded_disconnects_0x93(self):
        # [MQTT-3.3.4-7]
        h = Harness(max_inflight_in=2)
        p, _ = v5(h, "p")
        for i in range(3):
            p.publish("t", b"x", qos=2, packet_id=i + 1)
        self.assertEqual(p.expect(C.PUBREC).packet_id, 1)
        self.assertEqual(p.expect(C.PUBREC).packet_id, 2)
        self.assertEqual(p.expect(C.DISCONNECT).reason, C.RC_RECEIVE_MAXIMUM_EXCEEDED)
        self.assertTrue(p.closed)

    def test_packet_too_large_disconnects_0x95(self):
        # [MQTT-3.2.2-15] enforced on input
        h = Harness(max_packet_size=100)
        p, _ = v5(h, "p")
        p.publish("t", b"x" * 200)
        self.assertEqual(p.expect(C.DISCONNECT).reason, C.RC_PACKET_TOO_LARGE)

    def test_message_over_client_maximum_not_sent(self):
        # [MQTT-3.1.2-25]
        h = Harness()
        s, _ = v5(h, "s", props=[(C.PROP_MAXIMUM_PACKET_SIZE, 50)])
        s.subscribe("t", 1)
        p, _ = v5(h, "p")
        p.publish("t", b"x" * 100, qos=1)
        p.publish("t", b"small", qos=1, packet_id=2)
        self.assertEqual([m.payload for m in s.take()], [b"small"])
        self.assertEqual(h.broker.stats.dropped_too_large, 1)


class TestTopicAlias(unittest.TestCase):
    def test_inbound_alias(self):
        h = Harness()
        s, _ = v5(h, "s")
        s.subscribe("long/topic/name")
        p, _ = v5(h, "p")
        p.publish("long/topic/name", b"1", props=[(C.PROP_TOPIC_ALIAS, 3)])
        p.publish("", b"2", props=[(C.PROP_TOPIC_ALIAS, 3)])
        got = s.take()
        self.assertEqual([(m.topic, m.payload) for m in got], [("long/topic/name", b"1"), ("long/topic/name", b"2")])

    def test_alias_above_maximum_0x94(self):
        # [MQTT-3.3.2-9] [MQTT-3.2.2-17]
        h = Harness(topic_alias_maximum=2)
        p, _ = v5(h, "p")
        p.publish("t", b"x", props=[(C.PROP_TOPIC_ALIAS, 3)])
        self.assertEqual(p.expect(C.DISCONNECT).reason, C.RC_TOPIC_ALIAS_INVALID)

    def test_unknown_alias_protocol_error(self):
        h = Harness()
        p, _ = v5(h, "p")
        p.publish("", b"x", props=[(C.PROP_TOPIC_ALIAS, 1)])
        self.assertEqual(p.expect(C.DISCONNECT).reason, C.RC_PROTOCOL_ERROR)

    def test_outbound_aliases_assigned(self):
        h = Harness()
        s, _ = v5(h, "s", props=[(C.PROP_TOPIC_ALIAS_MAXIMUM, 1)])
        s.subscribe("#")
        p, _ = v5(h, "p")
        p.publish("a/b", b"1")
        p.publish("a/b", b"2")
        p.publish("c", b"3")
        got = s.take()
        self.assertEqual(got[0].topic, "a/b")
        self.assertEqual(props_of(got[0], C.PROP_TOPIC_ALIAS), [1])
        self.assertEqual(got[1].topic, "")
        self.assertEqual(props_of(got[1], C.PROP_TOPIC_ALIAS), [1])
        self.assertEqual(got[2].topic, "c")  # no alias left [MQTT-3.3.2-8]
        self.assertEqual(props_of(got[2], C.PROP_TOPIC_ALIAS), [])


class TestSubscriptionOptions(unittest.TestCase):
    def test_no_local(self):
        # [MQTT-3.8.3-3]
        h = Harness()
        c, _ = v5(h, "c")
        c.subscribe("t", options=C.SUBOPT_NO_LOCAL)
        c.publish("t", b"mine")
        self.assertEqual(c.take(), [])
        d, _ = v5(h, "d")
        d.publish("t", b"theirs")
        self.assertEqual(c.expect(C.PUBLISH).payload, b"theirs")

    def test_retain_as_published(self):
        # [MQTT-3.3.1-12] [MQTT-3.3.1-13]
        h = Harness()
        a, _ = v5(h, "a")
        a.subscribe("t", options=C.SUBOPT_RETAIN_AS_PUBLISHED)
        b, _ = v5(h, "b")
        b.subscribe("t")
        p, _ = v5(h, "p")
        p.publish("t", b"x", retain=True)
        self.assertTrue(a.expect(C.PUBLISH).retain)
        self.assertFalse(b.expect(C.PUBLISH).retain)

    def test_retain_handling(self):
        # [MQTT-3.3.1-9] [MQTT-3.3.1-10] [MQTT-3.3.1-11] (v5 numbering)
        h = Harness()
        p, _ = v5(h, "p")
        p.publish("r", b"x", retain=True)
        c, _ = v5(h, "c")
        c.subscribe("r", options=2 << 4)  # 2: never
        self.assertEqual(c.take(), [])
        c.subscribe("r", options=1 << 4, packet_id=2)  # 1: only if new (it exists)
        self.assertEqual(c.take(), [])
        d, _ = v5(h, "d")
        d.subscribe("r", options=1 << 4)
        self.assertEqual(len(d.take()), 1)
        d.subscribe("r", options=0, packet_id=3)  # 0: always
        self.assertEqual(len(d.take()), 1)

    def test_subscription_identifiers_all_carried(self):
        # [MQTT-3.3.4-3] [MQTT-3.3.4-4]
        h = Harness()
        c, _ = v5(h, "c")
        c.subscribe("a/#", props=[(C.PROP_SUBSCRIPTION_IDENTIFIER, 7)])
        c.subscribe("a/+", packet_id=2, props=[(C.PROP_SUBSCRIPTION_IDENTIFIER, 9)])
        c.subscribe("a/b", packet_id=3)
        p, _ = v5(h, "p")
        p.publish("a/b", b"x")
        got = c.take()
        self.assertEqual(len(got), 1)
        ids = props_of(got[0], C.PROP_SUBSCRIPTION_IDENTIFIER)
        ids.sort()
        self.assertEqual(ids, [7, 9])

    def test_subscription_identifier_refused_when_off(self):
        h = Harness(subscription_identifiers=False)
        c, _ = v5(h, "c")
        c.send(Subscribe(1, [("a", 0)], [(C.PROP_SUBSCRIPTION_IDENTIFIER, 1)]))
        self.assertEqual(c.expect(C.DISCONNECT).reason, C.RC_SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED)

    def test_suback_reason_codes(self):
        h = Harness(shared_subscriptions=False, wildcard_subscriptions=False, deny_subscribe=["x/#"])
        c, _ = v5(h, "c")
        c.send(Subscribe(1, [("$share/g/a", 0), ("a/+", 0), ("x/y", 0), ("a//#/", 0), ("ok", 1)], None))
        self.assertEqual(
            c.expect(C.SUBACK).reasons,
            [
                C.RC_SHARED_SUBSCRIPTIONS_NOT_SUPPORTED,
                C.RC_WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED,
                C.RC_NOT_AUTHORIZED,
                C.RC_TOPIC_FILTER_INVALID,
                1,
            ],
        )

    def test_unsuback_reason_codes(self):
        h = Harness()
        c, _ = v5(h, "c")
        c.subscribe("a")
        from common.mqtt.packets import Unsubscribe

        c.send(Unsubscribe(4, ["a", "b"], None))
        self.assertEqual(c.expect(C.UNSUBACK).reasons, [C.RC_SUCCESS, C.RC_NO_SUBSCRIPTION_EXISTED])


class TestShared(unittest.TestCase):
    def test_one_member_gets_each_message_round_robin(self):
        h = Harness()
        a, _ = v5(h, "a")
        b, _ = v5(h, "b")
        a.subscribe("$share/g/t", 1)
        b.subscribe("$share/g/t", 1)
        p, _ = v5(h, "p")
        for i in range(6):
            p.publish("t", bytes([i]), qos=1, packet_id=i + 1)
            for c in (a, b):
                for m in c.inbox:
                    if m.ptype == C.PUBLISH:
                        c.ack(m)
        got_a = [m.payload[0] for m in a.take() if m.ptype == C.PUBLISH]
        got_b = [m.payload[0] for m in b.take() if m.ptype == C.PUBLISH]
        self.assertEqual(sorted(got_a + got_b), list(range(6)))
        self.assertEqual(len(got_a), 3)
        self.assertEqual(len(got_b), 3)

    def test_no_retained_on_shared_subscribe(self):
        h = Harness()
        p, _ = v5(h, "p")
        p.publish("t", b"r", retain=True)
        a, _ = v5(h, "a")
        a.subscribe("$share/g/t")
        self.assertEqual(a.take(), [])

    def test_unacked_messages_of_leaving_member_go_to_another(self):
        h = Harness()
        a, _ = v5(h, "a")
        a.subscribe("$share/g/t", 1)
        p, _ = v5(h, "p")
        p.publish("t", b"m", qos=1)
        self.assertEqual(a.expect(C.PUBLISH).payload, b"m")
        b, _ = v5(h, "b")
        b.subscribe("$share/g/t", 1)
        a.drop()  # never acknowledged
        self.assertEqual(b.expect(C.PUBLISH).payload, b"m")

    def test_no_local_on_shared_is_protocol_error(self):
        # [MQTT-3.8.3-4]
        h = Harness()
        a, _ = v5(h, "a")
        a.send(Subscribe(1, [("$share/g/t", C.SUBOPT_NO_LOCAL)], None))
        self.assertEqual(a.expect(C.DISCONNECT).reason, C.RC_PROTOCOL_ERROR)


class TestWillDelay(unittest.TestCase):
    def setUp(self):
        self.h = Harness()
        self.w, _ = v5(self.h, "w")
        self.w.subscribe("will/#")

    def will(self, delay):
        return ("will/x", b"bye", 0, False, [(C.PROP_WILL_DELAY_INTERVAL, delay), (C.PROP_CONTENT_TYPE, "text")])

    def test_delayed_will_published_after_delay(self):
        c, _ = v5(self.h, "c", clean=False, props=[(SEI, 100)], will=self.will(5))
        c.drop()
        self.h.advance(4)
        self.assertEqual(self.w.take(), [])
        self.h.advance(2)
        msg = self.w.expect(C.PUBLISH)
        self.assertEqual(props_of(msg, C.PROP_CONTENT_TYPE), ["text"])  # will properties passed

    def test_reconnect_cancels_delayed_will(self):
        # [MQTT-3.1.3-9]
        c, _ = v5(self.h, "c", clean=False, props=[(SEI, 100)], will=self.will(5))
        c.drop()
        self.h.advance(2)
        v5(self.h, "c", clean=False, props=[(SEI, 100)])
        self.h.advance(10)
        self.assertEqual(self.w.take(), [])

    def test_will_published_when_session_ends_first(self):
        c, _ = v5(self.h, "c", clean=False, props=[(SEI, 2)], will=self.will(50))
        c.drop()
        self.h.advance(3)
        self.assertEqual(self.w.expect(C.PUBLISH).payload, b"bye")

    def test_disconnect_with_will_message(self):
        # [MQTT-3.1.2-8] only 0x00 deletes the will: 0x04 keeps it
        _c, _ = v5(self.h, "c")
        d, _ = v5(self.h, "d", will=("will/d", b"wanted", 0, False, None))
        d.disconnect(reason=C.RC_DISCONNECT_WITH_WILL)
        self.assertEqual(self.w.expect(C.PUBLISH).payload, b"wanted")


class TestServerDisconnect(unittest.TestCase):
    def test_takeover_0x8e(self):
        h = Harness()
        a, _ = v5(h, "same")
        _b, _ = v5(h, "same")
        self.assertEqual(a.expect(C.DISCONNECT).reason, C.RC_SESSION_TAKEN_OVER)

    def test_keepalive_0x8d(self):
        h = Harness()
        a, _ = v5(h, "a", keep_alive=2)
        h.advance(4)
        self.assertEqual(a.expect(C.DISCONNECT).reason, C.RC_KEEP_ALIVE_TIMEOUT)

    def test_shutdown_0x8b(self):
        h = Harness()
        a, _ = v5(h, "a")
        h.broker.shutdown(h.now)
        h.pump()
        self.assertEqual(a.expect(C.DISCONNECT).reason, C.RC_SERVER_SHUTTING_DOWN)

    def test_malformed_0x81(self):
        h = Harness()
        a, _ = v5(h, "a")
        a.send_raw(b"\x30\x03\x00\x05a")
        self.assertEqual(a.expect(C.DISCONNECT).reason, C.RC_MALFORMED_PACKET)

    def test_qos_not_supported(self):
        # [MQTT-3.2.2-11]
        h = Harness(maximum_qos=1)
        a, _ = v5(h, "a")
        a.publish("t", b"x", qos=2)
        self.assertEqual(a.expect(C.DISCONNECT).reason, C.RC_QOS_NOT_SUPPORTED)


class TestAckReasons(unittest.TestCase):
    def test_puback_no_matching_subscribers(self):
        h = Harness()
        p, _ = v5(h, "p")
        p.publish("nobody", b"x", qos=1)
        self.assertEqual(p.expect(C.PUBACK).reason, C.RC_NO_MATCHING_SUBSCRIBERS)
        s, _ = v5(h, "s")
        s.subscribe("t")
        p.publish("t", b"x", qos=1, packet_id=2)
        self.assertEqual(p.expect(C.PUBACK).reason, C.RC_SUCCESS)

    def test_puback_not_authorized_for_sys(self):
        h = Harness()
        p, _ = v5(h, "p")
        p.publish("$SYS/x", b"x", qos=1)
        self.assertEqual(p.expect(C.PUBACK).reason, C.RC_NOT_AUTHORIZED)

    def test_pubrec_quota_exceeded_when_pool_empty(self):
        h = Harness(max_messages=1)
        s, _ = v5(h, "s", clean=False, props=[(SEI, 100)])
        s.subscribe("t", 1)
        s.drop()
        p, _ = v5(h, "p")
        p.publish("t", b"1", qos=2, packet_id=1)
        self.assertEqual(p.expect(C.PUBREC).reason, C.RC_SUCCESS)
        p.publish("t", b"2", qos=2, packet_id=2)
        self.assertEqual(p.expect(C.PUBREC).reason, C.RC_QUOTA_EXCEEDED)

    def test_pubrel_unknown_id_0x92(self):
        h = Harness()
        p, _ = v5(h, "p")
        p.send(PubAck(C.PUBREL, 5, 0, None))
        self.assertEqual(p.expect(C.PUBCOMP).reason, C.RC_PACKET_IDENTIFIER_NOT_FOUND)


class TestPassThrough(unittest.TestCase):
    def test_properties_passed_unchanged_and_in_order(self):
        # [MQTT-3.3.2-4] [MQTT-3.3.2-15] [MQTT-3.3.2-16] [MQTT-3.3.2-17]
        # [MQTT-3.3.2-18] [MQTT-3.3.2-20]
        h = Harness()
        s, _ = v5(h, "s")
        s.subscribe("req")
        p, _ = v5(h, "p")
        props = [
            (C.PROP_USER_PROPERTY, ("k", "1")),
            (C.PROP_PAYLOAD_FORMAT_INDICATOR, 1),
            (C.PROP_RESPONSE_TOPIC, "resp/1"),
            (C.PROP_USER_PROPERTY, ("k", "2")),
            (C.PROP_CORRELATION_DATA, b"\x00\x01"),
            (C.PROP_CONTENT_TYPE, "application/json"),
            (C.PROP_USER_PROPERTY, ("a", "3")),
        ]
        p.publish("req", b"{}", props=props)
        got = s.expect(C.PUBLISH)
        self.assertEqual(got.props, props)


    def test_fan_out_gives_each_subscriber_exactly_its_properties(self):
        # [MQTT-3.3.2-17] [MQTT-3.3.2-18] [MQTT-3.3.4-3] The forwarded
        # properties are encoded once per message and copied into every v5
        # delivery, next to that delivery's own: the expiry left, the
        # subscription identifiers, the outbound topic alias (in that order).
        h = Harness()
        plain, _ = v5(h, "plain")  # QoS 1, no subscription identifier
        plain.subscribe("f/#", 1)
        ids, _ = v5(h, "ids")  # two overlapping subscriptions, both ids
        ids.subscribe("f/#", 1, packet_id=1, props=[(SID, 7)])
        ids.subscribe("f/+", 0, packet_id=2, props=[(SID, 9)])
        aliased, _ = v5(h, "aliased", props=[(C.PROP_TOPIC_ALIAS_MAXIMUM, 4)])
        aliased.subscribe("f/x", 1, props=[(SID, 3)])
        cached, _ = v5(h, "cached")  # QoS 0 without anything per delivery
        cached.subscribe("f/x", 0)
        old = h.client()  # 3.1.1: no properties at all
        old.connect("old")
        old.subscribe("f/x", 0)
        p, _ = v5(h, "p")
        fwd = [
            (C.PROP_USER_PROPERTY, ("k", "1")),
            (C.PROP_CONTENT_TYPE, "text/plain; charset=utf-8"),
            (C.PROP_USER_PROPERTY, ("k", "2")),
            (C.PROP_USER_PROPERTY, ("a", "\u00e9")),
        ]
        expiry = (C.PROP_MESSAGE_EXPIRY_INTERVAL, 60)
        for n in range(2):
            # The publisher's own alias and expiry are taken out of the forwarded ones.
            props = [fwd[0], (C.PROP_TOPIC_ALIAS, 2), fwd[1], expiry, fwd[2], fwd[3]]
            p.publish("f/x", b"m%d" % n, qos=1, packet_id=n + 1, props=props)
            self.assertEqual(p.expect(C.PUBACK).reason, C.RC_SUCCESS)
            got = plain.expect(C.PUBLISH)
            self.assertEqual((got.topic, got.props), ("f/x", fwd + [expiry]))
            plain.ack(got)
            got = ids.expect(C.PUBLISH)
            self.assertEqual(got.qos, 1)
            self.assertEqual(got.props[:5], fwd + [expiry])
            self.assertEqual(sorted(got.props[5:]), [(SID, 7), (SID, 9)])
            ids.ack(got)
            got = aliased.expect(C.PUBLISH)
            topic = "f/x" if n == 0 else ""  # the alias alone the second time
            self.assertEqual((got.topic, got.props), (topic, fwd + [expiry, (SID, 3), (C.PROP_TOPIC_ALIAS, 1)]))
            aliased.ack(got)
            got = cached.expect(C.PUBLISH)
            self.assertEqual((got.payload, got.props), (b"m%d" % n, fwd + [expiry]))
            got = old.expect(C.PUBLISH)
            self.assertEqual((got.payload, got.props), (b"m%d" % n, None))
            for c in (plain, ids, aliased, cached, old):
                self.assertEqual(c.take(), [])
        # The retained copy keeps them for a later subscriber, and an expiry
        # left that counts the time it waited.
        p.publish("f/r", b"r", qos=0, retain=True, props=[fwd[2], expiry, fwd[0]])
        plain.take()
        ids.take()
        h.advance(10)
        late, _ = v5(h, "late")
        late.subscribe("f/r", 0, props=[(SID, 5)])
        got = late.expect(C.PUBLISH)
        self.assertEqual((got.retain, got.props), (True, [fwd[2], fwd[0], (C.PROP_MESSAGE_EXPIRY_INTERVAL, 50), (SID, 5)]))


    def test_forwarded_properties_allocate_nothing_per_delivery(self):
        # allocation budget, measured where gc.mem_alloc exists (MicroPython):
        # one more v5 subscriber (with its own Subscription Identifier) costs
        # the same heap with or without forwarded properties, but for the
        # longer packet (its buffer and its bytes): they are neither encoded
        # again nor copied into a new list per delivery.
        import gc
        import sys

        mem_alloc = getattr(gc, "mem_alloc", None)
        if mem_alloc is None:
            self.skipTest("gc.mem_alloc: measured under MicroPython (tests/host/test_micropython.py)")
        props = [(C.PROP_USER_PROPERTY, ("key%d" % i, "value%d" % i)) for i in range(6)]

        def per_message(subscribers, props):
            h = Harness()
            for i in range(subscribers):
                c, _ = v5(h, "s%d" % i)
                c.subscribe("f/x", 0, props=[(SID, i + 1)])
            p, _ = v5(h, "p")
            return heap_per_packet(h, p.cid, encode_packet(Publish("f/x", b"x", 0, False, False, 0, props), 5), mem_alloc)

        def per_subscriber(props):
            return (per_message(6, props) - per_message(2, props)) // 4

        block = 4 * (8 if sys.maxsize > 0x7FFFFFFF else 4)  # a GC block: 4 words
        longer = len(encode_property_items(props))
        self.assertTrue(per_subscriber(props) - per_subscriber(None) <= 2 * (longer + block))


class TestMixedVersions(unittest.TestCase):
    def test_v5_to_311_and_back(self):
        h = Harness()
        old = h.client(level=4)
        old.connect("old")
        old.subscribe("t", 2)
        new, _ = v5(h, "new")
        new.subscribe("t", 2)
        for qos in (0, 1, 2):
            for retain in (False, True):
                new.publish("t", b"5", qos=qos, retain=retain, packet_id=qos + 1,
                            props=[(C.PROP_USER_PROPERTY, ("x", "y"))])
                new.take()
                m = old.expect(C.PUBLISH)
                self.assertEqual((m.payload, m.qos, m.props), (b"5", qos, None))
                if qos:
                    old.ack(m)
                old.take()
                if qos == 2:
                    new.send(PubAck(C.PUBREL, 3, 0, None))
                    new.take()
                old.publish("t", b"4", qos=qos, retain=retain, packet_id=qos + 10)
                old.take()
                got = [x for x in new.take() if x.ptype == C.PUBLISH]
                self.assertEqual(got[0].payload, b"4")
                self.assertEqual(got[0].qos, qos)
                if qos:
                    new.ack(got[0])
                if qos == 2:
                    old.send(PubAck(C.PUBREL, 12, 0, None))
                new.take()
                old.take()

    def test_publish_packet_from_old_client_has_no_props(self):
        h = Harness()
        s, _ = v5(h, "s")
        s.subscribe("t")
        o = h.client()
        o.connect("o")
        o.send(Publish("t", b"x", 0, False, False, 0, None))
        self.assertIsNone(s.expect(C.PUBLISH).props or None)


class TestProblemInformation(unittest.TestCase):
    def test_reason_string_on_refused_puback(self):
        h = Harness()
        p, _ = v5(h, "p")
        p.publish("$SYS/x", b"x", qos=1)
        self.assertTrue(props_of(p.expect(C.PUBACK), C.PROP_REASON_STRING))

    def test_no_reason_string_when_problem_information_off(self):
        # [MQTT-3.1.2-29]
        h = Harness()
        p, _ = v5(h, "p", props=[(C.PROP_REQUEST_PROBLEM_INFORMATION, 0)])
        p.publish("$SYS/x", b"x", qos=1)
        ack = p.expect(C.PUBACK)
        self.assertEqual(ack.reason, C.RC_NOT_AUTHORIZED)
        self.assertEqual(props_of(ack, C.PROP_REASON_STRING), [])

    def test_disconnect_carries_reason_string(self):
        h = Harness()
        a, _ = v5(h, "a", props=[(C.PROP_REQUEST_PROBLEM_INFORMATION, 0)])
        a.send_raw(b"\x30\x03\x00\x05a")
        self.assertTrue(props_of(a.expect(C.DISCONNECT), C.PROP_REASON_STRING))


# Loaded only with what needs them (scram_users, a password file or an ACL);
# a broker without them answers every packet without their code.
OPTIONAL_MODULES = ("common.broker.enhanced_auth", "common.crypto.auth_scram", "common.broker.secured")


class _Blocked:
    """Stands in sys.modules for a module no packet may reach."""

    def __init__(self, name):
        self.name = name

    def __getattr__(self, attr):
        raise ImportError("%s reached (.%s) by a broker that did not load it" % (self.name, attr))


class TestOptionalCodeNotLoaded(unittest.TestCase):
    def setUp(self):
        import sys

        self.saved = []
        for name in OPTIONAL_MODULES:
            i = name.rfind(".")
            parent = __import__(name[:i], None, None, ["_"])
            leaf = name[i + 1 :]
            self.saved.append((name, sys.modules.get(name), parent, leaf, getattr(parent, leaf, None)))
            sys.modules[name] = _Blocked(name)
            if hasattr(parent, leaf):
                delattr(parent, leaf)

    def tearDown(self):
        import sys

        for name, module, parent, leaf, attr in self.saved:
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
            if attr is not None:
                setattr(parent, leaf, attr)

    def test_a_server_packet_from_a_client_is_a_protocol_error(self):
        # The dispatch table has no state for it: DISCONNECT 0x82 naming it.
        h = Harness()
        c, _ = v5(h, client_id="p")
        c.send_raw(b"\xd0\x00")  # PINGRESP
        d = c.expect(C.DISCONNECT)
        self.assertEqual(d.reason, C.RC_PROTOCOL_ERROR)
        self.assertIn("PINGRESP", prop_get(d.props, C.PROP_REASON_STRING))
        self.assertTrue(c.closed)

    def test_auth_packets_and_credentials_without_their_code(self):
        # The answers the spec gives, with none of the optional code loaded:
        # [MQTT-4.12.0-1] an unknown method: CONNACK 0x8C; AUTH without a method: 0x82.
        h = Harness()
        c, ack = v5(h, client_id="m", props=[(C.PROP_AUTHENTICATION_METHOD, "SCRAM-SHA-256")])
        self.assertEqual(ack.reason, C.RC_BAD_AUTHENTICATION_METHOD)
        self.assertTrue(c.closed)
        c, ack = v5(h, client_id="u", username="alice", password=b"secret")
        self.assertEqual(ack.reason, C.RC_SUCCESS)  # no password file: anonymous (login.py)
        c.send(Auth(C.RC_REAUTHENTICATE, [(C.PROP_AUTHENTICATION_METHOD, "SCRAM-SHA-256")]))
        self.assertEqual(c.expect(C.DISCONNECT).reason, C.RC_PROTOCOL_ERROR)
        first = h.client(level=5)
        first.send(Auth(C.RC_CONTINUE_AUTHENTICATION, [(C.PROP_AUTHENTICATION_METHOD, "SCRAM-SHA-256")]))
        self.assertTrue(first.closed)  # [MQTT-3.1.0-1] the first packet must be CONNECT

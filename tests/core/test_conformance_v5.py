# MQTT 5.0 server statements not covered by the feature tests of
# test_broker_v5.py, one or a few statements per test, on the in-memory
# harness. Tags name 5.0 ids (tools/conformance.py). Runs under CPython and
# MicroPython.

import unittest

from common.broker.topics import topic_matches
from common.mqtt import consts as C
from common.mqtt.packets import (
    Auth,
    Connect,
    Disconnect,
    PubAck,
    Publish,
    Subscribe,
    Unsubscribe,
    encode_packet,
    prop_get,
)
from tests.core.harness import Harness, RawClient, s16, vbi
from tests.core.test_auth_scram import auth_props, exchange, scram_harness

SEI = C.PROP_SESSION_EXPIRY_INTERVAL


def connect_raw(flags, payload, props=b"", name=b"MQTT", level=5):
    body = s16(name) + bytes([level, flags, 0, 0]) + vbi(len(props)) + props + payload
    return b"\x10" + vbi(len(body)) + body


def publish_raw(topic, props=b"", payload=b"x", first=0x30, packet_id=b""):
    body = s16(topic) + packet_id + vbi(len(props)) + props + payload
    return bytes([first]) + vbi(len(body)) + body


class RecordingClient(RawClient):
    """Keeps every packet taken with expect()."""

    def __init__(self, harness, level=5):
        RawClient.__init__(self, harness, level)
        self.seen = []

    def expect(self, ptype):
        pkt = RawClient.expect(self, ptype)
        self.seen.append(pkt)
        return pkt


def v5(h, client_id="c", clean=True, props=None, **kw):
    c = h.client(level=5)
    ack = c.connect(client_id, clean=clean, props=props, **kw)
    return c, ack


def props_of(pkt, pid):
    return [v for k, v in (pkt.props or []) if k == pid]


def publishes(c):
    return [p for p in c.take() if p.ptype == C.PUBLISH]


def expect_disconnect(test, c, reason):
    test.assertEqual(c.expect(C.DISCONNECT).reason, reason)
    test.assertTrue(c.closed)


def expect_connack_refusal(test, c, reason, case=None):
    # A v5 CONNECT malformed or a protocol error, once its level is read: the
    # server MAY send a CONNACK 0x80 or above before closing (4.13.1); ours
    # names the rule in a Reason String, with Session Present 0.
    packets = c.take()
    test.assertEqual([(p.ptype, p.reason, p.session_present) for p in packets], [(C.CONNACK, reason, False)], case)
    test.assertTrue(prop_get(packets[0].props, C.PROP_REASON_STRING), case)
    test.assertTrue(c.closed, case)


class TestStrings(unittest.TestCase):
    def test_malformed_strings_disconnect_0x81(self):
        # [MQTT-1.5.4-1] [MQTT-1.5.4-2] [MQTT-4.13.1-1] [MQTT-4.13.2-1]
        h = Harness()
        cases = (
            publish_raw(b"a\xff"),  # [MQTT-3.3.2-1]
            publish_raw(b"a\x00"),
            publish_raw(b"t", b"\x26" + s16(b"k") + s16(b"\xed\xa0\x80")),  # [MQTT-1.5.7-1]
            publish_raw(b"t", b"\x26" + s16(b"\xc0") + s16(b"v")),  # [MQTT-1.5.7-1]
            publish_raw(b"t", b"\x08" + s16(b"r\xff")),  # [MQTT-3.3.2-13] Response Topic
            publish_raw(b"t", b"\x03" + s16(b"\x00")),  # [MQTT-3.3.2-19] Content Type
            b"\x82" + vbi(9) + b"\x00\x01\x00" + s16(b"\xed\xa0\x80") + b"\x00",  # [MQTT-3.8.3-1]
            b"\xa2" + vbi(6) + b"\x00\x01\x00" + s16(b"\xc0"),  # [MQTT-3.10.2-1]
        )
        for raw in cases:
            c, _ = v5(h)
            c.send_raw(raw)
            expect_disconnect(self, c, C.RC_MALFORMED_PACKET)

    def test_malformed_connect_strings_connack_0x81(self):
        # [MQTT-3.1.3-4] client id, [MQTT-3.1.3-11] will topic,
        # [MQTT-3.1.3-12] user name; [MQTT-3.1.4-1] closed after CONNACK 0x81
        h = Harness()
        bad = b"\xed\xbf\xbf"
        for flags, payload in (
            (0x02, s16(bad)),
            (0x06, s16(b"c") + b"\x00" + s16(bad) + s16(b"w")),
            (0x82, s16(b"c") + s16(bad)),
        ):
            c = h.client(level=5)
            c.send_raw(connect_raw(flags, payload))
            expect_connack_refusal(self, c, C.RC_MALFORMED_PACKET)

    def test_bom_kept_and_no_normalisation(self):
        # [MQTT-1.5.4-3] [MQTT-4.7.3-4]
        h = Harness()
        s, _ = v5(h, "s")
        for i, flt in enumerate(("\ufeffa", "a/B", "caf\u00e9", "x//y")):
            s.subscribe(flt, packet_id=i + 1)
        p, _ = v5(h, "p")
        for topic in ("a", "a/b", "cafe\u0301", "x/y", "\ufeffa", "a/B", "caf\u00e9", "x//y"):
            p.publish(topic, b".")
        self.assertEqual([m.topic for m in publishes(s)], ["\ufeffa", "a/B", "caf\u00e9", "x//y"])


class TestPacketIdentifiers(unittest.TestCase):
    def test_qos0_publish_and_empty_properties_on_the_wire(self):
        # [MQTT-2.2.1-2] [MQTT-4.3.1-1] [MQTT-3.3.1-2] QoS 0, DUP 0, no id;
        # [MQTT-2.2.2-1] no properties: Property Length 0
        h = Harness()
        s = RawClient(h, 5)
        s.connect("s")
        s.raw = b""
        s.subscribe("t", 2)
        self.assertEqual(s.raw, b"\x90\x04\x00\x01\x00\x02")  # SUBACK
        p, _ = v5(h, "p")
        s.raw = b""
        p.publish("t", b"x", qos=0)
        self.assertEqual(s.raw, b"\x30\x05\x00\x01t\x00x")
        s.take()
        s.raw = b""
        s.unsubscribe("t", packet_id=3)
        self.assertEqual(s.raw, b"\xb0\x04\x00\x03\x00\x00")  # UNSUBACK

    def test_server_publish_ids(self):
        # [MQTT-2.2.1-4] [MQTT-4.3.2-1] [MQTT-4.3.2-2] [MQTT-4.3.2-3]
        # [MQTT-4.3.3-1] [MQTT-4.3.3-2] a new unused non-zero id, DUP 0
        h = Harness()
        s, _ = v5(h, "s")
        s.subscribe("t", 2)
        p, _ = v5(h, "p")
        for i in range(4):
            p.publish("t", bytes([i]), qos=1 + i % 2, packet_id=i + 1)
            p.take()
        got = publishes(s)
        ids = [m.packet_id for m in got]
        self.assertEqual(len(set(ids)), 4)
        for m in got:
            self.assertTrue(m.packet_id > 0)
            self.assertFalse(m.dup)
        self.assertEqual([m.qos for m in got], [1, 2, 1, 2])
        self.assertEqual(len(h.broker.sessions.find("s").inflight), 4)  # unacknowledged
        s.ack(got[0])
        self.assertEqual(len(h.broker.sessions.find("s").inflight), 3)

    def test_acks_carry_the_packet_id(self):
        # [MQTT-2.2.1-5] [MQTT-2.2.1-6] [MQTT-4.3.2-4] [MQTT-4.3.3-8] [MQTT-4.3.3-11]
        h = Harness()
        s, _ = v5(h, "s")
        self.assertEqual(s.subscribe("t", 2, packet_id=321).packet_id, 321)
        p, _ = v5(h, "p")
        p.publish("t", b"1", qos=1, packet_id=11)
        self.assertEqual(p.expect(C.PUBACK).packet_id, 11)
        p.publish("t", b"2", qos=2, packet_id=12)
        self.assertEqual(p.expect(C.PUBREC).packet_id, 12)
        p.send(PubAck(C.PUBREL, 12, 0, None))
        self.assertEqual(p.expect(C.PUBCOMP).packet_id, 12)
        s.take()
        self.assertEqual(s.unsubscribe("t", packet_id=654).packet_id, 654)

    def test_packet_id_zero_is_malformed(self):
        # [MQTT-2.2.1-3]
        h = Harness()
        for raw in (
            b"\x82\x07\x00\x00\x00\x00\x01t\x00",
            b"\xa2\x06\x00\x00\x00\x00\x01t",
            publish_raw(b"t", first=0x32, packet_id=b"\x00\x00"),
        ):
            c, _ = v5(h)
            c.send_raw(raw)
            self.assertIn(c.expect(C.DISCONNECT).reason, (C.RC_MALFORMED_PACKET, C.RC_PROTOCOL_ERROR))
            self.assertTrue(c.closed)


class TestConnect(unittest.TestCase):
    def test_first_packet_must_be_connect(self):
        # [MQTT-3.1.0-1]
        h = Harness()
        c = h.client(level=5)
        c.send(Subscribe(1, [("t", 0)], None))
        self.assertTrue(c.closed)
        self.assertEqual(c.take(), [])

    def test_second_connect_protocol_error(self):
        # [MQTT-3.1.0-2] [MQTT-3.2.0-2] no second CONNACK
        h = Harness()
        c, _ = v5(h)
        c.send_raw(encode_packet(Connect(level=5, clean_start=True, client_id="c"), 5))
        self.assertEqual([p.ptype for p in c.inbox], [C.DISCONNECT])
        expect_disconnect(self, c, C.RC_PROTOCOL_ERROR)

    def test_bad_protocol_name_version_or_flag_closes(self):
        # [MQTT-3.1.2-1] [MQTT-3.1.2-2] [MQTT-3.1.2-3]
        h = Harness()
        # An unknown level is refused with the 3.1.1 CONNACK 0x01; a level
        # byte 5 is answered in v5: 0x84 for the name, 0x81 for the flag.
        c = RawClient(h, level=4)
        c.send_raw(connect_raw(0x02, s16(b"c"), level=6))
        self.assertTrue(c.closed)
        self.assertEqual(c.raw, b"\x20\x02\x00\x01")
        for raw, reason in (
            (connect_raw(0x02, s16(b"c"), name=b"MQTX"), C.RC_UNSUPPORTED_PROTOCOL_VERSION),
            (connect_raw(0x03, s16(b"c")), C.RC_MALFORMED_PACKET),
        ):
            c = h.client(level=5)
            c.send_raw(raw)
            expect_connack_refusal(self, c, reason)
        # 3.1.1: closed without a CONNACK, 3.1.1 [MQTT-3.1.2-1] 3.1.1 [MQTT-3.1.2-3]
        for raw in (connect_raw(0x02, s16(b"c"), name=b"MQTX", level=4), connect_raw(0x03, s16(b"c"), level=4)):
            c = RawClient(h, level=4)
            c.send_raw(raw)
            self.assertTrue(c.closed)
            self.assertEqual(c.raw, b"")

    def test_connect_fields_checked_on_input(self):
        # [MQTT-3.1.4-1] a CONNECT not matching section 3.1 is closed
        h = Harness()
        cases = (
            (0x02, b""),  # [MQTT-3.1.3-3] no client id
            (0x06, s16(b"c")),  # [MQTT-3.1.2-9] will flag, no will properties/topic/payload
            (0x06, s16(b"c") + b"\x00" + s16(b"w")),  # [MQTT-3.1.2-9] no will payload
            (0x0A, s16(b"c")),  # [MQTT-3.1.2-11] will QoS without the will flag
            (0x1E, s16(b"c") + b"\x00" + s16(b"w") + s16(b"m")),  # [MQTT-3.1.2-12] will QoS 3
            (0x22, s16(b"c")),  # [MQTT-3.1.2-13] will retain without the will flag
            (0x02, s16(b"c") + s16(b"user")),  # [MQTT-3.1.2-16] user name without the flag
            (0x82, s16(b"c")),  # [MQTT-3.1.2-17] user name flag, no user name
            (0x82, s16(b"c") + s16(b"u") + s16(b"pw")),  # [MQTT-3.1.2-18] password without the flag
            (0xC2, s16(b"c") + s16(b"u")),  # [MQTT-3.1.2-19] password flag, no password
        )
        for flags, payload in cases:
            c = h.client(level=5)
            c.send_raw(connect_raw(flags, payload))
            expect_connack_refusal(self, c, C.RC_MALFORMED_PACKET, (flags, payload))
        # [MQTT-3.1.3-1] every field, in order, is accepted
        c = h.client(level=5)
        payload = s16(b"cid") + b"\x00" + s16(b"w/t") + s16(b"bye") + s16(b"user") + s16(b"pw")
        c.send_raw(connect_raw(0x02 | 0x04 | 0x80 | 0x40, payload))
        self.assertEqual(c.expect(C.CONNACK).reason, C.RC_SUCCESS)

    def test_client_ids(self):
        # [MQTT-3.1.3-5] 1..23 alphanumerics allowed; [MQTT-3.1.3-6]
        # [MQTT-3.1.3-7] [MQTT-3.2.2-16] empty: a unique id, returned and used
        h = Harness()
        for client_id in ("a", "0123456789abcdefghijklm", "ABCDEFGHIJKLMNOPQRSTUVW", "nopqrstuvwxyz"):
            _c, ack = v5(h, client_id)
            self.assertEqual(ack.reason, C.RC_SUCCESS, client_id)
        a, ack_a = v5(h, "", clean=False, props=[(SEI, 100)])
        _b, ack_b = v5(h, "", clean=False, props=[(SEI, 100)])
        ida = prop_get(ack_a.props, C.PROP_ASSIGNED_CLIENT_IDENTIFIER)
        idb = prop_get(ack_b.props, C.PROP_ASSIGNED_CLIENT_IDENTIFIER)
        self.assertTrue(ida and idb and ida != idb)
        a.subscribe("t", 1)
        a.drop()
        # [MQTT-3.1.3-2] the assigned id names the session from now on
        _again, ack = v5(h, ida, clean=False, props=[(SEI, 100)])
        self.assertTrue(ack.session_present)
        self.assertIn("t", h.broker.sessions.find(ida).subs)

    def test_rejected_client_id_0x85_then_close(self):
        # [MQTT-3.1.3-8] [MQTT-3.2.2-6] [MQTT-3.2.2-7] [MQTT-4.13.2-1]
        h = Harness(max_client_id_length=4)
        _c, ack = v5(h, "kept", clean=False, props=[(SEI, 100)])
        c, ack = v5(h, "toolong", clean=False)
        self.assertEqual(ack.reason, C.RC_CLIENT_IDENTIFIER_NOT_VALID)
        self.assertFalse(ack.session_present)
        self.assertTrue(c.closed)

    def test_failed_authorisation_closes(self):
        # [MQTT-3.1.4-2] a will the client may not publish: CONNACK 0x87, close
        h = Harness()
        c, ack = v5(h, "c", will=("$SYS/x", b"no", 0, False, None))
        self.assertEqual(ack.reason, C.RC_NOT_AUTHORIZED)
        self.assertTrue(c.closed)

    def test_takeover_disconnects_and_closes_the_old_connection(self):
        # [MQTT-3.1.4-3]
        h = Harness()
        a, _ = v5(h, "same")
        _b, ack = v5(h, "same")
        self.assertEqual(ack.reason, C.RC_SUCCESS)
        expect_disconnect(self, a, C.RC_SESSION_TAKEN_OVER)

    def test_rejected_connect_processes_nothing_after_it(self):
        # [MQTT-3.1.4-6]
        h = Harness(max_client_id_length=4)
        w, _ = v5(h, "w")
        w.subscribe("t")
        c = h.client(level=5)
        data = encode_packet(Connect(level=5, clean_start=True, client_id="toolong"), 5)
        data += encode_packet(Subscribe(1, [("t", 0)], None), 5)
        data += encode_packet(Publish("t", b"after", 0, False, False, 0, None), 5)
        c.send_raw(data)
        self.assertEqual([p.ptype for p in c.take()], [C.CONNACK])
        self.assertTrue(c.closed)
        self.assertEqual(w.take(), [])

    def test_connack_first_flags_and_session_present(self):
        # [MQTT-3.2.0-1] CONNACK before the queued PUBLISH; [MQTT-3.2.2-1]
        # flag bits 7-1 are 0; [MQTT-3.1.2-5] [MQTT-3.2.2-3] resumed: 1;
        # [MQTT-3.1.2-6] no session: a new one, 0; [MQTT-3.1.4-4] [MQTT-3.1.4-5]
        h = Harness()
        s = RawClient(h, 5)
        ack = s.connect("s", clean=False, props=[(SEI, 100)])
        self.assertEqual((ack.reason, ack.session_present), (C.RC_SUCCESS, False))
        self.assertEqual(s.raw[2], 0)
        s.subscribe("t", 1)
        s.drop()
        p, _ = v5(h, "p")
        p.publish("t", b"queued", qos=1)
        again = RawClient(h, 5)
        again.send_raw(encode_packet(Connect(level=5, clean_start=False, client_id="s", props=[(SEI, 100)]), 5))
        got = again.take()
        self.assertEqual([x.ptype for x in got], [C.CONNACK, C.PUBLISH])
        self.assertEqual((got[0].reason, got[0].session_present), (C.RC_SUCCESS, True))
        self.assertEqual(again.raw[2], 1)

    def test_clean_start_discards_the_session(self):
        # [MQTT-3.1.2-4] [MQTT-3.2.2-2] [MQTT-3.1.4-4]
        h = Harness()
        a, _ = v5(h, "a", clean=False, props=[(SEI, 100)])
        a.subscribe("t", 1)
        a.drop()
        p, _ = v5(h, "p")
        p.publish("t", b"old", qos=1)
        b, ack = v5(h, "a", clean=True, props=[(SEI, 100)])
        self.assertFalse(ack.session_present)
        self.assertEqual(b.take(), [])
        self.assertEqual(len(h.broker.sessions.find("a").subs), 0)

    def test_session_kept_after_close_while_expiry_runs(self):
        # [MQTT-3.1.2-23] [MQTT-4.1.0-1] never discarded while connected
        h = Harness()
        c, _ = v5(h, "c", clean=False, props=[(SEI, 2)])
        c.subscribe("t", 1)
        h.advance(20)
        self.assertIsNotNone(h.broker.sessions.find("c"))
        c.drop()
        h.advance(2)
        self.assertIsNotNone(h.broker.sessions.find("c"))
        self.assertIn("t", h.broker.sessions.find("c").subs)

    def test_keep_alive_without_server_keep_alive(self):
        # [MQTT-3.1.2-22] [MQTT-3.2.2-22]
        h = Harness()
        c, ack = v5(h, "c", keep_alive=10)
        self.assertIsNone(prop_get(ack.props, C.PROP_SERVER_KEEP_ALIVE))
        h.advance(14)
        self.assertFalse(c.closed)
        h.advance(2)
        expect_disconnect(self, c, C.RC_KEEP_ALIVE_TIMEOUT)

    def test_connack_reason_codes_and_properties(self):
        # [MQTT-3.2.2-8] every CONNACK code is a Connect Reason Code;
        # [MQTT-3.2.2-19] [MQTT-3.2.2-20] a refusal's Reason String (it names
        # the limit) and no User Property: within the client's Maximum Packet
        # Size, else left out
        h = Harness(max_client_id_length=8, maximum_qos=1, retain_available=False)
        small = [(C.PROP_MAXIMUM_PACKET_SIZE, 64)]
        acks = [
            v5(h, "ok", props=small)[1],
            v5(h, "much-too-long", props=small)[1],
            v5(h, "w1", props=small, will=("w", b"", 2, False, None))[1],
            v5(h, "w2", props=small, will=("w", b"", 0, True, None))[1],
            v5(h, "w3", props=small, will=("$SYS/w", b"", 0, False, None))[1],
            v5(h, "m", props=small + [(C.PROP_AUTHENTICATION_METHOD, "X")])[1],
        ]
        for ack in acks:
            self.assertIn(ack.reason, C.REASONS_CONNACK)
            self.assertEqual(len(props_of(ack, C.PROP_REASON_STRING)), 0 if ack.reason == 0 else 1)
            self.assertEqual(props_of(ack, C.PROP_USER_PROPERTY), [])
            self.assertTrue(len(encode_packet(ack, 5)) <= 64)
        tight = v5(h, "much-too-long", props=[(C.PROP_MAXIMUM_PACKET_SIZE, 16)])[1]
        self.assertEqual(tight.reason, C.RC_CLIENT_IDENTIFIER_NOT_VALID)
        self.assertEqual(props_of(tight, C.PROP_REASON_STRING), [])

    def test_capabilities_below_the_maximum(self):
        # [MQTT-3.2.2-9] Maximum QoS sent; [MQTT-3.2.2-10] SUBSCRIBE at QoS 2
        # still accepted (granted 1)
        h = Harness(maximum_qos=1)
        c, ack = v5(h, "c")
        self.assertEqual(prop_get(ack.props, C.PROP_MAXIMUM_QOS), 1)
        c.send(Subscribe(1, [("a", 2), ("b", 1), ("c", 0)], None))
        self.assertEqual(c.expect(C.SUBACK).reasons, [1, 1, 0])

    def test_will_beyond_capabilities_refused(self):
        # [MQTT-3.2.2-12] 0x9B; [MQTT-3.2.2-13] 0x9A; both then close
        h = Harness(maximum_qos=1, retain_available=False)
        c, ack = v5(h, "a", will=("w", b"x", 2, False, None))
        self.assertEqual(ack.reason, C.RC_QOS_NOT_SUPPORTED)
        self.assertTrue(c.closed)
        d, ack = v5(h, "b", will=("w", b"x", 1, True, None))
        self.assertEqual(ack.reason, C.RC_RETAIN_NOT_SUPPORTED)
        self.assertTrue(d.closed)

    def test_client_limits_enforced(self):
        # [MQTT-3.2.2-14] RETAIN without retain support: 0x9A
        h = Harness(retain_available=False, topic_alias_maximum=0)
        a, _ = v5(h, "a")
        a.publish("t", b"x", retain=True)
        expect_disconnect(self, a, C.RC_RETAIN_NOT_SUPPORTED)
        # [MQTT-3.2.2-18] a Topic Alias when the maximum is 0: 0x94
        b, _ = v5(h, "b")
        b.publish("t", b"x", props=[(C.PROP_TOPIC_ALIAS, 1)])
        expect_disconnect(self, b, C.RC_TOPIC_ALIAS_INVALID)
        # [MQTT-3.3.4-6] a Subscription Identifier from the client: 0x82
        d, _ = v5(h, "d")
        d.publish("t", b"x", props=[(C.PROP_SUBSCRIPTION_IDENTIFIER, 3)])
        expect_disconnect(self, d, C.RC_PROTOCOL_ERROR)
        # [MQTT-3.3.2-14] a Response Topic with wildcards: 0x82
        e, _ = v5(h, "e")
        e.publish("t", b"x", props=[(C.PROP_RESPONSE_TOPIC, "r/#")])
        expect_disconnect(self, e, C.RC_PROTOCOL_ERROR)


class TestWill(unittest.TestCase):
    def setUp(self):
        self.h = Harness()
        self.w, _ = v5(self.h, "watcher")
        self.w.subscribe("#", 1)

    def test_will_stored_published_once_and_retain_flag(self):
        # [MQTT-3.1.2-7] [MQTT-3.1.2-8] [MQTT-3.1.2-10] [MQTT-3.1.2-14]
        c, _ = v5(self.h, "a", clean=False, props=[(SEI, 5)], will=("will/a", b"bye", 1, False, None))
        self.assertIsNotNone(self.h.broker.sessions.find("a").will)
        c.drop()
        msg = self.w.expect(C.PUBLISH)
        self.assertEqual((msg.payload, msg.retain), (b"bye", False))
        self.w.ack(msg)
        self.assertIsNone(self.h.broker.sessions.find("a").will)
        self.h.advance(10)  # the session ends: no second will
        self.assertEqual(publishes(self.w), [])
        late, _ = v5(self.h, "late")
        late.subscribe("will/#")
        self.assertEqual(late.take(), [])

    def test_retained_will(self):
        # [MQTT-3.1.2-15]
        c, _ = v5(self.h, "a", will=("will/r", b"kept", 0, True, None))
        c.drop()
        self.w.take()
        late, _ = v5(self.h, "late")
        late.subscribe("will/r")
        msg = late.expect(C.PUBLISH)
        self.assertEqual((msg.payload, msg.retain), (b"kept", True))

    def test_normal_disconnect_discards_the_will(self):
        # [MQTT-3.14.4-3] [MQTT-3.1.2-10]
        c, _ = v5(self.h, "a", will=("will/a", b"bye", 0, False, None))
        c.disconnect(C.RC_NORMAL_DISCONNECTION)
        self.assertTrue(c.closed)
        self.assertEqual(self.w.take(), [])

    def test_will_user_properties_keep_their_order(self):
        # [MQTT-3.1.3-10]
        props = [(C.PROP_USER_PROPERTY, ("z", "1")), (C.PROP_USER_PROPERTY, ("a", "2")), (C.PROP_USER_PROPERTY, ("z", "0"))]
        c, _ = v5(self.h, "a", will=("will/a", b"bye", 0, False, props))
        c.drop()
        self.assertEqual(props_of(self.w.expect(C.PUBLISH), C.PROP_USER_PROPERTY), [("z", "1"), ("a", "2"), ("z", "0")])


class TestPublish(unittest.TestCase):
    def test_response_by_qos(self):
        # [MQTT-3.3.4-1]
        h = Harness()
        p, _ = v5(h, "p")
        p.publish("t", b"0")
        self.assertEqual(p.take(), [])
        p.publish("t", b"1", qos=1, packet_id=1)
        self.assertEqual([x.ptype for x in p.take()], [C.PUBACK])
        p.publish("t", b"2", qos=2, packet_id=2)
        self.assertEqual([x.ptype for x in p.take()], [C.PUBREC])

    def test_dup_set_on_redelivery_only(self):
        # [MQTT-3.3.1-1] [MQTT-3.3.1-3] [MQTT-4.4.0-1]
        h = Harness()
        s, _ = v5(h, "s", clean=False, props=[(SEI, 100)])
        s.subscribe("t", 1)
        p, _ = v5(h, "p")
        p.publish("t", b"x", qos=1, dup=True)
        first = s.expect(C.PUBLISH)
        self.assertFalse(first.dup)
        s.drop()
        again, _ = v5(h, "s", clean=False, props=[(SEI, 100)])
        resent = again.expect(C.PUBLISH)
        self.assertTrue(resent.dup)
        self.assertEqual(resent.packet_id, first.packet_id)

    def test_no_resend_while_connected(self):
        # [MQTT-4.4.0-1] the only time to resend is a session resumption
        h = Harness()
        s, _ = v5(h, "s")
        s.subscribe("t", 1)
        p, _ = v5(h, "p")
        p.publish("t", b"x", qos=1)
        s.expect(C.PUBLISH)
        h.advance(100)
        self.assertEqual(s.take(), [])

    def test_qos_3_malformed(self):
        # [MQTT-3.3.1-4]
        h = Harness()
        p, _ = v5(h, "p")
        p.send_raw(publish_raw(b"t", first=0x36, packet_id=b"\x00\x01"))
        expect_disconnect(self, p, C.RC_MALFORMED_PACKET)

    def test_retained_messages(self):
        # [MQTT-3.3.1-5] replaced and stored; [MQTT-3.3.1-6] zero bytes:
        # delivered, removes; [MQTT-3.3.1-7] not stored; [MQTT-3.3.1-8] RETAIN 0
        # stores nothing and changes nothing
        h = Harness()
        live, _ = v5(h, "live")
        live.subscribe("r/#")
        p, _ = v5(h, "p")
        p.publish("r/1", b"old", retain=True)
        p.publish("r/1", b"new", retain=True)
        p.publish("r/1", b"live only")
        p.publish("r/2", b"x", retain=True)
        p.publish("r/2", b"", retain=True)
        p.publish("r/3", b"not kept")
        self.assertEqual([m.payload for m in publishes(live)], [b"old", b"new", b"live only", b"x", b"", b"not kept"])
        s, _ = v5(h, "s")
        s.subscribe("r/#")
        self.assertEqual([(m.topic, m.payload) for m in publishes(s)], [("r/1", b"new")])
        self.assertEqual(h.broker.routing.retained.count(), 1)

    def test_wildcards_in_topic_name(self):
        # [MQTT-3.3.2-2] [MQTT-4.7.0-1]
        h = Harness()
        for topic in (b"a/#", b"+", b"a/b+"):
            p, _ = v5(h, "p")
            p.send_raw(publish_raw(topic))
            expect_disconnect(self, p, C.RC_TOPIC_NAME_INVALID)

    def test_topic_name_sent_matches_the_filter(self):
        # [MQTT-3.3.2-3]
        h = Harness()
        s, _ = v5(h, "s")
        s.subscribe("a/+/c")
        p, _ = v5(h, "p")
        for topic in ("a/b/c", "a/b/d", "a/x/c"):
            p.publish(topic, b".")
        got = [m.topic for m in publishes(s)]
        self.assertEqual(got, ["a/b/c", "a/x/c"])
        for topic in got:
            self.assertTrue(topic_matches("a/+/c", topic))

    def test_topic_aliases_are_per_connection(self):
        # [MQTT-3.3.2-7] inbound: an alias of the last connection is unknown
        h = Harness()
        p, _ = v5(h, "p", clean=False, props=[(SEI, 100)])
        p.publish("long/topic", b"1", props=[(C.PROP_TOPIC_ALIAS, 1)])
        p.drop()
        p2, _ = v5(h, "p", clean=False, props=[(SEI, 100)])
        p2.publish("", b"2", props=[(C.PROP_TOPIC_ALIAS, 1)])
        expect_disconnect(self, p2, C.RC_PROTOCOL_ERROR)
        # outbound: the next connection gets the topic again
        s, _ = v5(h, "s", clean=False, props=[(SEI, 100), (C.PROP_TOPIC_ALIAS_MAXIMUM, 5)])
        s.subscribe("a")
        q, _ = v5(h, "q")
        q.publish("a", b"1")
        q.publish("a", b"2")
        self.assertEqual([m.topic for m in publishes(s)], ["a", ""])
        s.drop()
        s2, _ = v5(h, "s", clean=False, props=[(SEI, 100), (C.PROP_TOPIC_ALIAS_MAXIMUM, 5)])
        q.publish("a", b"3")
        m = s2.expect(C.PUBLISH)
        self.assertEqual((m.topic, props_of(m, C.PROP_TOPIC_ALIAS)), ("a", [1]))

    def test_server_accepts_every_alias_up_to_its_maximum(self):
        # [MQTT-3.3.2-12]
        h = Harness(topic_alias_maximum=3)
        s, _ = v5(h, "s")
        s.subscribe("#")
        p, _ = v5(h, "p")
        for alias in (1, 2, 3):
            p.publish("t/%d" % alias, b"set", props=[(C.PROP_TOPIC_ALIAS, alias)])
        for alias in (3, 2, 1):
            p.publish("", b"use", props=[(C.PROP_TOPIC_ALIAS, alias)])
        self.assertFalse(p.closed)
        got = [m.topic for m in publishes(s)]
        self.assertEqual(got, ["t/1", "t/2", "t/3", "t/3", "t/2", "t/1"])

    def test_outbound_aliases_within_the_client_maximum(self):
        # [MQTT-3.1.2-26] [MQTT-3.3.2-11] never above 2; [MQTT-3.1.2-27] none
        # without a maximum
        h = Harness()
        s, _ = v5(h, "s", props=[(C.PROP_TOPIC_ALIAS_MAXIMUM, 2)])
        s.subscribe("#")
        n, _ = v5(h, "n")
        n.subscribe("#")
        p, _ = v5(h, "p")
        for i in range(6):
            p.publish("t/%d" % (i % 4), b".")
        for m in publishes(s):
            for alias in props_of(m, C.PROP_TOPIC_ALIAS):
                self.assertTrue(1 <= alias <= 2)
        for m in publishes(n):
            self.assertEqual(props_of(m, C.PROP_TOPIC_ALIAS), [])
            self.assertTrue(m.topic)

    def test_overlapping_subscriptions_max_qos(self):
        # [MQTT-3.3.4-2]
        h = Harness()
        s, _ = v5(h, "s")
        s.subscribe("a/+", 0)
        s.subscribe("a/#", 2, packet_id=2)
        p, _ = v5(h, "p")
        p.publish("a/b", b"x", qos=2)
        got = publishes(s)
        self.assertEqual([m.qos for m in got], [2])

    def test_owned_message_added_to_every_matching_session(self):
        # [MQTT-4.5.0-1]
        h = Harness()
        live, _ = v5(h, "live")
        live.subscribe("t/+", 1)
        off, _ = v5(h, "off", clean=False, props=[(SEI, 100)])
        off.subscribe("t/#", 1)
        off.drop()
        p, _ = v5(h, "p")
        p.publish("t/1", b"m", qos=1)
        self.assertEqual(live.expect(C.PUBLISH).payload, b"m")
        back, _ = v5(h, "off", clean=False, props=[(SEI, 100)])
        self.assertEqual(back.expect(C.PUBLISH).payload, b"m")

    def test_order_per_publisher_topic_and_qos(self):
        # [MQTT-4.6.0-5] [MQTT-4.6.0-6]
        h = Harness(max_inflight=3)
        s, _ = v5(h, "s")
        s.subscribe("t", 2)
        p, _ = v5(h, "p")
        seen = []
        for i in range(12):
            p.publish("t", bytes([i]), qos=i % 3, packet_id=i + 1)
            p.take()
        for _ in range(40):
            if not s.inbox:
                break
            m = s.inbox.pop(0)
            if m.ptype == C.PUBREL:
                s.send(PubAck(C.PUBCOMP, m.packet_id, 0, None))
                continue
            seen.append(m.payload[0])
            if m.qos == 1:
                s.ack(m)
            elif m.qos == 2:
                s.send(PubAck(C.PUBREC, m.packet_id, 0, None))
        for qos in (0, 1, 2):
            mine = [x for x in seen if x % 3 == qos]
            self.assertEqual(mine, sorted(mine))
        self.assertEqual(sorted(seen), list(range(12)))


class TestQoSFlows(unittest.TestCase):
    def test_qos1_same_id_after_puback_is_new(self):
        # [MQTT-4.3.2-5]
        h = Harness()
        s, _ = v5(h, "s")
        s.subscribe("t", 1)
        p, _ = v5(h, "p")
        p.publish("t", b"a", qos=1, packet_id=5)
        p.publish("t", b"b", qos=1, packet_id=5, dup=True)
        self.assertEqual([x.packet_id for x in p.take()], [5, 5])
        self.assertEqual([m.payload for m in publishes(s)], [b"a", b"b"])

    def test_qos2_sender(self):
        # [MQTT-4.3.3-3] until PUBREC; [MQTT-4.3.3-4] PUBREL, same id;
        # [MQTT-4.3.3-5] until PUBCOMP; [MQTT-4.3.3-6] then only PUBREL is resent
        h = Harness()
        s, _ = v5(h, "s", clean=False, props=[(SEI, 100)])
        s.subscribe("t", 2)
        p, _ = v5(h, "p")
        p.publish("t", b"x", qos=2)
        msg = s.expect(C.PUBLISH)
        session = h.broker.sessions.find("s")
        self.assertEqual(len(session.inflight), 1)
        s.send(PubAck(C.PUBREC, msg.packet_id, 0, None))
        self.assertEqual(s.expect(C.PUBREL).packet_id, msg.packet_id)
        self.assertEqual(len(session.inflight), 1)
        s.drop()
        again, _ = v5(h, "s", clean=False, props=[(SEI, 100)])
        got = again.take()
        self.assertEqual([(x.ptype, x.packet_id) for x in got], [(C.PUBREL, msg.packet_id)])
        again.send(PubAck(C.PUBCOMP, msg.packet_id, 0, None))
        self.assertEqual(h.broker.sessions.find("s").inflight, [])

    def test_no_expiry_once_sent(self):
        # [MQTT-4.3.3-7] a QoS 2 PUBLISH already sent is completed, expired or not
        h = Harness()
        s, _ = v5(h, "s", clean=False, props=[(SEI, 100)])
        s.subscribe("t", 2)
        p, _ = v5(h, "p")
        p.publish("t", b"x", qos=2, props=[(C.PROP_MESSAGE_EXPIRY_INTERVAL, 2)])
        first = s.expect(C.PUBLISH)
        s.drop()
        h.advance(10)
        again, _ = v5(h, "s", clean=False, props=[(SEI, 100)])
        resent = again.expect(C.PUBLISH)
        self.assertEqual((resent.packet_id, resent.payload), (first.packet_id, b"x"))

    def test_qos2_receiver(self):
        # [MQTT-4.3.3-10] PUBREC again and no duplicate until PUBREL;
        # [MQTT-4.3.3-12] after PUBCOMP the id is new; [MQTT-4.3.3-9] after a
        # PUBREC of 0x80 or more the id is new
        h = Harness()
        s, _ = v5(h, "s")
        s.subscribe("t", 2)
        p, _ = v5(h, "p")
        p.publish("t", b"1", qos=2, packet_id=9)
        p.publish("t", b"1", qos=2, packet_id=9, dup=True)
        self.assertEqual([(x.ptype, x.packet_id) for x in p.take()], [(C.PUBREC, 9), (C.PUBREC, 9)])
        self.assertEqual(len(publishes(s)), 1)
        p.send(PubAck(C.PUBREL, 9, 0, None))
        self.assertEqual(p.expect(C.PUBCOMP).reason, C.RC_SUCCESS)
        p.publish("t", b"2", qos=2, packet_id=9)
        p.take()
        self.assertEqual([m.payload for m in publishes(s)], [b"2"])
        p.publish("$SYS/x", b"no", qos=2, packet_id=7)
        self.assertEqual(p.expect(C.PUBREC).reason, C.RC_NOT_AUTHORIZED)
        p.publish("t", b"3", qos=2, packet_id=7)
        self.assertEqual(p.expect(C.PUBREC).reason, C.RC_SUCCESS)
        self.assertEqual([m.payload for m in publishes(s)], [b"3"])

    def test_qos2_receiver_completes_after_expiry(self):
        # [MQTT-4.3.3-13]
        h = Harness()
        s, _ = v5(h, "s", clean=False, props=[(SEI, 100)])
        s.subscribe("t", 1)
        s.drop()
        p, _ = v5(h, "p")
        p.publish("t", b"x", qos=2, packet_id=3, props=[(C.PROP_MESSAGE_EXPIRY_INTERVAL, 1)])
        p.expect(C.PUBREC)
        h.advance(5)
        p.send(PubAck(C.PUBREL, 3, 0, None))
        self.assertEqual(p.expect(C.PUBCOMP).reason, C.RC_SUCCESS)

    def test_error_acks_end_the_delivery(self):
        # [MQTT-4.4.0-2] PUBACK / PUBREC of 0x80 or more: acknowledged, never resent
        h = Harness()
        s, _ = v5(h, "s", clean=False, props=[(SEI, 100)])
        s.subscribe("t", 2)
        p, _ = v5(h, "p")
        p.publish("t", b"1", qos=1)
        p.publish("t", b"2", qos=2, packet_id=2)
        got = publishes(s)
        s.send(PubAck(C.PUBACK, got[0].packet_id, C.RC_UNSPECIFIED_ERROR, None))
        s.send(PubAck(C.PUBREC, got[1].packet_id, C.RC_IMPLEMENTATION_SPECIFIC_ERROR, None))
        self.assertEqual(s.take(), [])  # no PUBREL after an error PUBREC
        self.assertEqual(h.broker.sessions.find("s").inflight, [])
        s.drop()
        again, _ = v5(h, "s", clean=False, props=[(SEI, 100)])
        self.assertEqual(again.take(), [])


class TestFlowControl(unittest.TestCase):
    def test_other_packets_flow_at_zero_quota(self):
        # [MQTT-3.3.4-10] [MQTT-4.9.0-3]
        h = Harness()
        s, _ = v5(h, "s", props=[(C.PROP_RECEIVE_MAXIMUM, 1)])
        s.subscribe("t", 1)
        p, _ = v5(h, "p")
        p.publish("t", b"1", qos=1, packet_id=1)
        p.publish("t", b"2", qos=1, packet_id=2)
        self.assertEqual(len(publishes(s)), 1)  # quota used up
        s.ping()
        self.assertEqual(s.subscribe("u", 1, packet_id=5).packet_id, 5)
        self.assertEqual(s.unsubscribe("u", packet_id=6).packet_id, 6)
        s.publish("x", b"mine", qos=2, packet_id=7)
        self.assertEqual(s.expect(C.PUBREC).packet_id, 7)
        s.send(PubAck(C.PUBREL, 7, 0, None))
        self.assertEqual(s.expect(C.PUBCOMP).packet_id, 7)


class TestReasonCodes(unittest.TestCase):
    def test_ack_reason_codes_listed(self):
        # [MQTT-3.4.2-1] [MQTT-3.5.2-1] [MQTT-3.6.2-1] [MQTT-3.7.2-1]
        h = Harness(max_messages=2)
        s, _ = v5(h, "s")
        s.subscribe("t", 2)
        p, _ = v5(h, "p")
        seen = []
        for qos in (1, 2):
            for topic in ("t", "nobody", "$SYS/x", "t", "t"):
                p.publish(topic, b"x", qos=qos, packet_id=len(seen) + 1)
                seen += p.take()
            p.send(PubAck(C.PUBREL, 1000 + qos, 0, None))
            seen += p.take()
            for m in publishes(s):
                s.ack(m)
                seen += [x for x in s.take() if x.ptype == C.PUBREL]
        p.publish("t", b"x", qos=2, packet_id=99)
        p.send(PubAck(C.PUBREL, 99, 0, None))
        seen += p.take()
        for m in publishes(s):
            if m.qos == 2:
                s.send(PubAck(C.PUBREC, m.packet_id, 0, None))
                seen += s.take()
        kinds = {}
        for pkt in seen:
            kinds[pkt.ptype] = kinds.get(pkt.ptype, []) + [pkt.reason]
            allowed = C.REASONS_PUBACK if pkt.ptype in (C.PUBACK, C.PUBREC) else C.REASONS_PUBREL
            self.assertIn(pkt.reason, allowed)
        self.assertIn(C.RC_QUOTA_EXCEEDED, kinds[C.PUBACK])
        self.assertIn(C.RC_NO_MATCHING_SUBSCRIBERS, kinds[C.PUBREC])
        self.assertIn(C.RC_PACKET_IDENTIFIER_NOT_FOUND, kinds[C.PUBCOMP])
        self.assertIn(C.PUBREL, kinds)

    def test_reason_strings_never_exceed_the_client_maximum(self):
        # [MQTT-3.4.2-2] [MQTT-3.4.2-3] [MQTT-3.5.2-2] [MQTT-3.5.2-3]: the
        # PUBACK/PUBREC refusing a $SYS publish loses its Reason String rather
        # than exceed 20 bytes; [MQTT-3.1.2-24] nothing larger is ever sent
        h = Harness()
        c = RawClient(h, 5)
        c.connect("c", props=[(C.PROP_MAXIMUM_PACKET_SIZE, 20)])
        c.raw = b""
        c.publish("$SYS/x", b"x", qos=1, packet_id=1)
        c.publish("$SYS/x", b"x", qos=2, packet_id=2)
        acks = c.take()
        self.assertEqual([(a.ptype, a.reason) for a in acks], [(C.PUBACK, C.RC_NOT_AUTHORIZED), (C.PUBREC, C.RC_NOT_AUTHORIZED)])
        self.assertTrue(len(c.raw) <= 40)
        for a in acks:
            self.assertTrue(len(encode_packet(a, 5)) <= 20)
            self.assertEqual(props_of(a, C.PROP_USER_PROPERTY), [])

    def test_disconnect_reason_string_within_the_client_maximum(self):
        # [MQTT-3.14.2-3] [MQTT-3.14.2-4]
        h = Harness()
        c = RawClient(h, 5)
        c.connect("c", props=[(C.PROP_MAXIMUM_PACKET_SIZE, 16)])
        c.raw = b""
        c.send_raw(b"\x30\x03\x00\x05a")
        self.assertTrue(len(c.raw) <= 16)
        d = c.expect(C.DISCONNECT)
        self.assertEqual(d.reason, C.RC_MALFORMED_PACKET)
        self.assertEqual(props_of(d, C.PROP_USER_PROPERTY), [])

    def test_acks_without_reason_strings_or_user_properties(self):
        # [MQTT-3.6.2-2] [MQTT-3.6.2-3] PUBREL, [MQTT-3.7.2-2] [MQTT-3.7.2-3]
        # PUBCOMP, [MQTT-3.9.2-1] [MQTT-3.9.2-2] SUBACK, [MQTT-3.11.2-1]
        # [MQTT-3.11.2-2] UNSUBACK: Siskin never puts either on them
        h = Harness(deny_subscribe=["no/#"])
        c, _ = v5(h, "c", props=[(C.PROP_MAXIMUM_PACKET_SIZE, 16)])
        c.send(Subscribe(1, [("t", 2), ("no/x", 0), ("a//#/", 0)], None))
        c.send(Unsubscribe(2, ["t", "zz"], None))
        p, _ = v5(h, "p")
        p.publish("t", b"x", qos=2)
        m = c.expect(C.SUBACK)
        got = [m, c.expect(C.UNSUBACK)]
        c.send(PubAck(C.PUBREL, 77, 0, None))
        got += c.take()
        for pkt in got:
            self.assertEqual(pkt.props or [], [], pkt)

    def test_disconnect_codes_listed_without_session_expiry(self):
        # [MQTT-3.14.2-1] [MQTT-3.14.2-2]
        h = Harness(maximum_qos=1, topic_alias_maximum=1, max_packet_size=64)
        sent = []
        actions = (
            lambda c: c.send_raw(b"\x30\x03\x00\x05a"),
            lambda c: c.publish("t", b"x", qos=2),
            lambda c: c.publish("t", b"x", props=[(C.PROP_TOPIC_ALIAS, 2)]),
            lambda c: c.publish("t", b"x" * 100),
            lambda c: c.send_raw(encode_packet(Connect(level=5, client_id="again"), 5)),
        )
        for act in actions:
            c, _ = v5(h)
            act(c)
            sent.append(c.expect(C.DISCONNECT))
        a, _ = v5(h, "twin")
        v5(h, "twin")
        sent.append(a.expect(C.DISCONNECT))
        k, _ = v5(h, "k", keep_alive=1)
        h.advance(3)
        sent.append(k.expect(C.DISCONNECT))
        for d in sent:
            self.assertIn(d.reason, C.REASONS_DISCONNECT)
            self.assertEqual(props_of(d, SEI), [])

    def test_nothing_after_disconnect(self):
        # [MQTT-3.14.4-1] [MQTT-3.14.4-2] the rest of the input is not answered
        h = Harness()
        c, _ = v5(h)
        data = b"\x30\x03\x00\x05a" + encode_packet(Subscribe(1, [("t", 0)], None), 5) + b"\xc0\x00"
        c.send_raw(data)
        self.assertEqual([p.ptype for p in c.take()], [C.DISCONNECT])
        self.assertTrue(c.closed)

    def test_no_disconnect_before_connack(self):
        # [MQTT-3.14.0-1] a bad CONNECT is closed without a DISCONNECT
        h = Harness()
        for raw in (connect_raw(0x03, s16(b"c")), connect_raw(0x02, s16(b"c"), props=b"\x11\x00")):
            c = h.client(level=5)
            c.send_raw(raw)
            self.assertTrue(c.closed)
            self.assertEqual([p.ptype for p in c.take() if p.ptype == C.DISCONNECT], [])


class TestFixedHeaderFlags(unittest.TestCase):
    def test_reserved_flags_malformed(self):
        # [MQTT-2.1.3-1] [MQTT-3.6.1-1] PUBREL, [MQTT-3.8.1-1] SUBSCRIBE,
        # [MQTT-3.10.1-1] UNSUBSCRIBE, [MQTT-3.14.1-1] DISCONNECT,
        # [MQTT-3.15.1-1] AUTH, [MQTT-3.12.4-1] PINGREQ answered when well formed
        h = Harness()
        for raw in (
            b"\x60\x02\x00\x01",
            b"\x80\x07\x00\x01\x00\x00\x01t\x00",
            b"\xa0\x06\x00\x01\x00\x00\x01t",
            b"\xe2\x00",
            b"\xf1\x00",
            b"\xc1\x00",
        ):
            c, _ = v5(h)
            c.send_raw(raw)
            expect_disconnect(self, c, C.RC_MALFORMED_PACKET)
        ok, _ = v5(h, "ok")
        ok.send_raw(b"\xc0\x00")
        ok.expect(C.PINGRESP)

    def test_empty_subscribe_and_unsubscribe(self):
        # [MQTT-3.8.3-2] [MQTT-3.10.2-2]
        h = Harness()
        for raw in (b"\x82\x03\x00\x01\x00", b"\xa2\x03\x00\x01\x00"):
            c, _ = v5(h)
            c.send_raw(raw)
            self.assertEqual(c.expect(C.DISCONNECT).reason >= 0x80, True)
            self.assertTrue(c.closed)


class TestSubscriptions(unittest.TestCase):
    def test_suback(self):
        # [MQTT-3.8.4-1] [MQTT-3.8.4-2] [MQTT-3.8.4-5] one SUBACK with the
        # id; [MQTT-3.8.4-6] [MQTT-3.8.4-7] [MQTT-3.9.3-1] [MQTT-3.9.3-2] a
        # listed code per filter, in order: granted QoS or failure
        h = Harness(maximum_qos=1)
        c, _ = v5(h, "c")
        c.send(Subscribe(44, [("a", 2), ("a//#/", 0), ("b", 0), ("a", 0), ("$share/g/x", 1)], None))
        acks = c.take()
        self.assertEqual([(x.ptype, x.packet_id) for x in acks], [(C.SUBACK, 44)])
        self.assertEqual(acks[0].reasons, [1, C.RC_TOPIC_FILTER_INVALID, 0, 0, 1])
        for r in acks[0].reasons:
            self.assertIn(r, C.REASONS_SUBACK)
        self.assertEqual(h.broker.sessions.find("c").subs["a"].qos, 0)  # handled in sequence

    def test_replacing_a_subscription(self):
        # [MQTT-3.8.4-3] replaced, not added; [MQTT-3.8.4-4] retained re-sent
        # and no message lost while replacing
        h = Harness()
        p, _ = v5(h, "p")
        p.publish("r", b"ret", qos=1, retain=True)
        c, _ = v5(h, "c")
        c.subscribe("r", 0)
        self.assertEqual(c.expect(C.PUBLISH).retain, True)
        p.publish("r", b"live1", qos=1, packet_id=2)
        c.send(Subscribe(3, [("r", 1)], None))
        p.publish("r", b"live2", qos=1, packet_id=4)
        got = [(m.payload, m.qos) for m in publishes(c)]
        self.assertEqual(got, [(b"live1", 0), (b"ret", 1), (b"live2", 1)])
        self.assertEqual(len(h.broker.sessions.find("c").subs), 1)

    def test_granted_qos_caps_delivery(self):
        # [MQTT-3.8.4-8]
        h = Harness()
        c, _ = v5(h, "c")
        c.subscribe("t", 1)
        p, _ = v5(h, "p")
        for qos in (0, 1, 2):
            p.publish("t", b".", qos=qos, packet_id=qos + 1)
        self.assertEqual([m.qos for m in publishes(c)], [0, 1, 1])

    def test_unsubscribe(self):
        # [MQTT-3.10.4-1] exact filters only; [MQTT-3.10.4-2] no new messages;
        # [MQTT-3.10.4-3] the delivery in flight completes; [MQTT-3.10.4-4]
        # [MQTT-3.10.4-5] [MQTT-3.10.4-6] one UNSUBACK, same id; [MQTT-3.11.3-1]
        # [MQTT-3.11.3-2] listed codes in filter order
        h = Harness()
        c, _ = v5(h, "c")
        c.subscribe("a/+", 1)
        c.subscribe("a/b", 1, packet_id=2)
        p, _ = v5(h, "p")
        p.publish("a/b", b"1", qos=1)
        inflight = publishes(c)[0]
        c.send(Unsubscribe(9, ["a/#", "a/b", "A/+", "a/+"], None))
        ack = c.expect(C.UNSUBACK)
        self.assertEqual(ack.packet_id, 9)
        self.assertEqual(ack.reasons, [0x11, 0, 0x11, 0])
        for r in ack.reasons:
            self.assertIn(r, C.REASONS_UNSUBACK)
        p.publish("a/b", b"2", qos=1, packet_id=2)
        self.assertEqual(publishes(c), [])
        c.ack(inflight)
        self.assertEqual(h.broker.sessions.find("c").inflight, [])

    def test_invalid_filters_refused(self):
        # [MQTT-4.7.1-1] "#" last and alone; [MQTT-4.7.1-2] "+" a whole level;
        # [MQTT-4.8.2-1] [MQTT-4.8.2-2] shared filter form
        h = Harness()
        c, _ = v5(h, "c")
        bad = ["a/#/b", "a#", "a+/b", "+a", "$share//t", "$share/g", "$share/g+/t", "$share/g/"]
        c.send(Subscribe(1, [(f, 0) for f in bad] + [("a/+/#", 0), ("$share/g/+", 0)], None))
        reasons = c.expect(C.SUBACK).reasons
        self.assertEqual(reasons, [C.RC_TOPIC_FILTER_INVALID] * len(bad) + [0, 0])

    def test_dollar_topics(self):
        # [MQTT-4.7.2-1]
        h = Harness()
        c, _ = v5(h, "c")
        c.subscribe("#")
        c.subscribe("+/x", packet_id=2)
        c.subscribe("$SYS/#", packet_id=3)
        h.broker.publish("$SYS/x", b"sys", 0, False, h.now)
        h.pump()
        self.assertEqual([m.topic for m in publishes(c)], ["$SYS/x"])

    def test_topic_length_bounded_by_65535_bytes(self):
        # [MQTT-4.7.3-1] [MQTT-4.7.3-2] [MQTT-4.7.3-3]
        h = Harness(max_topic_length=65535, max_topic_levels=0)
        s, _ = v5(h, "s")
        s.subscribe("#")
        p, _ = v5(h, "p")
        longest = "t" * 65535
        p.publish(longest, b"x")
        self.assertEqual(s.expect(C.PUBLISH).topic, longest)
        with self.assertRaises(ValueError):
            encode_packet(Publish("t" * 65536, b"x", 0, False, False, 0, None), 5)
        s.send(Subscribe(2, [("", 0)], None))
        self.assertTrue(s.closed or s.expect(C.SUBACK).reasons == [C.RC_TOPIC_FILTER_INVALID])
        p.send_raw(publish_raw(b"a\x00b"))
        self.assertTrue(p.closed)


class TestSharedSubscriptions(unittest.TestCase):
    def test_granted_qos_respected(self):
        # [MQTT-4.8.2-3]
        h = Harness()
        a, _ = v5(h, "a")
        a.subscribe("$share/g/t", 0)
        p, _ = v5(h, "p")
        p.publish("t", b"x", qos=2)
        self.assertEqual(a.expect(C.PUBLISH).qos, 0)

    def test_qos2_completed_with_the_same_member(self):
        # [MQTT-4.8.2-4] the broken QoS 2 delivery is completed on reconnect
        # and not given to the other member
        h = Harness()
        a, _ = v5(h, "a", clean=False, props=[(SEI, 100)])
        a.subscribe("$share/g/t", 2)
        p, _ = v5(h, "p")
        p.publish("t", b"q2", qos=2)
        first = a.expect(C.PUBLISH)
        b, _ = v5(h, "b")
        b.subscribe("$share/g/t", 2)
        a.drop()
        self.assertEqual(publishes(b), [])
        again, _ = v5(h, "a", clean=False, props=[(SEI, 100)])
        resent = again.expect(C.PUBLISH)
        self.assertEqual((resent.payload, resent.packet_id, resent.dup), (b"q2", first.packet_id, True))

    def test_session_end_drops_the_qos2_copy(self):
        # [MQTT-4.8.2-5]
        h = Harness()
        a, _ = v5(h, "a", clean=False, props=[(SEI, 2)])
        a.subscribe("$share/g/t", 2)
        p, _ = v5(h, "p")
        p.publish("t", b"q2", qos=2)
        a.expect(C.PUBLISH)
        b, _ = v5(h, "b")
        b.subscribe("$share/g/t", 2)
        a.drop()
        h.advance(5)
        self.assertIsNone(h.broker.sessions.find("a"))
        self.assertEqual(publishes(b), [])

    def test_refused_copy_not_sent_to_another_member(self):
        # [MQTT-4.8.2-6]
        h = Harness()
        a, _ = v5(h, "a")
        a.subscribe("$share/g/t", 1)
        p, _ = v5(h, "p")
        p.publish("t", b"x", qos=1)
        m = a.expect(C.PUBLISH)
        b, _ = v5(h, "b")
        b.subscribe("$share/g/t", 1)
        a.send(PubAck(C.PUBACK, m.packet_id, C.RC_UNSPECIFIED_ERROR, None))
        a.drop()
        self.assertEqual(publishes(b), [])

    def test_shared_and_non_shared_copies_carry_their_own_identifier(self):
        # [MQTT-3.3.4-5]
        h = Harness()
        c, _ = v5(h, "c")
        c.subscribe("$share/g/t", props=[(C.PROP_SUBSCRIPTION_IDENTIFIER, 1)])
        c.subscribe("t", packet_id=2, props=[(C.PROP_SUBSCRIPTION_IDENTIFIER, 2)])
        p, _ = v5(h, "p")
        p.publish("t", b"x")
        ids = [props_of(m, C.PROP_SUBSCRIPTION_IDENTIFIER) for m in publishes(c)]
        ids.sort()
        self.assertEqual(ids, [[1], [2]])


class TestEnhancedAuthentication(unittest.TestCase):
    def test_exchange(self):
        # [MQTT-4.12.0-2] AUTH 0x18; [MQTT-4.12.0-5] the method in AUTH and
        # CONNACK; [MQTT-3.15.2-1] listed codes; [MQTT-3.15.2-2] [MQTT-3.15.2-3]
        # no Reason String / User Property on AUTH; [MQTT-3.2.0-1] only AUTH
        # before CONNACK
        h = scram_harness()
        c = RecordingClient(h)
        exchange(c, "secret")
        challenge = c.seen[0]
        self.assertEqual((challenge.ptype, challenge.reason), (C.AUTH, C.RC_CONTINUE_AUTHENTICATION))
        self.assertEqual(prop_get(challenge.props, C.PROP_AUTHENTICATION_METHOD), "SCRAM-SHA-256")
        ack = c.expect(C.CONNACK)
        self.assertEqual(ack.reason, C.RC_SUCCESS)
        self.assertEqual(prop_get(ack.props, C.PROP_AUTHENTICATION_METHOD), "SCRAM-SHA-256")
        c.send(Auth(C.RC_REAUTHENTICATE, auth_props(b"n,,n=alice,r=x")))
        again = c.expect(C.AUTH)
        for pkt in (challenge, again):
            self.assertIn(pkt.reason, C.REASONS_AUTH)
            self.assertEqual(props_of(pkt, C.PROP_REASON_STRING), [])
            self.assertEqual(props_of(pkt, C.PROP_USER_PROPERTY), [])

    def test_rejected_authentication_closes(self):
        # [MQTT-4.12.0-4]
        h = scram_harness()
        c = h.client(level=5)
        exchange(c, "wrong")
        ack = c.expect(C.CONNACK)
        self.assertTrue(ack.reason >= 0x80)
        self.assertTrue(c.closed)

    def test_no_method_no_auth(self):
        # [MQTT-4.12.0-6] no AUTH, no method in CONNACK; [MQTT-4.12.0-7] an AUTH
        # from such a client is a Protocol Error
        h = scram_harness()
        c, ack = v5(h, "plain")
        self.assertIsNone(prop_get(ack.props, C.PROP_AUTHENTICATION_METHOD))
        c.send(Auth(C.RC_CONTINUE_AUTHENTICATION, None))
        expect_disconnect(self, c, C.RC_PROTOCOL_ERROR)

    def test_client_auth_codes_and_method_checked(self):
        # [MQTT-4.12.0-3] the client's AUTH during the exchange is 0x18;
        # [MQTT-4.12.1-1] re-authentication keeps the method
        h = scram_harness()
        c = h.client(level=5)
        c.connect("a", props=auth_props(b"n,,n=alice,r=cn0nce"))
        c.expect(C.AUTH)
        c.send(Auth(C.RC_SUCCESS, auth_props(b"c=biws")))
        self.assertTrue(c.closed)
        d = h.client(level=5)
        exchange(d, "secret")
        d.expect(C.CONNACK)
        d.send(Auth(C.RC_REAUTHENTICATE, [(C.PROP_AUTHENTICATION_METHOD, "OTHER")]))
        expect_disconnect(self, d, C.RC_PROTOCOL_ERROR)


class TestDisconnectFromClient(unittest.TestCase):
    def test_disconnect_reason_0x00_closes_quietly(self):
        # [MQTT-3.14.4-3]
        h = Harness()
        w, _ = v5(h, "w")
        w.subscribe("#")
        c, _ = v5(h, "c", will=("will/c", b"bye", 0, False, None))
        c.send(Disconnect(C.RC_NORMAL_DISCONNECTION, None))
        self.assertTrue(c.closed)
        self.assertEqual(w.take(), [])

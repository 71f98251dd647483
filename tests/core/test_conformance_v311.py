# MQTT 3.1.1 server statements not covered by the feature tests of
# test_broker_connect.py / test_broker_publish.py, one or a few statements per
# test, on the in-memory harness. Tags name 3.1.1 ids (tools/conformance.py).
# Runs under CPython and MicroPython.

import unittest

from common.broker.topics import topic_matches
from common.mqtt import consts as C
from common.mqtt.packets import Connect, PubAck, Publish, Subscribe, Unsubscribe, encode_packet
from tests.core.harness import Harness, RawClient, s16, vbi


def connect_raw(flags, payload, keep_alive=0):
    body = s16(b"MQTT") + bytes([4, flags, keep_alive >> 8, keep_alive & 0xFF]) + payload
    return b"\x10" + vbi(len(body)) + body


def publish_raw(topic, payload=b"x"):
    body = s16(topic) + payload
    return b"\x30" + vbi(len(body)) + body


def connected(h, client_id, clean=True, **kw):
    c = h.client()
    c.connect(client_id, clean=clean, **kw)
    return c


def publishes(c):
    return [p for p in c.take() if p.ptype == C.PUBLISH]


class TestStrings(unittest.TestCase):
    def test_ill_formed_utf8_closes(self):
        # [MQTT-1.5.3-1] [MQTT-3.3.2-1] in a PUBLISH topic
        h = Harness()
        p = connected(h, "p")
        p.send_raw(publish_raw(b"a\xff"))
        self.assertTrue(p.closed)
        # [MQTT-3.8.3-1] in a SUBSCRIBE filter (a UTF-16 surrogate)
        s = connected(h, "s")
        s.send_raw(b"\x82" + vbi(8) + b"\x00\x01" + s16(b"\xed\xa0\x80") + b"\x00")
        self.assertTrue(s.closed)
        # [MQTT-3.10.3-1] in an UNSUBSCRIBE filter
        u = connected(h, "u")
        u.send_raw(b"\xa2" + vbi(5) + b"\x00\x01" + s16(b"\xc0"))
        self.assertTrue(u.closed)

    def test_ill_formed_utf8_in_connect_closes_without_connack(self):
        # [MQTT-3.1.3-4] client id, [MQTT-3.1.3-10] will topic,
        # [MQTT-3.1.3-11] user name; [MQTT-3.1.4-1] closed without CONNACK
        h = Harness()
        bad = b"\xed\xbf\xbf"
        for flags, payload in (
            (0x02, s16(bad)),
            (0x06, s16(b"c") + s16(bad) + s16(b"w")),
            (0x82, s16(b"c") + s16(bad)),
        ):
            c = h.client()
            c.send_raw(connect_raw(flags, payload))
            self.assertTrue(c.closed)
            self.assertEqual(c.take(), [])

    def test_null_character_closes(self):
        # [MQTT-1.5.3-2]
        h = Harness()
        p = connected(h, "p")
        p.send_raw(publish_raw(b"a\x00b"))
        self.assertTrue(p.closed)
        c = h.client()
        c.send_raw(connect_raw(0x02, s16(b"c\x00")))
        self.assertTrue(c.closed)
        self.assertEqual(c.take(), [])

    def test_bom_kept_and_no_normalisation(self):
        # [MQTT-1.5.3-3] U+FEFF is part of the topic, never stripped;
        # [MQTT-4.7.3-4] no normalisation: case, NFC/NFD, slashes all differ
        h = Harness()
        s = connected(h, "s")
        for i, flt in enumerate(("\ufeffa", "a/B", "caf\u00e9", "x//y")):
            s.subscribe(flt, packet_id=i + 1)
        p = connected(h, "p")
        for topic in ("a", "a/b", "cafe\u0301", "x/y", "\ufeffa", "a/B", "caf\u00e9", "x//y"):
            p.publish(topic, topic.encode())
        got = [m.topic for m in publishes(s)]
        self.assertEqual(got, ["\ufeffa", "a/B", "caf\u00e9", "x//y"])


class TestPacketIdentifiers(unittest.TestCase):
    def test_server_publish_ids(self):
        # [MQTT-2.3.1-1] [MQTT-2.3.1-4] [MQTT-4.3.2-1] a new, unused, non-zero
        # id per QoS 1 message, QoS 1 and DUP 0, held until PUBACK
        h = Harness(max_inflight=4)
        s = connected(h, "s")
        s.subscribe("t", 1)
        p = connected(h, "p")
        for i in range(3):
            p.publish("t", bytes([i]), qos=1, packet_id=i + 1)
        first = publishes(s)
        ids = [m.packet_id for m in first]
        self.assertEqual(len(set(ids)), 3)
        for m in first:
            self.assertTrue(m.packet_id > 0)
            self.assertEqual((m.qos, m.dup), (1, False))
        self.assertEqual(len(h.broker.sessions.find("s").inflight), 3)  # unacknowledged
        s.ack(first[0])
        self.assertEqual(len(h.broker.sessions.find("s").inflight), 2)
        p.publish("t", b"n", qos=1, packet_id=9)
        new = publishes(s)[0]
        self.assertNotIn(new.packet_id, ids[1:])  # never an id still in use

    def test_qos0_publish_has_no_packet_id(self):
        # [MQTT-2.3.1-5] [MQTT-4.3.1-1] [MQTT-3.3.1-2] QoS 0, DUP 0, no id
        h = Harness()
        s = RawClient(h)
        s.connect("s")
        s.subscribe("t", 2)
        s.raw = b""
        p = connected(h, "p")
        p.publish("t", b"x", qos=0)
        self.assertEqual(s.raw, b"\x30\x04\x00\x01tx")

    def test_acks_carry_the_packet_id(self):
        # [MQTT-2.3.1-6] PUBACK, PUBREC, PUBREL; [MQTT-2.3.1-7] SUBACK, UNSUBACK
        h = Harness()
        s = connected(h, "s")
        self.assertEqual(s.subscribe("t", 2, packet_id=321).packet_id, 321)
        p = connected(h, "p")
        p.publish("t", b"1", qos=1, packet_id=11)
        self.assertEqual(p.expect(C.PUBACK).packet_id, 11)
        p.publish("t", b"2", qos=2, packet_id=12)
        self.assertEqual(p.expect(C.PUBREC).packet_id, 12)
        got = publishes(s)
        s.ack(got[0])
        s.ack(got[1])
        self.assertEqual(s.expect(C.PUBREL).packet_id, got[1].packet_id)
        self.assertEqual(s.unsubscribe("t", packet_id=654).packet_id, 654)


class TestConnectPayload(unittest.TestCase):
    def test_all_fields_in_order_accepted(self):
        # [MQTT-3.1.3-1] [MQTT-3.1.3-3] [MQTT-3.1.2-19] [MQTT-3.1.2-21]
        # [MQTT-3.1.4-4] a well-formed CONNECT is acknowledged with 0
        h = Harness()
        c = h.client()
        payload = s16(b"cid") + s16(b"w/t") + s16(b"bye") + s16(b"user") + s16(b"pw")
        c.send_raw(connect_raw(0x02 | 0x04 | 0x80 | 0x40, payload))
        self.assertEqual(c.expect(C.CONNACK).reason, 0)
        self.assertIsNotNone(h.broker.sessions.find("cid"))

    def test_fields_missing_or_extra_close_without_connack(self):
        # [MQTT-3.1.4-1] [MQTT-3.2.2-6] a CONNECT that does not conform is
        # closed without CONNACK (no return code applies)
        h = Harness()
        cases = (
            (0x02, b""),  # [MQTT-3.1.3-3] no client id
            (0x82, s16(b"c")),  # [MQTT-3.1.2-19] user name flag, no user name
            (0x02, s16(b"c") + s16(b"user")),  # [MQTT-3.1.2-18] user name without the flag
            (0xC2, s16(b"c") + s16(b"u")),  # [MQTT-3.1.2-21] password flag, no password
            (0x82, s16(b"c") + s16(b"u") + s16(b"pw")),  # [MQTT-3.1.2-20] password without the flag
            (0x02, s16(b"c") + s16(b"w/t") + s16(b"m")),  # [MQTT-3.1.2-11] will fields without the flag
            (0x06, s16(b"c") + s16(b"w/t")),  # will flag, no will message
        )
        for flags, payload in cases:
            c = h.client()
            c.send_raw(connect_raw(flags, payload))
            self.assertTrue(c.closed, (flags, payload))
            self.assertEqual(c.take(), [])

    def test_short_alphanumeric_client_ids_allowed(self):
        # [MQTT-3.1.3-5]
        h = Harness()
        for client_id in ("a", "Z9", "0123456789abcdefghijklm", "ABCDEFGHIJKLMNOPQRSTUVW", "nopqrstuvwxyz"):
            c = h.client()
            self.assertEqual(c.connect(client_id).reason, C.CONNACK_ACCEPTED, client_id)

    def test_rejected_client_id_connack_0x02_then_close(self):
        # [MQTT-3.1.3-9] [MQTT-3.2.2-4] [MQTT-3.2.2-5]
        h = Harness(max_client_id_length=4)
        c = h.client()
        ack = c.connect("toolong", clean=False)
        self.assertEqual(ack.reason, C.CONNACK_REFUSED_IDENTIFIER_REJECTED)
        self.assertFalse(ack.session_present)
        self.assertTrue(c.closed)

    def test_refusal_of_a_stored_session_has_session_present_0(self):
        # [MQTT-3.2.2-4] [MQTT-3.2.2-5] a session is stored, the CONNECT is refused
        h = Harness(max_keepalive=60)
        a = h.client()
        a.connect("a", clean=False, keep_alive=30)
        a.drop()
        b = h.client()
        ack = b.connect("a", clean=False, keep_alive=600)
        self.assertNotEqual(ack.reason, C.CONNACK_ACCEPTED)
        self.assertFalse(ack.session_present)
        self.assertTrue(b.closed)

    def test_client_id_identifies_the_session(self):
        # [MQTT-3.1.3-2] [MQTT-3.1.4-3] state is found by client id
        h = Harness()
        a = connected(h, "a", clean=False)
        a.subscribe("for/a", 1)
        b = connected(h, "b", clean=False)
        b.subscribe("for/b", 1)
        a.drop()
        b.drop()
        p = connected(h, "p")
        p.publish("for/a", b"A", qos=1)
        p.publish("for/b", b"B", qos=1, packet_id=2)
        b2 = h.client()
        self.assertTrue(b2.connect("b", clean=False).session_present)
        self.assertEqual([m.payload for m in publishes(b2)], [b"B"])

    def test_rejected_connect_processes_nothing_after_it(self):
        # [MQTT-3.1.4-5]
        h = Harness()
        w = connected(h, "w")
        w.subscribe("t")
        c = h.client()
        data = bytearray(encode_packet(Connect(level=4, clean_start=True, client_id="x"), 4))
        data[8] = 9  # an unsupported protocol level
        data += encode_packet(Subscribe(1, [("t", 0)], None), 4)
        data += encode_packet(Publish("t", b"after", 0, False, False, 0, None), 4)
        c.send_raw(bytes(data))
        self.assertEqual([p.ptype for p in c.take()], [C.CONNACK])
        self.assertTrue(c.closed)
        self.assertEqual(w.take(), [])
        self.assertIsNone(h.broker.sessions.find("x"))


class TestConnack(unittest.TestCase):
    def test_connack_is_first_even_with_queued_messages(self):
        # [MQTT-3.2.0-1]
        h = Harness()
        s = connected(h, "s", clean=False)
        s.subscribe("t", 1)
        s.drop()
        p = connected(h, "p")
        p.publish("t", b"queued", qos=1)
        again = h.client()
        again.send_raw(encode_packet(Connect(level=4, clean_start=False, client_id="s"), 4))
        self.assertEqual([x.ptype for x in again.take()], [C.CONNACK, C.PUBLISH])

    def test_session_present_0_without_stored_state(self):
        # [MQTT-3.2.2-3] [MQTT-3.1.4-4]
        h = Harness()
        c = h.client()
        ack = c.connect("fresh", clean=False)
        self.assertEqual((ack.reason, ack.session_present), (C.CONNACK_ACCEPTED, False))


class TestWills(unittest.TestCase):
    def setUp(self):
        self.h = Harness()
        self.w = connected(self.h, "watcher")
        self.w.subscribe("#", 1)

    def test_no_will_flag_no_will(self):
        # [MQTT-3.1.2-12]
        c = connected(self.h, "a")
        c.drop()
        self.assertEqual(self.w.take(), [])

    def test_will_retain_0_published_non_retained(self):
        # [MQTT-3.1.2-16]
        c = connected(self.h, "a", will=("will/a", b"bye", 1, False))
        c.drop()
        self.assertFalse(self.w.expect(C.PUBLISH).retain)
        late = connected(self.h, "late")
        late.subscribe("will/#")
        self.assertEqual(late.take(), [])

    def test_retained_messages_outlive_the_session(self):
        # [MQTT-3.1.2-7]
        p = connected(self.h, "p", clean=True)
        p.publish("keep", b"kept", retain=True)
        p.disconnect()
        self.assertIsNone(self.h.broker.sessions.find("p"))
        late = connected(self.h, "late")
        late.subscribe("keep")
        self.assertEqual(late.expect(C.PUBLISH).payload, b"kept")

    def test_disconnect_with_reserved_bits_closes_and_keeps_the_will(self):
        # [MQTT-3.14.1-1] a DISCONNECT with flags set is malformed: the
        # connection closes and, not being a DISCONNECT, the will goes out
        c = connected(self.h, "a", will=("will/a", b"bye", 0, False))
        self.w.take()
        c.send_raw(b"\xe1\x00")
        self.assertTrue(c.closed)
        self.assertEqual(self.w.expect(C.PUBLISH).payload, b"bye")


class TestFixedHeaderFlags(unittest.TestCase):
    def test_pubrel_and_unsubscribe_flags(self):
        # [MQTT-2.2.2-2] [MQTT-3.6.1-1] PUBREL, [MQTT-3.10.1-1] UNSUBSCRIBE:
        # flags 0010 or close
        h = Harness()
        for raw in (b"\x60\x02\x00\x01", b"\x64\x02\x00\x01", b"\xa0\x05\x00\x01\x00\x01t"):
            c = connected(h, "c")
            c.send_raw(raw)
            self.assertTrue(c.closed, raw)
        ok = connected(h, "ok")
        ok.send_raw(b"\x62\x02\x00\x01")
        self.assertEqual(ok.expect(C.PUBCOMP).packet_id, 1)
        ok.send_raw(b"\xa2\x05\x00\x02\x00\x01t")
        self.assertEqual(ok.expect(C.UNSUBACK).packet_id, 2)

    def test_protocol_violations_close(self):
        # [MQTT-4.8.0-1] [MQTT-3.8.3-3] [MQTT-3.10.3-2]
        h = Harness()
        for raw in (
            b"\x82\x02\x00\x01",  # SUBSCRIBE without a filter
            b"\xa2\x02\x00\x01",  # UNSUBSCRIBE without a filter
            b"\x32\x05\x00\x01t\x00\x00",  # QoS 1 PUBLISH with packet id 0
        ):
            c = connected(h, "c")
            c.send_raw(raw)
            self.assertTrue(c.closed, raw)


class TestPublishFlows(unittest.TestCase):
    def test_response_by_qos(self):
        # [MQTT-3.3.4-1] nothing, PUBACK, PUBREC
        h = Harness()
        p = connected(h, "p")
        p.publish("t", b"0")
        self.assertEqual(p.take(), [])
        p.publish("t", b"1", qos=1, packet_id=1)
        self.assertEqual([x.ptype for x in p.take()], [C.PUBACK])
        p.publish("t", b"2", qos=2, packet_id=2)
        self.assertEqual([x.ptype for x in p.take()], [C.PUBREC])

    def test_incoming_dup_not_propagated(self):
        # [MQTT-3.3.1-3]
        h = Harness()
        s = connected(h, "s")
        s.subscribe("t", 1)
        p = connected(h, "p")
        p.publish("t", b"x", qos=1, dup=True)
        self.assertFalse(s.expect(C.PUBLISH).dup)

    def test_unauthorised_publish_acknowledged_positively(self):
        # [MQTT-3.3.5-2] publishing under $SYS/ is not allowed: the
        # acknowledgement is the normal positive one
        h = Harness()
        p = connected(h, "p")
        p.publish("$SYS/x", b"x", qos=1, packet_id=4)
        self.assertEqual(p.expect(C.PUBACK).packet_id, 4)
        p.publish("$SYS/x", b"x", qos=2, packet_id=5)
        self.assertEqual(p.expect(C.PUBREC).packet_id, 5)
        self.assertFalse(p.closed)

    def test_topic_name_sent_matches_the_filter(self):
        # [MQTT-3.3.2-3]
        h = Harness()
        s = connected(h, "s")
        s.subscribe("a/+/c")
        s.subscribe("x/#", packet_id=2)
        p = connected(h, "p")
        for topic in ("a/b/c", "x", "x/y/z", "a/b/d"):
            p.publish(topic, b".")
        got = [m.topic for m in publishes(s)]
        self.assertEqual(got, ["a/b/c", "x", "x/y/z"])
        for topic in got:
            self.assertTrue(topic_matches("a/+/c", topic) or topic_matches("x/#", topic))

    def test_message_added_to_every_matching_session(self):
        # [MQTT-4.5.0-1] live and offline persistent subscribers alike
        h = Harness()
        live = connected(h, "live")
        live.subscribe("t/+", 1)
        off = connected(h, "off", clean=False)
        off.subscribe("t/#", 1)
        off.drop()
        p = connected(h, "p")
        p.publish("t/1", b"m", qos=1)
        self.assertEqual(live.expect(C.PUBLISH).payload, b"m")
        back = h.client()
        back.connect("off", clean=False)
        self.assertEqual(back.expect(C.PUBLISH).payload, b"m")

    def test_message_store_full_closes_the_publisher(self):
        # [MQTT-4.8.0-2] 3.1.1 has no code to refuse a QoS 1/2 message it
        # cannot keep: a transient error closes the connection (no PUBACK),
        # so the publisher resends it later rather than losing it silently
        h = Harness(max_messages=1)
        s = connected(h, "s", clean=False)
        s.subscribe("t", 1)
        s.drop()
        p = connected(h, "p")
        p.publish("t", b"1", qos=1, packet_id=1)
        self.assertEqual(p.expect(C.PUBACK).packet_id, 1)
        p.publish("t", b"2", qos=1, packet_id=2)
        self.assertEqual(p.take(), [])
        self.assertTrue(p.closed)


class TestRetained(unittest.TestCase):
    def test_each_matching_retained_message_sent(self):
        # [MQTT-3.3.1-6]
        h = Harness()
        p = connected(h, "p")
        p.publish("r/1", b"one", retain=True)
        p.publish("r/2", b"two", retain=True)
        p.publish("q", b"other", retain=True)
        s = connected(h, "s")
        s.subscribe("r/#")
        got = sorted([m.payload for m in publishes(s)])
        self.assertEqual(got, [b"one", b"two"])

    def test_qos0_retained_replaces_previous(self):
        # [MQTT-3.3.1-7]
        h = Harness()
        p = connected(h, "p")
        p.publish("r", b"old", qos=1, retain=True)
        p.publish("r", b"new", qos=0, retain=True)
        s = connected(h, "s")
        s.subscribe("r", 1)
        got = [(m.payload, m.qos) for m in publishes(s)]
        self.assertEqual(got, [(b"new", 0)])

    def test_retain_0_leaves_retained_alone(self):
        # [MQTT-3.3.1-12]
        h = Harness()
        p = connected(h, "p")
        p.publish("r", b"kept", retain=True)
        p.publish("r", b"live")
        p.publish("r", b"")
        p.publish("s", b"not stored")
        s = connected(h, "s")
        s.subscribe("#")
        self.assertEqual([m.payload for m in publishes(s)], [b"kept"])
        self.assertEqual(h.broker.routing.retained.count(), 1)


class TestSubscriptions(unittest.TestCase):
    def test_wildcards_refused_when_off(self):
        # [MQTT-3.8.3-2]
        h = Harness(wildcard_subscriptions=False)
        c = connected(h, "c")
        c.send(Subscribe(1, [("a/+", 1), ("#", 0), ("a/b", 1)], None))
        self.assertEqual(c.expect(C.SUBACK).reasons, [0x80, 0x80, 1])

    def test_several_filters_are_a_sequence_with_one_suback(self):
        # [MQTT-3.8.4-4] [MQTT-3.8.4-5] the second "a" replaces the first
        h = Harness()
        c = connected(h, "c")
        c.send(Subscribe(7, [("a", 0), ("b", 2), ("a", 1)], None))
        acks = c.take()
        self.assertEqual([x.ptype for x in acks], [C.SUBACK])
        self.assertEqual(acks[0].reasons, [0, 2, 1])
        self.assertEqual(h.broker.sessions.find("c").subs["a"].qos, 1)
        self.assertEqual(len(h.broker.sessions.find("c").subs), 2)

    def test_several_filters_one_unsuback(self):
        # [MQTT-3.10.4-6]
        h = Harness()
        c = connected(h, "c")
        c.subscribe("a")
        c.subscribe("b", packet_id=2)
        c.send(Unsubscribe(3, ["a", "b", "zz"], None))
        self.assertEqual([x.ptype for x in c.take()], [C.UNSUBACK])
        self.assertEqual(len(h.broker.sessions.find("c").subs), 0)

    def test_unsubscribe_compares_characters(self):
        # [MQTT-3.10.4-1] only the identical filter is deleted
        h = Harness()
        c = connected(h, "c")
        c.subscribe("a/+")
        c.subscribe("a/b", packet_id=2)
        c.unsubscribe("a/b", packet_id=3)
        c.unsubscribe("A/+", packet_id=4)
        c.unsubscribe("a/#", packet_id=5)
        self.assertEqual(sorted(h.broker.sessions.find("c").subs.keys()), ["a/+"])
        p = connected(h, "p")
        p.publish("a/b", b"x")
        self.assertEqual(len(publishes(c)), 1)

    def test_unsubscribe_completes_deliveries_in_flight(self):
        # [MQTT-3.10.4-3]
        h = Harness()
        c = connected(h, "c")
        c.subscribe("t", 2)
        p = connected(h, "p")
        p.publish("t", b"x", qos=2)
        msg = c.expect(C.PUBLISH)
        c.unsubscribe("t")
        c.send(PubAck(C.PUBREC, msg.packet_id, 0, None))
        self.assertEqual(c.expect(C.PUBREL).packet_id, msg.packet_id)
        c.send(PubAck(C.PUBCOMP, msg.packet_id, 0, None))
        self.assertEqual(h.broker.sessions.find("c").inflight, [])


class TestSessionLifetime(unittest.TestCase):
    def test_state_kept_while_connected(self):
        # [MQTT-4.1.0-1] [MQTT-4.1.0-2] even past the orphan expiry setting
        h = Harness(persistent_session_expiry=5)
        for clean in (True, False):
            c = connected(h, "c", clean=clean)
            c.subscribe("t", 1)
            h.advance(50)
            self.assertIsNotNone(h.broker.sessions.find("c"))
            p = connected(h, "p")
            p.publish("t", b"x", qos=1)
            self.assertEqual(c.expect(C.PUBLISH).payload, b"x")
            c.disconnect()
            p.disconnect()


class TestTopicRules(unittest.TestCase):
    def test_wildcards_in_topic_name_close(self):
        # [MQTT-4.7.1-1]
        h = Harness()
        for topic in ("a/#", "+", "a/b+"):
            p = connected(h, "p")
            p.send_raw(publish_raw(topic.encode()))
            self.assertTrue(p.closed, topic)

    def test_topic_length_bounded_by_65535_bytes(self):
        # [MQTT-4.7.3-3] the longest topic routes; a longer one cannot be encoded
        h = Harness(max_topic_length=65535, max_topic_levels=0)
        s = connected(h, "s")
        s.subscribe("#")
        p = connected(h, "p")
        longest = "t" * 65535
        p.publish(longest, b"x")
        self.assertEqual(s.expect(C.PUBLISH).topic, longest)
        with self.assertRaises(ValueError):
            encode_packet(Publish("t" * 65536, b"x", 0, False, False, 0, None), 4)

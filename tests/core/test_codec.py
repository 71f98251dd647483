"""Codec rules, one test per normative statement where the spec names one.

Plain unittest (runs under CPython and MicroPython): only assertEqual,
assertTrue, assertFalse, assertIs, assertIsNone, assertIn, assertRaises,
assertNotEqual and fail.
"""

import unittest

from common.mqtt import consts as C
from common.mqtt.codec import (
    FrameReader,
    decode_bin,
    decode_str,
    decode_u16,
    decode_u32,
    decode_vbi,
    vbi_size,
    write_vbi,
)
from common.mqtt.consts import (
    DISCONNECT,
    PUBACK,
    PUBCOMP,
    PUBREC,
    PUBREL,
    RC_MALFORMED_PACKET,
    RC_PACKET_TOO_LARGE,
    RC_PROTOCOL_ERROR,
    RC_TOPIC_NAME_INVALID,
    RC_UNSUPPORTED_PROTOCOL_VERSION,
    SUBSCRIBE,
    UNSUBSCRIBE,
)
from common.mqtt.errors import (
    MalformedPacket,
    MqttError,
    PacketTooLarge,
    ProtocolError,
    TopicNameInvalid,
    UnsupportedProtocol,
)
from common.mqtt.packets import (
    Auth,
    Connack,
    Connect,
    Disconnect,
    Pingreq,
    Pingresp,
    PubAck,
    Publish,
    Suback,
    Subscribe,
    Unsuback,
    Unsubscribe,
    decode_packet,
    encode_packet,
    encode_publish_parts,
    encode_publish_props,
)
from common.mqtt.properties import (
    decode_properties,
    decode_property_items,
    encode_property_items,
    prop_get,
    properties_size,
    write_properties,
)
from tests.core.packet_fields import fields


def decode(data, level):
    """Decode exactly one packet from ``data`` (bytes)."""
    reader = FrameReader(1 << 24)
    reader.feed(data)
    frame = reader.maybe_read_frame()
    if frame is None:
        raise AssertionError("incomplete packet")
    if reader.pending():
        raise AssertionError("bytes left after the packet")
    return decode_packet(frame[0], reader.buf, frame[1], frame[2], level)


def encode_vbi(value):
    # A Variable Byte Integer as bytes, by the codec's writer (checked
    # against hand-written bytes in test_vbi_boundaries_round_trip).
    buf = bytearray(vbi_size(value))
    write_vbi(buf, 0, value)
    return bytes(buf)


def frame(first, body):
    """A packet with a correct Remaining Length around ``body``."""
    return bytes((first,)) + encode_vbi(len(body)) + body


def s(text):
    b = text.encode("utf-8")
    return bytes((len(b) >> 8, len(b) & 0xFF)) + b


def connect_body(flags=0x02, level=4, name="MQTT", props=b"\x00", rest=b""):
    body = s(name) + bytes((level, flags)) + b"\x00\x3c"
    if level == 5:
        body += props
    return body + s("cid") + rest


class TestPrimitives(unittest.TestCase):
    def test_vbi_boundaries_round_trip(self):
        cases = (
            (0, "00"), (127, "7f"), (128, "8001"), (16383, "ff7f"), (16384, "808001"),
            (2097151, "ffff7f"), (2097152, "80808001"), (268435455, "ffffff7f"),
        )
        for value, hx in cases:
            data = bytes.fromhex(hx)
            self.assertEqual(encode_vbi(value), data)
            self.assertEqual(decode_vbi(data, 0, len(data)), (value, len(data)))

    def test_vbi_fifth_byte_is_malformed(self):
        data = bytes.fromhex("ffffffff01")
        with self.assertRaises(MalformedPacket):
            decode_vbi(data, 0, len(data))

    def test_vbi_non_minimal_is_malformed(self):
        # [MQTT-1.5.5-1] the minimum number of bytes must be used
        for hx in ("8000", "ff00", "808000", "80808000", "818000"):
            data = bytes.fromhex(hx)
            with self.assertRaises(MalformedPacket):
                decode_vbi(data, 0, len(data))

    def test_vbi_truncated_is_malformed(self):
        self.assertRaises(MalformedPacket, decode_vbi, b"\x80\x80", 0, 2)
        self.assertRaises(MalformedPacket, decode_vbi, b"", 0, 0)

    def test_integers_and_bounds(self):
        self.assertEqual(decode_u16(b"\x12\x34", 0, 2), (0x1234, 2))
        self.assertEqual(decode_u32(b"\xff\xff\xff\xff", 0, 4), (0xFFFFFFFF, 4))
        self.assertRaises(MalformedPacket, decode_u16, b"\x12\x34", 1, 2)
        self.assertRaises(MalformedPacket, decode_u32, b"\x00\x00\x00\x00", 0, 3)

    def test_string_and_binary_must_fit(self):
        self.assertEqual(decode_str(b"\x00\x02hi!", 0, 5), ("hi", 4))
        self.assertRaises(MalformedPacket, decode_str, b"\x00\x05hi", 0, 4)
        self.assertEqual(decode_bin(b"\x00\x00", 0, 2), (b"", 2))
        self.assertRaises(MalformedPacket, decode_bin, b"\x00\x03ab", 0, 4)
        self.assertRaises(MalformedPacket, decode_bin, b"\x00", 0, 1)

    def test_string_breaking_utf8_rules_is_malformed(self):
        # [MQTT-1.5.4-1] and [MQTT-1.5.4-2] through the decoder actually used
        for bad in (b"a\x00b", b"\xc0\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82"):
            data = bytes((0, len(bad))) + bad
            self.assertRaises(MalformedPacket, decode_str, data, 0, len(data))

    def test_bom_is_kept(self):
        # [MQTT-1.5.4-3] a BOM is not skipped or stripped
        data = b"\x00\x04\xef\xbb\xbfa"
        self.assertEqual(decode_str(data, 0, 6), ("\ufeffa", 6))


class TestFrameReader(unittest.TestCase):
    def test_refuses_256mb_header_at_once(self):
        reader = FrameReader(1024)
        reader.feed(b"\x30\xff\xff\xff\x7f")
        with self.assertRaises(PacketTooLarge) as cm:
            reader.maybe_read_frame()
        self.assertEqual(cm.exception.reason, RC_PACKET_TOO_LARGE)
        self.assertTrue(len(reader.buf) < 16)

    def test_limit_counts_the_whole_packet(self):
        pkt = encode_packet(Publish("t", b"x" * 100), 4)
        reader = FrameReader(len(pkt))
        reader.feed(pkt)
        self.assertNotEqual(reader.maybe_read_frame(), None)
        reader = FrameReader(len(pkt) - 1)
        reader.feed(pkt[:2])  # only the fixed header: refused already
        self.assertRaises(PacketTooLarge, reader.maybe_read_frame)

    def test_remaining_length_fifth_byte_malformed_at_fourth(self):
        reader = FrameReader(1 << 30)
        reader.feed(b"\x30\x80\x80\x80\x80")
        self.assertRaises(MalformedPacket, reader.maybe_read_frame)
        reader = FrameReader(1 << 30)
        reader.feed(b"\x30\x80\x80\x80")
        self.assertIsNone(reader.maybe_read_frame())
        reader.feed(b"\x80")
        self.assertRaises(MalformedPacket, reader.maybe_read_frame)

    def test_remaining_length_non_minimal(self):
        # [MQTT-1.5.5-1]
        reader = FrameReader(1 << 20)
        reader.feed(b"\xc0\x80\x00")
        self.assertRaises(MalformedPacket, reader.maybe_read_frame)

    def test_needs_more_and_returns_offsets(self):
        reader = FrameReader(1 << 20)
        self.assertIsNone(reader.maybe_read_frame())
        reader.feed(b"\x30")
        self.assertIsNone(reader.maybe_read_frame())
        reader.feed(b"\x05\x00\x01a")
        self.assertIsNone(reader.maybe_read_frame())
        reader.feed(b"hi\xc0\x00")
        first, start, end = reader.maybe_read_frame()
        self.assertEqual(first, 0x30)
        self.assertEqual(bytes(reader.buf[start:end]), b"\x00\x01ahi")
        self.assertEqual(reader.maybe_read_frame(), (0xC0, end + 2, end + 2))
        self.assertIsNone(reader.maybe_read_frame())
        self.assertEqual(reader.pending(), 0)

    def test_compacts_consumed_bytes(self):
        reader = FrameReader(1 << 20)
        one = encode_packet(Publish("a/b", b"p" * 50), 4)
        for _ in range(200):
            reader.feed(one)
            self.assertNotEqual(reader.maybe_read_frame(), None)
        self.assertTrue(len(reader.buf) <= 2 * len(one))

    def test_an_empty_feed_moves_nothing_pending(self):
        # A rate-held flooder is read again a slice at a time with feed(b"")
        # (driver._follow): the bytes still pending (up to a whole read) are
        # neither moved nor copied for it, only framed further.
        one = encode_packet(Publish("a/b", b"p" * 50), 4)
        chunk = bytearray(one * 1000)  # the shell's read buffer
        reader = FrameReader(1 << 20)
        reader.feed(chunk)
        self.assertEqual(reader.next_frame(), 0x30)
        reader.keep()  # as the shell does before it reads into `chunk` again
        own = reader.own
        size = len(own)
        for _ in range(100):
            reader.feed(b"")
            for _ in range(2):
                self.assertEqual(reader.next_frame(), 0x30)
                self.assertEqual(bytes(reader.buf[reader.start:reader.stop]), one[2:])
            self.assertIs(reader.own, own)
            self.assertEqual(len(own), size)  # nothing moved: no copy of what waits
        self.assertEqual(reader.pending(), (1000 - 201) * len(one))
        reader.feed(one)  # new input still lands after what waits
        frames = 0
        while reader.next_frame() == 0x30:
            frames += 1
        self.assertEqual(frames, 1000 - 201 + 1)

    def test_old_frame_memory_survives_feed(self):
        # A caller's view of a returned frame keeps pointing at its bytes:
        # feed() never resizes a buffer a frame was handed out from.
        reader = FrameReader(1 << 20)
        reader.feed(b"\xc0\x00\x30\x03\x00\x01a")
        self.assertEqual(reader.maybe_read_frame(), (0xC0, 2, 2))
        view = memoryview(reader.buf)
        reader.feed(b"x" * 4096)
        self.assertEqual(bytes(view[0:2]), b"\xc0\x00")
        f2 = reader.maybe_read_frame()
        self.assertEqual(f2[0], 0x30)

    def test_many_packets_any_chunking(self):
        pkts = [Publish("t/%d" % k, b"v" * k, k % 3, False, False, k + 1 if k % 3 else 0)
                for k in range(30)]
        data = b"".join([encode_packet(p, 4) for p in pkts])
        for chunk in (1, 2, 3, 7, 64, len(data)):
            reader = FrameReader(1 << 20)
            got = []
            for k in range(0, len(data), chunk):
                reader.feed(data[k:k + chunk])
                while True:
                    f = reader.maybe_read_frame()
                    if f is None:
                        break
                    got.append(decode_packet(f[0], reader.buf, f[1], f[2], 4))
            self.assertEqual([fields(p) for p in got], [fields(p) for p in pkts])


class TestFixedHeader(unittest.TestCase):
    def test_type_0_is_malformed(self):
        self.assertRaises(MalformedPacket, decode, b"\x00\x00", 4)
        self.assertRaises(MalformedPacket, decode, b"\x00\x00", 5)

    def test_auth_at_level_4_is_malformed(self):
        self.assertRaises(MalformedPacket, decode, b"\xf0\x00", 4)
        self.assertEqual(fields(decode(b"\xf0\x00", 5)), fields(Auth(0)))

    def test_reserved_flags(self):
        # [MQTT-2.2.2-1] reserved flags have the listed values;
        # [MQTT-2.2.2-2] other values are malformed
        good = {
            PUBREL: encode_packet(PubAck(PUBREL, 1), 4),
            SUBSCRIBE: encode_packet(Subscribe(1, [("a", 0)]), 4),
            UNSUBSCRIBE: encode_packet(Unsubscribe(1, ["a"]), 4),
            PUBACK: encode_packet(PubAck(PUBACK, 1), 4),
            PUBREC: encode_packet(PubAck(PUBREC, 1), 4),
            PUBCOMP: encode_packet(PubAck(PUBCOMP, 1), 4),
            2: encode_packet(Connack(False, 0), 4),
            9: encode_packet(Suback(1, [0]), 4),
            11: encode_packet(Unsuback(1), 4),
            12: b"\xc0\x00",
            13: b"\xd0\x00",
            DISCONNECT: b"\xe0\x00",
            1: frame(0x10, connect_body()),
        }
        for ptype in good:
            data = good[ptype]
            decode(data, 4)
            for flags in range(16):
                if (data[0] & 0x0F) == flags:
                    continue
                bad = bytes(((ptype << 4) | flags,)) + data[1:]
                self.assertRaises(MalformedPacket, decode, bad, 4)
        self.assertRaises(MalformedPacket, decode, b"\xf1\x00", 5)

    def test_publish_qos_3_is_malformed(self):
        # [MQTT-3.3.1-4]
        self.assertRaises(MalformedPacket, decode, frame(0x36, s("a") + b"\x00\x01"), 4)

    def test_publish_dup_with_qos_0_is_protocol_error(self):
        # [MQTT-3.3.1-2]
        self.assertRaises(ProtocolError, decode, frame(0x38, s("a")), 4)

    def test_trailing_garbage_is_malformed(self):
        for pkt, level in (
            (PubAck(PUBACK, 1), 4), (Connack(False, 0), 4), (Connack(False, 0), 5),
            (Unsuback(1), 4), (Pingreq(), 4), (Pingresp(), 5), (Disconnect(), 4),
            (Disconnect(0x8E, [(0x1F, "x")]), 5), (Auth(0x18, [(0x15, "m")]), 5),
            (PubAck(PUBREL, 1, 0x92, [(0x1F, "x")]), 5),
            (Connect(4, True, 0, "c", username="u", password=b"p"), 4),
        ):
            data = encode_packet(pkt, level)
            bad = bytes((data[0],)) + encode_vbi(len(data) - 1) + data[2:] + b"\x00"
            self.assertRaises(MalformedPacket, decode, bad, level)


class TestConnect(unittest.TestCase):
    def test_levels_3_4_5(self):
        self.assertEqual(decode(frame(0x10, connect_body(level=3, name="MQIsdp")), 4).level, 3)
        self.assertEqual(decode(frame(0x10, connect_body(level=4)), 5).level, 4)
        self.assertEqual(decode(frame(0x10, connect_body(level=5)), 4).level, 5)

    def test_unsupported_level_named(self):
        # [MQTT-3.1.2-2] the broker answers 0x01 / 0x84; the log names the level
        with self.assertRaises(UnsupportedProtocol) as cm:
            decode(frame(0x10, connect_body(level=6)), 4)
        self.assertEqual(cm.exception.msg, "protocol level 6")
        self.assertEqual(cm.exception.reason, RC_UNSUPPORTED_PROTOCOL_VERSION)
        self.assertRaises(UnsupportedProtocol, decode, frame(0x10, connect_body(level=4, name="MQIsdp")), 4)
        self.assertRaises(UnsupportedProtocol, decode, frame(0x10, connect_body(level=3)), 4)

    def test_unknown_protocol_name(self):
        # [MQTT-3.1.2-1]
        self.assertRaises(ProtocolError, decode, frame(0x10, connect_body(name="MQTX")), 4)
        # 5.0 [MQTT-3.1.2-1] answered with CONNACK 0x84
        self.assertRaises(UnsupportedProtocol, decode, frame(0x10, connect_body(name="MQTX", level=5)), 5)

    def test_reserved_flag_is_malformed(self):
        # [MQTT-3.1.2-3]
        self.assertRaises(MalformedPacket, decode, frame(0x10, connect_body(flags=0x03)), 4)
        self.assertRaises(MalformedPacket, decode, frame(0x10, connect_body(flags=0x03, level=5)), 5)

    def test_will_rules(self):
        will = s("w/t") + s("bye")
        # will QoS 1 with the will flag: fine
        pkt = decode(frame(0x10, connect_body(flags=0x0E, rest=will)), 4)
        self.assertEqual((pkt.will_topic, pkt.will_payload, pkt.will_qos), ("w/t", b"bye", 1))
        # [MQTT-3.1.2-11] (5.0) / [MQTT-3.1.2-13] (3.1.1): will QoS without will flag
        self.assertRaises(MalformedPacket, decode, frame(0x10, connect_body(flags=0x0A)), 4)
        self.assertRaises(MalformedPacket, decode, frame(0x10, connect_body(flags=0x12, level=5)), 5)
        # [MQTT-3.1.2-13] (5.0) / [MQTT-3.1.2-15] (3.1.1): will retain without will flag
        self.assertRaises(MalformedPacket, decode, frame(0x10, connect_body(flags=0x22)), 4)
        self.assertRaises(MalformedPacket, decode, frame(0x10, connect_body(flags=0x22, level=5)), 5)
        # [MQTT-3.1.2-12] (5.0) / [MQTT-3.1.2-14] (3.1.1): will QoS 3
        self.assertRaises(MalformedPacket, decode, frame(0x10, connect_body(flags=0x1E, rest=will)), 4)
        # the will flag promises a will topic and payload [MQTT-3.1.2-9]
        self.assertRaises(MalformedPacket, decode, frame(0x10, connect_body(flags=0x06)), 4)

    def test_will_topic_must_be_a_topic_name(self):
        for topic in ("a/+", "#", ""):
            data = frame(0x10, connect_body(flags=0x06, rest=s(topic) + s("x")))
            self.assertRaises(TopicNameInvalid, decode, data, 4)

    def test_password_without_username(self):
        # 3.1.1 [MQTT-3.1.2-22]: the password flag needs the user name flag
        self.assertRaises(MalformedPacket, decode, frame(0x10, connect_body(flags=0x42, rest=s("pw"))), 4)
        self.assertRaises(
            MalformedPacket, decode,
            frame(0x10, connect_body(flags=0x42, level=3, name="MQIsdp", rest=s("pw"))), 4)
        # 5.0 allows it (3.1.2.9)
        pkt = Connect(5, True, 10, "c", password=b"\x00pw")
        got = decode(encode_packet(pkt, 5), 5)
        self.assertEqual(fields(got), fields(pkt))
        self.assertIsNone(got.username)

    def test_connect_takes_its_other_fields_by_keyword_only(self):
        pkt = Connect(5, False, 30, "id", will_topic="w", username="u")
        self.assertEqual((pkt.will_topic, pkt.will_qos, pkt.username, pkt.password, pkt.proto_name), ("w", 0, "u", None, "MQTT"))
        self.assertEqual(Connect(3).proto_name, "MQIsdp")
        with self.assertRaises(TypeError):
            Connect(4, True, 0, "c", wil_topic="x")  # a typo is refused, not carried

    def test_connect_with_everything_round_trips(self):
        pkt = Connect(5, False, 65535, "id", will_topic="w", will_payload=b"", will_qos=2, will_retain=True,
                      will_props=[(0x18, 0), (0x26, ("a", "b")), (0x26, ("a", "c"))], username="", password=b"",
                      props=[(0x11, 0xFFFFFFFF), (0x26, ("x", "")), (0x22, 0)])
        self.assertEqual(fields(decode(encode_packet(pkt, 5), 5)), fields(pkt))

    def test_connack_rules(self):
        self.assertRaises(MalformedPacket, decode, b"\x20\x02\x02\x00", 4)  # [MQTT-3.2.2-1]
        self.assertRaises(ProtocolError, decode, b"\x20\x02\x01\x05", 4)  # [MQTT-3.2.2-4]
        self.assertRaises(ProtocolError, decode, b"\x20\x02\x00\x06", 4)
        self.assertRaises(ProtocolError, decode, b"\x20\x03\x00\x01\x00", 5)
        self.assertEqual(fields(decode(b"\x20\x03\x00\x84\x00", 5)), fields(Connack(False, 0x84)))


class TestPublish(unittest.TestCase):
    def test_wildcards_in_topic_name(self):
        # [MQTT-3.3.2-2]
        for topic in ("a/+", "+", "a/#", "#", "a+b"):
            for level in (4, 5):
                with self.assertRaises(TopicNameInvalid) as cm:
                    decode(encode_packet(Publish(topic, b"x"), level), level)
                self.assertEqual(cm.exception.reason, RC_TOPIC_NAME_INVALID)

    def test_empty_topic(self):
        # 3.1.1 [MQTT-4.7.3-1]: at least one character
        self.assertRaises(TopicNameInvalid, decode, encode_packet(Publish("", b"x"), 4), 4)
        # 5.0: allowed with a Topic Alias, which the broker resolves (3.3.2.1)
        pkt = Publish("", b"x", 0, False, False, 0, [(0x23, 7)])
        self.assertEqual(fields(decode(encode_packet(pkt, 5), 5)), fields(pkt))
        self.assertRaises(ProtocolError, decode, encode_packet(Publish("", b"x"), 5), 5)

    def test_packet_id_zero(self):
        # [MQTT-2.3.1-1]
        for qos in (1, 2):
            for level in (4, 5):
                data = encode_packet(Publish("a", b"", qos, False, False, 0), level)
                self.assertRaises(ProtocolError, decode, data, level)

    def test_topic_utf8(self):
        data = frame(0x30, b"\x00\x02\xc0\xafpayload")
        self.assertRaises(MalformedPacket, decode, data, 4)

    def test_payload_may_be_anything(self):
        pkt = Publish("t", bytes(range(256)), 1, True, True, 9)
        self.assertEqual(fields(decode(encode_packet(pkt, 4), 4)), fields(pkt))

    def test_short_body(self):
        self.assertRaises(MalformedPacket, decode, b"\x32\x03\x00\x01a", 4)
        self.assertRaises(MalformedPacket, decode, b"\x30\x01\x00", 4)


class TestProperties(unittest.TestCase):
    def props_publish(self, block):
        return frame(0x30, s("t") + block + b"payload")

    def test_unknown_property_is_malformed(self):
        for pid in (0x00, 0x04, 0x2B, 0x7F, 0x80):
            data = self.props_publish(bytes((2, pid, 0)))
            with self.assertRaises(MalformedPacket) as cm:
                decode(data, 5)
            self.assertEqual(cm.exception.reason, RC_MALFORMED_PACKET)

    def test_property_not_allowed_in_packet_is_malformed(self):
        # Topic Alias in CONNECT, Will Delay Interval outside the will,
        # Session Expiry Interval in PUBLISH, Reason String in PUBLISH
        self.assertRaises(MalformedPacket, decode,
                          frame(0x10, connect_body(level=5, props=b"\x03\x23\x00\x01")), 5)
        self.assertRaises(MalformedPacket, decode,
                          frame(0x10, connect_body(level=5, props=b"\x05\x18\x00\x00\x00\x01")), 5)
        self.assertRaises(MalformedPacket, decode, self.props_publish(b"\x05\x11\x00\x00\x00\x01"), 5)
        self.assertRaises(MalformedPacket, decode, self.props_publish(b"\x04\x1f\x00\x01x"), 5)
        # Will properties: only the will set [MQTT-3.1.3-*, 3.1.3.2]
        will = b"\x03\x21\x00\x01" + s("w") + s("x")
        self.assertRaises(MalformedPacket, decode,
                          frame(0x10, connect_body(flags=0x06, level=5, rest=will)), 5)
        # Subscription Identifier in SUBACK
        self.assertRaises(MalformedPacket, decode, frame(0x90, b"\x00\x01\x02\x0b\x01\x00"), 5)

    def test_repeated_property_is_protocol_error(self):
        with self.assertRaises(ProtocolError) as cm:
            # Message Expiry Interval twice
            decode(self.props_publish(b"\x0a\x02\x00\x00\x00\x01\x02\x00\x00\x00\x02"), 5)
        self.assertEqual(cm.exception.reason, RC_PROTOCOL_ERROR)
        self.assertRaises(ProtocolError, decode, self.props_publish(b"\x04\x01\x01\x01\x00"), 5)
        # Subscription Identifier may repeat in PUBLISH only
        sub = frame(0x82, b"\x00\x01\x04\x0b\x01\x0b\x02" + s("a") + b"\x00")
        self.assertRaises(ProtocolError, decode, sub, 5)
        pub = decode(self.props_publish(b"\x04\x0b\x01\x0b\x02"), 5)
        self.assertEqual([v for pid, v in pub.props if pid == 0x0B], [1, 2])

    def test_user_properties_repeat_in_order(self):
        props = [(0x26, ("a", "1")), (0x26, ("b", "2")), (0x26, ("a", "3")), (0x26, ("", ""))]
        for pkt in (Publish("t", b"", 0, False, False, 0, props), Disconnect(0, props),
                    PubAck(PUBREC, 5, 0, props), Suback(1, [0], props), Auth(0, props)):
            got = decode(encode_packet(pkt, 5), 5)
            self.assertEqual(got.props, props)

    def test_encoded_items_and_per_delivery_properties(self):
        # encode_publish_props: properties encoded once (encode_property_items)
        # then each delivery's own, the same bytes as encode_publish of the
        # whole list in that order.
        fwd = [(0x26, ("k", "1")), (0x03, "text/\u00e9"), (0x09, b"\x00\xff"), (0x26, ("k", "2")), (0x01, 1)]
        items = encode_property_items(fwd)
        self.assertEqual(len(items), properties_size(fwd))
        self.assertEqual(decode_property_items(items, 3), fwd)
        self.assertIsNone(encode_property_items(None))
        self.assertIsNone(decode_property_items(None, 3))
        big = [200, 1, 268435455]
        for topic, qos, pid, expiry, sub_ids, alias in (
            ("t/x", 1, 7, 30, [5], 0),
            ("", 2, 65535, -1, big, 9),
            ("t", 0, 0, 0, None, 0),
            ("t", 0, 0, -1, None, 0),
        ):
            for props in (fwd, None):
                whole = list(props or [])
                if expiry >= 0:
                    whole.append((0x02, expiry))
                for sub_id in sub_ids or ():
                    whole.append((0x0B, sub_id))
                if alias:
                    whole.append((0x23, alias))
                bits = qos | C.PUBLISH_RETAIN | pid << C.PUBLISH_PID_SHIFT
                dup = C.PUBLISH_DUP if qos else 0
                for payload in (b"p", bytes(300)):
                    want = encode_packet(Publish(topic, payload, qos, True, qos > 0, pid, whole), 5)
                    got = encode_publish_props(topic, payload, bits | dup, encode_property_items(props), expiry, sub_ids, alias)
                    self.assertEqual(got, want)
                    self.assertEqual(decode(got, 5).props or [], whole)
                    if expiry < 0 and not sub_ids and not alias:
                        # only the forwarded ones: the same through encode_publish_parts
                        self.assertEqual(encode_publish_parts(topic, payload, bits | dup, 5, encode_property_items(props)), want)
                    # 3.1.1 leaves every property out
                    self.assertEqual(
                        encode_publish_parts(topic, payload, bits, 4, encode_property_items(props)),
                        encode_packet(Publish(topic, payload, qos, True, False, pid, None), 4),
                    )

    def test_values_that_must_not_be_zero(self):
        # Receive Maximum 0, Maximum Packet Size 0 (3.1.2.11.3, .4)
        for block in (b"\x03\x21\x00\x00", b"\x05\x27\x00\x00\x00\x00"):
            self.assertRaises(ProtocolError, decode, frame(0x10, connect_body(level=5, props=block)), 5)
            self.assertRaises(ProtocolError, decode, frame(0x20, b"\x00\x00" + block), 5)
        # Subscription Identifier 0 (3.8.2.1.2), Topic Alias 0 [MQTT-3.3.2-8]
        self.assertRaises(ProtocolError, decode, self.props_publish(b"\x02\x0b\x00"), 5)
        self.assertRaises(ProtocolError, decode, frame(0x82, b"\x00\x01\x02\x0b\x00" + s("a") + b"\x00"), 5)
        self.assertRaises(ProtocolError, decode, self.props_publish(b"\x03\x23\x00\x00"), 5)

    def test_flag_bytes_must_be_0_or_1(self):
        self.assertRaises(ProtocolError, decode, self.props_publish(b"\x02\x01\x02"), 5)
        for pid in (0x17, 0x19):
            self.assertRaises(ProtocolError, decode,
                              frame(0x10, connect_body(level=5, props=bytes((2, pid, 2)))), 5)
        for pid in (0x24, 0x25, 0x28, 0x29, 0x2A):
            self.assertRaises(ProtocolError, decode, frame(0x20, bytes((0, 0, 2, pid, 2))), 5)
            got = decode(frame(0x20, bytes((0, 0, 2, pid, 1))), 5)
            self.assertEqual(prop_get(got.props, pid), 1)

    def test_property_block_bounds(self):
        self.assertRaises(MalformedPacket, decode, self.props_publish(b"\x09\x02\x00"), 5)
        self.assertRaises(MalformedPacket, decode, frame(0x30, s("t") + b"\x05\x02\x00\x00"), 5)
        self.assertRaises(MalformedPacket, decode, self.props_publish(b"\x03\x26\x00\x01"), 5)
        self.assertRaises(MalformedPacket, decode, self.props_publish(b"\x80\x00"), 5)  # non-minimal length

    def test_properties_block_functions(self):
        props = [(0x01, 1), (0x02, 0xFFFFFFFF), (0x0B, 268435455), (0x09, b"\x00"), (0x26, ("k", "v"))]
        size = properties_size(props)
        block = bytearray(vbi_size(size) + size)
        self.assertEqual(write_properties(block, 0, props, size), len(block))
        self.assertEqual(decode_properties(block, 0, len(block), 3), (props, len(block)))
        self.assertEqual(decode_properties(b"\x00", 0, 1, 3), (None, 1))


class TestAcks(unittest.TestCase):
    def test_v5_short_forms(self):
        # 3.4.2.1: Remaining Length 2 => reason 0, no properties
        for ptype in (PUBACK, PUBREC, PUBREL, PUBCOMP):
            first = (ptype << 4) | (2 if ptype == PUBREL else 0)
            self.assertEqual(fields(decode(bytes((first, 2, 0, 7)), 5)), fields(PubAck(ptype, 7, 0)))
            reason = 0x92 if ptype in (PUBREL, PUBCOMP) else 0x10
            # Remaining Length 3 => reason, no properties
            self.assertEqual(fields(decode(bytes((first, 3, 0, 7, reason)), 5)), fields(PubAck(ptype, 7, reason)))
            self.assertEqual(encode_packet(PubAck(ptype, 7, reason), 5), bytes((first, 3, 0, 7, reason)))
            self.assertEqual(encode_packet(PubAck(ptype, 7), 5), bytes((first, 2, 0, 7)))
            # 3.1.1: exactly two bytes
            self.assertRaises(MalformedPacket, decode, bytes((first, 3, 0, 7, 0)), 4)

    def test_packet_id_zero(self):
        # [MQTT-2.3.1-1]
        for data in (b"\x40\x02\x00\x00", b"\x62\x02\x00\x00", b"\x90\x03\x00\x00\x00",
                     b"\xb0\x02\x00\x00", frame(0x82, b"\x00\x00" + s("a") + b"\x00"),
                     frame(0xA2, b"\x00\x00" + s("a"))):
            self.assertRaises(ProtocolError, decode, data, 4)

    def test_reason_codes_must_be_listed(self):
        self.assertRaises(ProtocolError, decode, b"\x40\x03\x00\x01\x92", 5)
        self.assertRaises(ProtocolError, decode, b"\x62\x03\x00\x01\x10", 5)
        self.assertRaises(ProtocolError, decode, b"\x90\x04\x00\x01\x00\x03", 5)
        self.assertRaises(ProtocolError, decode, b"\x90\x03\x00\x01\x83", 4)  # [MQTT-3.9.3-2]
        self.assertRaises(ProtocolError, decode, b"\xb0\x04\x00\x01\x00\x01", 5)
        self.assertRaises(ProtocolError, decode, b"\xe0\x01\x05", 5)
        self.assertRaises(ProtocolError, decode, b"\xf0\x01\x01", 5)

    def test_empty_reason_lists(self):
        self.assertRaises(ProtocolError, decode, b"\x90\x02\x00\x01", 4)
        self.assertRaises(ProtocolError, decode, b"\xb0\x03\x00\x01\x00", 5)

    def test_unsuback_levels(self):
        self.assertEqual(fields(decode(b"\xb0\x02\x00\x05", 4)), fields(Unsuback(5, [])))
        self.assertEqual(encode_packet(Unsuback(5, [0x11]), 4), b"\xb0\x02\x00\x05")
        self.assertEqual(fields(decode(b"\xb0\x04\x00\x05\x00\x11", 5)), fields(Unsuback(5, [0x11])))


class TestSubscribe(unittest.TestCase):
    def sub(self, opts, level):
        body = b"\x00\x01" + (b"\x00" if level == 5 else b"") + s("a/b") + bytes((opts,))
        return frame(0x82, body)

    def test_options_v5(self):
        got = decode(self.sub(0x2E, 5), 5)
        self.assertEqual(got.topics, [("a/b", 0x2E)])
        # [MQTT-3.8.3-5] reserved bits
        self.assertRaises(MalformedPacket, decode, self.sub(0x40, 5), 5)
        self.assertRaises(MalformedPacket, decode, self.sub(0x80, 5), 5)
        # 3.8.3.1: Retain Handling 3 and Maximum QoS 3 are protocol errors
        self.assertRaises(ProtocolError, decode, self.sub(0x30, 5), 5)
        self.assertRaises(ProtocolError, decode, self.sub(0x03, 5), 5)

    def test_options_v311(self):
        # 3.1.1 [MQTT-3-8.3-4]: reserved bits and QoS 3 are malformed
        self.assertEqual(decode(self.sub(0x02, 4), 4).topics, [("a/b", 2)])
        for opts in (0x03, 0x04, 0x08, 0x10, 0x80):
            self.assertRaises(MalformedPacket, decode, self.sub(opts, 4), 4)

    def test_empty_payload(self):
        # 3.1.1 [MQTT-3.8.3-3], 5.0 [MQTT-3.8.3-2]
        self.assertRaises(ProtocolError, decode, b"\x82\x02\x00\x01", 4)
        self.assertRaises(ProtocolError, decode, b"\x82\x03\x00\x01\x00", 5)
        # [MQTT-3.10.3-2]
        self.assertRaises(ProtocolError, decode, b"\xa2\x02\x00\x01", 4)
        self.assertRaises(ProtocolError, decode, b"\xa2\x03\x00\x01\x00", 5)

    def test_missing_options_byte(self):
        self.assertRaises(MalformedPacket, decode, frame(0x82, b"\x00\x01" + s("a")), 4)


class TestDisconnectAuth(unittest.TestCase):
    def test_short_forms(self):
        # 3.14.2.1: Remaining Length 0 => reason 0; 1 => no properties
        self.assertEqual(fields(decode(b"\xe0\x00", 5)), fields(Disconnect(0)))
        self.assertEqual(fields(decode(b"\xe0\x01\x8e", 5)), fields(Disconnect(0x8E)))
        self.assertEqual(encode_packet(Disconnect(0x8E), 5), b"\xe0\x01\x8e")
        self.assertEqual(encode_packet(Disconnect(0), 5), b"\xe0\x00")
        self.assertEqual(encode_packet(Disconnect(0x8E), 4), b"\xe0\x00")
        # 3.15.2.1
        self.assertEqual(fields(decode(b"\xf0\x00", 5)), fields(Auth(0)))
        self.assertEqual(fields(decode(b"\xf0\x01\x19", 5)), fields(Auth(0x19)))
        self.assertRaises(MalformedPacket, decode, b"\xe0\x01\x00", 4)

    def test_errors_are_mqtt_errors_with_reason(self):
        e = MalformedPacket("x")
        self.assertTrue(isinstance(e, MqttError))
        self.assertEqual(e.reason, 0x81)
        self.assertEqual(ProtocolError().reason, 0x82)
        self.assertEqual(MqttError(0x97, "quota").reason, 0x97)
        self.assertEqual(UnsupportedProtocol().reason, 0x84)


class TestNoStrayExceptions(unittest.TestCase):
    """Any bytes either parse or raise MqttError (a cheap fuzz that also runs
    under MicroPython; tests/host/test_codec_hypothesis.py goes further)."""

    def test_pseudo_random_bytes(self):
        seed = 12345
        for n in range(300):
            data = bytearray()
            length = 1 + n % 40
            for _ in range(length):
                seed = (seed * 1103515245 + 12345) & 0x7FFFFFFF
                data.append((seed >> 16) & 0xFF)
            if n % 3 == 0 and length > 2:
                # a plausible fixed header, so the decoders see the body
                data[0] = (data[0] & 0xF0) | (2 if (data[0] >> 4) in (6, 8, 10) else 0)
                data[1] = min(data[1] & 0x7F, length - 2)
            for level in (4, 5):
                reader = FrameReader(64)
                try:
                    reader.feed(bytes(data))
                    while True:
                        f = reader.maybe_read_frame()
                        if f is None:
                            break
                        decode_packet(f[0], reader.buf, f[1], f[2], level)
                except MqttError:
                    pass


class TestPacketFields(unittest.TestCase):
    # The tests compare packets through fields() (tests/core/packet_fields.py):
    # it must tell apart what differs, a class default (CONNECT's will) included.
    def test_fields_tell_packets_apart(self):
        self.assertEqual(fields(Publish("a", b"x", 1, False, False, 7)), fields(Publish("a", b"x", 1, False, False, 7)))
        self.assertNotEqual(fields(Publish("a", b"x")), fields(Publish("b", b"x")))
        self.assertNotEqual(fields(Publish("a", b"x")), fields(Publish("a", b"y")))
        self.assertNotEqual(fields(PubAck(PUBACK, 1)), fields(PubAck(PUBREC, 1)))
        self.assertNotEqual(fields(Connect(5, True, 10, "c")), fields(Connect(5, True, 10, "c", will_topic="w")))
        self.assertNotEqual(fields(Disconnect(0)), fields(Auth(0)))
        # No properties and an empty list of them are alike.
        self.assertEqual(fields(Disconnect(0, None)), fields(Disconnect(0, [])))

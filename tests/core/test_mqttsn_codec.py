# common/mqttsn/codec.py: every MQTT-SN v1.2 message (§5.4.1-§5.4.25), the
# flags octet (§5.3.4), both length forms (§5.2.1) and the strict refusals.
# Plain unittest: runs under pytest and under MicroPython (tests/upy shim).

import unittest

from common.compat import from_hex
from common.mqttsn import consts as c
from common.mqttsn.codec import (
    SnMalformed,
    SnMessage,
    decode_message,
    encode_message,
    parse_datagram,
)
from tests.core.mqttsn_golden import GOLDEN


def decode(data):
    return decode_message(data, 0, len(data))


class TestGolden(unittest.TestCase):
    def test_decode_every_golden_datagram(self):
        for name, section, mtype, fields, hexs in GOLDEN:
            got = decode(from_hex(hexs))
            self.assertEqual(got, SnMessage(mtype, **fields), name + " §" + section)

    def test_encode_every_golden_message(self):
        for name, section, mtype, fields, hexs in GOLDEN:
            self.assertEqual(encode_message(SnMessage(mtype, **fields)), from_hex(hexs), name + " §" + section)

    def test_decode_at_an_offset(self):
        # decoders take (buf, start, end): the shell may hand a larger buffer
        data = b"\xff\xff" + from_hex("070d0001000900") + b"\xee"
        msg = decode_message(data, 2, 9)
        self.assertEqual(msg.mtype, c.PUBACK)
        self.assertEqual(msg.msg_id, 9)

    def test_every_type_is_covered(self):
        # every v1.2 message type of §5.2.2 has at least one golden datagram
        types = [g[2] for g in GOLDEN]
        for t in (
            0x00,
            0x01,
            0x02,
            0x04,
            0x05,
            0x06,
            0x07,
            0x08,
            0x09,
            0x0A,
            0x0B,
            0x0C,
            0x0D,
            0x0E,
            0x0F,
            0x10,
            0x12,
            0x13,
            0x14,
            0x15,
            0x16,
            0x17,
            0x18,
            0x1A,
            0x1B,
            0x1C,
            0x1D,
        ):
            self.assertIn(t, types)


class TestFlags(unittest.TestCase):
    # §5.3.4: DUP bit 7, QoS bits 6-5 (0b11 = -1), Retain 4, Will 3, CleanSession 2, TopicIdType 1-0
    def test_qos_minus_one_is_0b11(self):
        msg = decode(from_hex("080c626162000031"))
        self.assertEqual(msg.qos, -1)
        self.assertEqual(msg.topic_id_type, c.TOPIC_SHORT)

    def test_each_flag_bit(self):
        for flags, field, value in (
            (0x80, "dup", True),
            (0x20, "qos", 1),
            (0x40, "qos", 2),
            (0x10, "retain", True),
            (0x01, "topic_id_type", c.TOPIC_PREDEFINED),
            (0x02, "topic_id_type", c.TOPIC_SHORT),
        ):
            data = bytes((7, c.PUBLISH, flags, 0, 1, 0, 2))
            self.assertEqual(getattr(decode(data), field), value, hex(flags))
        connect = decode(bytes((7, c.CONNECT, 0x0C, 1, 0, 10, 0x41)))
        self.assertTrue(connect.will)
        self.assertTrue(connect.clean)

    def test_reserved_topic_id_type_refused(self):
        # TopicIdType 0b11 is reserved (§5.3.4)
        for data in (bytes((7, c.PUBLISH, 0x03, 0, 1, 0, 2)), bytes((7, c.SUBSCRIBE, 0x23, 0, 1, 0, 2))):
            msg, reason = parse_datagram(data)
            self.assertIsNone(msg)
            self.assertIn("TopicIdType", reason)


class TestLengthForms(unittest.TestCase):
    # §5.2.1: one octet, or 0x01 then two octets; the length counts the header
    def test_three_octet_form_for_short_message_accepted(self):
        msg = decode(from_hex("01000418"))
        self.assertEqual(msg.mtype, c.DISCONNECT)
        self.assertIsNone(msg.duration)

    def test_long_message_uses_three_octets(self):
        data = encode_message(SnMessage(c.PUBLISH, topic_id=1, data=b"q" * 249))
        self.assertEqual(len(data), 258)
        self.assertEqual(data[:4], from_hex("0101020c"))
        self.assertEqual(decode(data).data, b"q" * 249)

    def test_255_octets_still_one_octet_form(self):
        data = encode_message(SnMessage(c.PUBLISH, topic_id=1, data=b"q" * 248))
        self.assertEqual(data[0], 255)


class TestRefusals(unittest.TestCase):
    # every malformed datagram is (None, reason), never an exception
    BAD = (
        ("", "truncated"),
        ("02", "truncated"),
        ("0016", "length 0"),
        ("0116", "truncated 3-octet"),
        ("010002", "truncated 3-octet"),
        ("01000316", "below its own header"),
        ("030d", "length 3 but datagram of 2"),  # truncated
        ("0216ff", "length 2 but datagram of 3"),  # wrong length byte
        ("01000618", "length 6 but datagram of 4"),
        ("0203", "unknown message type 0x03"),  # reserved types
        ("0211", "unknown message type 0x11"),
        ("0219", "unknown message type 0x19"),
        ("021e", "unknown message type 0x1E"),
        ("02fe", "unknown message type 0xFE"),  # §5.5 encapsulation: no forwarders
        ("0205", "needs 1"),
        ("060d00010002", "needs 5"),  # PUBACK without ReturnCode
        ("060c00000100", "needs at least 5"),
        ("0504000100", "needs at least 4"),
        ("07040002003c63", "ProtocolId 0x02"),
        ("070a00010002ff", "UTF-8"),  # REGISTER topic name
        ("08124100040102", "length 8 but"),
        ("0812410004010203", "needs 5"),  # predefined id longer than two octets
        ("031800", "needs 2"),  # DISCONNECT duration of one octet
        ("0416c080", "UTF-8"),  # overlong NUL in ClientId
    )

    def test_each_bad_datagram_refused_with_reason(self):
        for hexs, why in self.BAD:
            msg, reason = parse_datagram(from_hex(hexs))
            self.assertIsNone(msg, hexs)
            self.assertIn(why, reason, hexs)

    def test_decode_raises_only_snmalformed(self):
        with self.assertRaises(SnMalformed):
            decode(from_hex("0203"))

    def test_every_truncation_of_every_golden_refused(self):
        for entry in GOLDEN:
            name, hexs = entry[0], entry[4]
            data = from_hex(hexs)
            for n in range(len(data)):
                msg, reason = parse_datagram(data[:n])
                self.assertIsNone(msg, name)
                self.assertTrue(reason)


if __name__ == "__main__":
    unittest.main()

"""Our own MQTT UTF-8 validator, exercised directly on every interpreter
[MQTT-1.5.4-1..3]. The fast path (a strict built-in decoder, chosen by feature
detection in common/compat.py) must agree with it wherever it is used."""

import unittest

from common.compat import STRICT_UTF8_DECODE
from common.mqtt.errors import MalformedPacket
from common.mqtt.utf8 import check_utf8, decode_utf8, decode_utf8_checked

GOOD = (
    ("", ""),
    ("41", "A"),
    ("7f", "\x7f"),  # control characters are "SHOULD NOT", not malformed
    ("c280", "\x80"),
    ("dfbf", "\u07ff"),
    ("e0a080", "\u0800"),
    ("ed9fbf", "\ud7ff"),  # last code point before the surrogates
    ("ee8080", "\ue000"),  # first after them
    ("efbbbf", "\ufeff"),  # BOM: kept, never stripped [MQTT-1.5.4-3]
    ("efbfbf", "\uffff"),  # non-character: allowed (receiver MAY refuse)
    ("f0908080", "\U00010000"),
    ("f48fbfbf", "\U0010ffff"),
    ("636166c3a92fe282ac2ff09f9880", "caf\u00e9/\u20ac/\U0001f600"),
)

BAD = (
    "00",  # U+0000 [MQTT-1.5.4-2]
    "610062",
    "c080",  # overlong NUL
    "c1bf",  # overlong
    "e080af",  # overlong 3-byte
    "f0808080",  # overlong 4-byte
    "eda080",  # U+D800 surrogate [MQTT-1.5.4-1]
    "edbfbf",  # U+DFFF surrogate
    "f4908080",  # U+110000: above U+10FFFF
    "f5808080",
    "ff",
    "fe",
    "80",  # stray continuation
    "bf",
    "c2",  # truncated
    "e282",
    "f09f98",
    "c241",  # continuation missing
    "e228a1",
    "f0289f98",
    "f09f2898",
)


def is_valid_utf8(data):
    try:
        check_utf8(data, 0, len(data))
    except MalformedPacket:
        return False
    return True


class TestUtf8Validator(unittest.TestCase):
    def test_good_strings(self):
        for hx, text in GOOD:
            data = bytes.fromhex(hx)
            check_utf8(data, 0, len(data))
            self.assertTrue(is_valid_utf8(data))
            self.assertEqual(decode_utf8_checked(data, 0, len(data)), text)
            self.assertEqual(decode_utf8(data, 0, len(data)), text)

    def test_bad_strings(self):
        for hx in BAD:
            data = bytes.fromhex(hx)
            self.assertFalse(is_valid_utf8(data))
            self.assertRaises(MalformedPacket, check_utf8, data, 0, len(data))
            self.assertRaises(MalformedPacket, decode_utf8_checked, data, 0, len(data))
            self.assertRaises(MalformedPacket, decode_utf8, data, 0, len(data))

    def test_offsets_inside_a_larger_buffer(self):
        data = bytearray(b"\xff\xffok\xe2\x82\xac\xff")
        check_utf8(data, 2, 7)
        self.assertEqual(decode_utf8(data, 2, 7), "ok\u20ac")
        self.assertRaises(MalformedPacket, check_utf8, data, 2, 6)  # cuts the euro sign
        self.assertRaises(MalformedPacket, check_utf8, data, 0, 3)

    def test_every_two_byte_prefix_agrees_with_table(self):
        # Exhaustive over lead bytes: our validator against a reference rule.
        for lead in range(256):
            for second in (0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xFF):
                data = bytes((lead, second, 0x80, 0x80))
                n = 1 if lead < 0x80 else 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
                seq = data[0:n]
                expect = reference_valid(seq)
                self.assertEqual(is_valid_utf8(seq), expect)

    def test_fast_path_only_where_the_decoder_refuses_what_we_refuse(self):
        # STRICT_UTF8_DECODE lets decode_utf8 trust this interpreter's own
        # decoder: right only where that decoder refuses every sequence our
        # validator refuses (U+0000 aside: decode_utf8 looks for it itself).
        # The flag must say so both ways: CPython's decoder is strict,
        # MicroPython's is lax.
        lax = 0
        for lead in range(1, 256):
            for second in (0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xFF):
                for seq in (bytes((lead,)), bytes((lead, second)), bytes((lead, second, 0x80, 0x80))):
                    if is_valid_utf8(seq):
                        continue
                    try:
                        str(seq, "utf-8")
                        lax += 1
                    except (UnicodeError, ValueError):
                        pass
        self.assertEqual(STRICT_UTF8_DECODE, lax == 0)


def reference_valid(seq):
    """Decode by arithmetic and check the code point ranges (a second, naive
    implementation of RFC 3629 used only as the test's oracle)."""
    lead = seq[0]
    n = len(seq)
    if lead < 0x80:
        return lead != 0
    if lead < 0xC0 or lead > 0xF7:
        return False
    for c in seq[1:]:
        if c & 0xC0 != 0x80:
            return False
    if n == 2:
        cp = ((lead & 0x1F) << 6) | (seq[1] & 0x3F)
        return cp >= 0x80
    if n == 3:
        cp = ((lead & 0x0F) << 12) | ((seq[1] & 0x3F) << 6) | (seq[2] & 0x3F)
        return cp >= 0x800 and not (0xD800 <= cp <= 0xDFFF)
    cp = ((lead & 0x07) << 18) | ((seq[1] & 0x3F) << 12) | ((seq[2] & 0x3F) << 6) | (seq[3] & 0x3F)
    return 0x10000 <= cp <= 0x10FFFF

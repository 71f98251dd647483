# HKDF-SHA256 against RFC 5869 appendix A, test cases 1-3, on both
# interpreters (it only needs hashlib.sha256).

import unittest

from common.crypto.hkdf import hkdf_sha256
from common.crypto.hmac256 import hmac_sha256


def h(text):
    return bytes.fromhex(text)


class TestHkdfRfc5869(unittest.TestCase):
    def test_case_1_basic(self):
        okm = hkdf_sha256(b"\x0b" * 22, h("000102030405060708090a0b0c"), h("f0f1f2f3f4f5f6f7f8f9"), 42)
        self.assertEqual(
            okm.hex(), "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865"
        )

    def test_case_2_long_inputs(self):
        ikm = bytes(range(0x50))
        salt = bytes(range(0x60, 0xB0))
        info = bytes(range(0xB0, 0x100))
        okm = hkdf_sha256(ikm, salt, info, 82)
        self.assertEqual(
            okm.hex(),
            "b11e398dc80327a1c8e7f78c596a49344f012eda2d4efad8a050cc4c19afa97c"
            "59045a99cac7827271cb41c65e590e09da3275600c2f09b8367793a9aca3db71"
            "cc30c58179ec3e87c14c01d5c1f3434f1d87",
        )

    def test_case_3_empty_salt_and_info(self):
        okm = hkdf_sha256(b"\x0b" * 22, b"", b"", 42)
        self.assertEqual(
            okm.hex(), "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8"
        )

    def test_no_salt_is_hashlen_zeros(self):
        # RFC 5869 2.2: "if not provided, [salt] is set to a string of HashLen zeros".
        self.assertEqual(hkdf_sha256(b"k", None, b"i", 32), hkdf_sha256(b"k", bytes(32), b"i", 32))

    def test_length_limits(self):
        self.assertEqual(hkdf_sha256(b"k", b"s", b"i", 0), b"")
        self.assertEqual(len(hkdf_sha256(b"k", b"s", b"i", 255 * 32)), 255 * 32)
        with self.assertRaises(ValueError):
            hkdf_sha256(b"k", b"s", b"i", 255 * 32 + 1)


class TestHmacSha256(unittest.TestCase):
    def test_rfc4231_case_6_key_longer_than_block(self):
        mac = hmac_sha256(b"\xaa" * 131, b"Test Using Larger Than Block-Size Key - Hash Key First")
        self.assertEqual(mac.hex(), "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54")

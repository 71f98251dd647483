# AES-GCM (common/crypto/aesgcm.py) on both interpreters: GHASH's field multiply,
# the whole construction with recorded AES blocks (so the 32-bit WebAssembly
# port, which has no AES, still checks CTR, GHASH and the tag), the NIST
# vectors through a real AES, tamper detection and argument checks.

import unittest

from common.crypto.aesgcm import AesGcm, AuthError, gf_mul, h_tables, tags_equal
from tests.core.ecb_helper import NO_AES, make_ecb


def h(text):
    return bytes.fromhex(text)


# The GCM specification (McGrew and Viega, 2005, appendix B) test cases with
# 96-bit IVs, and from NIST CAVP gcmEncryptExtIV128/256.rsp the first
# [PTlen = 0][AADlen = 128] entry (AAD only):
# name: (key, iv, plaintext, aad, ciphertext, tag)
P64 = (
    "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72"
    "1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b391aafd255"
)
P60 = P64[:120]
AAD20 = "feedfacedeadbeeffeedfacedeadbeefabaddad2"
K128 = "feffe9928665731c6d6a8f9467308308"
IV = "cafebabefacedbaddecaf888"
C3 = (
    "42831ec2217774244b7221b784d0d49ce3aa212f2c02a4e035c17e2329aca12e"
    "21d514b25466931c7d8f6a5aac84aa051ba30b396a0aac973d58e091473f5985"
)
C15 = (
    "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa"
    "8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662898015ad"
)
VECTORS = {
    "tc1": ("00" * 16, "00" * 12, "", "", "", "58e2fccefa7e3061367f1d57a4e7455a"),
    "tc2": (
        "00" * 16,
        "00" * 12,
        "00" * 16,
        "",
        "0388dace60b6a392f328c2b971b2fe78",
        "ab6e47d42cec13bdf53a67b21257bddf",
    ),
    "tc3": (K128, IV, P64, "", C3, "4d5c2af327cd64a62cf35abd2ba6fab4"),
    "tc4": (K128, IV, P60, AAD20, C3[:120], "5bc94fbc3221a5db94fae95ae7121a47"),
    "tc13": ("00" * 32, "00" * 12, "", "", "", "530f8afbc74536b9a963b4f1c4cb738b"),
    "tc14": (
        "00" * 32,
        "00" * 12,
        "00" * 16,
        "",
        "cea7403d4d606b6e074ec5d3baf39d18",
        "d0d1c8a799996bf0265b98b5d48ab919",
    ),
    "tc15": (K128 * 2, IV, P64, "", C15, "b094dac5d93471bdec1a502270e3cc6c"),
    "tc16": (K128 * 2, IV, P60, AAD20, C15[:120], "76fc6ece0f4e1768cddf8853bb2d551b"),
    "cavp128_aad_only": (
        "77be63708971c4e240d1cb79e8d77feb",
        "e0e00f19fed7ba0136a797f3",
        "",
        "7a43ec1d9c0a5a78a0b16533a6213cab",
        "",
        "209fcc8d3675ed938e9c7166709dd946",
    ),
    "cavp256_aad_only": (
        "78dc4e0aaf52d935c3c01eea57428f00ca1fd475f5da86a49c8dd73d68c8e223",
        "d79cf22d504cc793c3fb6c8a",
        "",
        "b96baa8c1c75a671bfb2d08d06be5f36",
        "",
        "3e5d486aa2e30b22e040b85723a06e76",
    ),
}


def real_aead(key):
    ecb = make_ecb(key)
    return None if ecb is None else AesGcm(key, ecb)


class TestGfMul(unittest.TestCase):
    # GHASH steps (state ^ block) * H from nettle's testsuite/gcm-test.c
    # (test_ghash_internal): H = x^k picks out each reduction path.
    DATA = 0x0011223344556677_89ABCDEF01234567

    def check(self, h_value, expected, state=0):
        self.assertEqual(gf_mul(state ^ self.DATA, h_tables(h_value)), expected)

    def test_one_is_identity(self):
        self.check(1 << 127, self.DATA)

    def test_state_is_xored_in(self):
        self.check(1 << 127, 0x01326754CDFEAB98_7777777777777777, state=0x0123456789ABCDEF_FEDCBA9876543210)

    def test_times_x(self):
        self.check(1 << 126, 0xE1089119A22AB33B_C4D5E6F78091A2B3)

    def test_times_x4(self):
        self.check(1 << 123, 0x54E1122334455667_789ABCDEF0123456)

    def test_times_x63_x64(self):
        self.check(1 << 64, 0x1E0F1FF13FF0E00F_1C22446688AACCEF)
        self.check(1 << 63, 0xEE078FF89FF87007_8E11223344556677)

    def test_times_x127(self):
        self.check(1, 0x1503B3C4A3C44C3A_800F1FF13FF0E00F)

    def test_zero(self):
        self.check(0, 0)


class RecordedEcb:
    """AES blocks of GCM test case 4's key recorded from a real AES, so the
    construction is checked on ports without one. The values of E(K, 0)
    (= H) and E(K, Y0) are also listed in the GCM specification."""

    BLOCKS = {
        "00000000000000000000000000000000": "b83b533708bf535d0aa6e52980d53b78",
        "cafebabefacedbaddecaf88800000001": "3247184b3c4f69a44dbcd22887bbb418",
        "cafebabefacedbaddecaf88800000002": "9bb22ce7d9f372c1ee2b28722b25f206",
        "cafebabefacedbaddecaf88800000003": "650d887c3936533a1b8d4e1ea39d2b5c",
        "cafebabefacedbaddecaf88800000004": "3de91827c10e9a4f5240647ee5221f20",
        "cafebabefacedbaddecaf88800000005": "aac9e6ccc0074ac0873b9ba85d908bd0",
    }

    def encrypt(self, block):
        return h(self.BLOCKS[bytes(block).hex()])


class TestWithRecordedBlocks(unittest.TestCase):
    def setUp(self):
        self.aead = AesGcm(h(K128), RecordedEcb().encrypt)

    def test_tc3_and_tc4(self):
        for name in ("tc3", "tc4"):
            _, iv, pt, aad, ct, tag = VECTORS[name]
            self.assertEqual(self.aead.encrypt(h(iv), h(pt), h(aad)).hex(), ct + tag, name)
            self.assertEqual(self.aead.decrypt(h(iv), h(ct + tag), h(aad)).hex(), pt, name)


class TestNistVectors(unittest.TestCase):
    def check(self, name):
        key, iv, pt, aad, ct, tag = VECTORS[name]
        aead = real_aead(h(key))
        if aead is None:
            self.skipTest(NO_AES)
        self.assertEqual(aead.encrypt(h(iv), h(pt), h(aad)).hex(), ct + tag)
        self.assertEqual(aead.decrypt(h(iv), h(ct + tag), h(aad)).hex(), pt)

    def test_tc1_aes128_empty_plaintext_empty_aad(self):
        self.check("tc1")

    def test_tc2_aes128_one_block(self):
        self.check("tc2")

    def test_tc3_aes128_four_blocks(self):
        self.check("tc3")

    def test_tc4_aes128_partial_block_with_aad(self):
        self.check("tc4")

    def test_tc13_aes256_empty_plaintext_empty_aad(self):
        self.check("tc13")

    def test_tc14_aes256_one_block(self):
        self.check("tc14")

    def test_tc15_aes256_four_blocks(self):
        self.check("tc15")

    def test_tc16_aes256_partial_block_with_aad(self):
        self.check("tc16")

    def test_cavp_aes128_aad_only(self):
        self.check("cavp128_aad_only")

    def test_cavp_aes256_aad_only(self):
        self.check("cavp256_aad_only")


class TestTamper(unittest.TestCase):
    # Test case 4 (60-byte plaintext, 20-byte AAD) on the recorded blocks,
    # so that these run on every port.
    def setUp(self):
        _, iv, _, aad, ct, tag = VECTORS["tc4"]
        self.aead = AesGcm(h(K128), RecordedEcb().encrypt)
        self.iv, self.aad, self.sealed = h(iv), h(aad), h(ct + tag)

    def assert_rejected(self, data, aad=None, aead=None):
        with self.assertRaises(AuthError) as ctx:
            (aead or self.aead).decrypt(self.iv, data, self.aad if aad is None else aad)
        self.assertEqual(str(ctx.exception), "authentication failed: wrong key or tampered data")

    def flipped(self, data, index, bit):
        out = bytearray(data)
        out[index] ^= bit
        return bytes(out)

    def test_ciphertext_bit(self):
        self.assert_rejected(self.flipped(self.sealed, 0, 0x01))
        self.assert_rejected(self.flipped(self.sealed, 59, 0x80))  # in the partial block

    def test_tag_bit(self):
        self.assert_rejected(self.flipped(self.sealed, len(self.sealed) - 1, 0x80))
        self.assert_rejected(self.flipped(self.sealed, len(self.sealed) - 16, 0x01))

    def test_aad_byte(self):
        self.assert_rejected(self.sealed, aad=self.flipped(self.aad, 19, 0x01))
        self.assert_rejected(self.sealed, aad=self.aad[:-1])

    def test_wrong_key(self):
        other = h(K128[:-2] + "09")
        aead = real_aead(other)
        if aead is None:
            self.skipTest(NO_AES)
        self.assert_rejected(self.sealed, aead=aead)

    def test_truncated(self):
        self.assert_rejected(self.sealed[:-1])
        self.assert_rejected(self.sealed[:15])
        self.assert_rejected(b"")


class TestArguments(unittest.TestCase):
    def test_only_96_bit_nonces(self):
        aead = AesGcm(bytes(16), RecordedEcb().encrypt)
        for size in (0, 8, 11, 13, 16):
            with self.assertRaises(ValueError) as ctx:
                aead.encrypt(bytes(size), b"x", b"")
            self.assertNotIsInstance(ctx.exception, AuthError)
            with self.assertRaises(ValueError):
                aead.decrypt(bytes(size), bytes(17), b"")

    def test_key_lengths(self):
        for size in (0, 15, 20, 33):
            with self.assertRaises(ValueError):
                AesGcm(bytes(size), RecordedEcb().encrypt)

    def test_auth_error_is_a_value_error(self):
        # The store catches ValueError for every damaged record.
        self.assertTrue(issubclass(AuthError, ValueError))

    def test_tags_equal(self):
        self.assertTrue(tags_equal(b"\x01\x02", b"\x01\x02"))
        self.assertFalse(tags_equal(b"\x01\x02", b"\x01\x03"))
        self.assertFalse(tags_equal(b"\x80\x02", b"\x00\x02"))
        self.assertFalse(tags_equal(b"\x01", b"\x01\x02"))

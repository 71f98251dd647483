# The store bootstrap both shells share (common/store/storeboot.py, keytext.py): key text and
# the opener, on both interpreters.

import unittest

from common.crypto.aesgcm import AesGcm
from common.store.keytext import parse_keys
from common.store.store import StoreError
from common.store.storeboot import open_store
from tests.core.ecb_helper import NO_AES, make_ecb
from tests.core.memkv import MemKV

KEY = "ab" * 32
OTHER = "cd" * 16


class ParseKeysTest(unittest.TestCase):
    def test_one_key_or_lines_with_ids(self):
        self.assertEqual(parse_keys(KEY + "\n"), {1: bytes.fromhex(KEY)})
        self.assertEqual(
            parse_keys("# rotated\n1:" + KEY + "\n\n7:" + OTHER), {1: bytes.fromhex(KEY), 7: bytes.fromhex(OTHER)}
        )

    def test_errors_name_the_problem(self):
        for text, says in (
            ("", "empty"),
            ("# only a comment", "empty"),
            ("abcd", "2 bytes"),
            ("zz" * 32, "not hex"),
            (KEY + "\n" + OTHER, "need ids"),
            ("0:" + KEY, "1..255"),
            ("x:" + KEY, "1..255"),
            ("1:" + KEY + "\n1:" + OTHER, "given twice"),
        ):
            try:
                parse_keys(text)
            except StoreError as e:
                self.assertTrue(says in str(e), (text, str(e)))
            else:
                raise AssertionError("accepted %r" % text)


class OpenStoreTest(unittest.TestCase):
    def test_plain(self):
        store = open_store(MemKV())
        self.assertEqual((store.keys, store.key_id, store.boot), ({}, 0, 1))

    def test_the_newest_key_encrypts(self):
        if make_ecb(bytes(16)) is None:
            self.skipTest(NO_AES)

        def make_aead(key):
            return AesGcm(key, make_ecb(key))

        backend = MemKV()
        store = open_store(backend, parse_keys("1:" + KEY + "\n7:" + OTHER), make_aead)
        self.assertEqual((sorted(store.keys), store.key_id), ([1, 7], 7))
        store.close()
        # A wrong key is refused, and the backend closed.
        try:
            open_store(backend, parse_keys("7:" + "ee" * 16), make_aead)
        except StoreError:
            pass
        else:
            raise AssertionError("opened under the wrong key")


if __name__ == "__main__":
    unittest.main()

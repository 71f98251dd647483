# AES-GCM for the encrypted store on a board: cryptolib gives AES-ECB only,
# common/crypto/aesgcm.py adds CTR and GHASH. cpython_host/runtime/crypto.py is the same
# interface over the `cryptography` package; records written by one open
# with the other.

import cryptolib

from common.crypto.aesgcm import AesGcm

MODE_ECB = 1  # cryptolib's mode number


def make_aead(key):
    """An AesGcm for `key` (16, 24 or 32 bytes): encrypt(nonce, plaintext,
    aad) and decrypt(nonce, data, aad), AuthError on a bad tag."""
    # One cryptolib.aes object serves every block: in ECB mode it keeps no
    # chaining state between encrypt calls (checked on MicroPython 1.29).
    return AesGcm(key, cryptolib.aes(key, MODE_ECB).encrypt)

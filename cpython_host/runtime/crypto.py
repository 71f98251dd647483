"""AES-GCM for the encrypted store on CPython, backed by `cryptography`.

`make_aead(key)` returns an object with the interface of common.crypto.aesgcm.AesGcm
(what firmware/crypto.py gives the boards): `encrypt(nonce, plaintext, aad)`
-> ciphertext + 16-byte tag, `decrypt(nonce, data, aad)` -> plaintext or
`AuthError`, 12-byte nonces only (`cryptography` would take 8 to 128 bytes),
ValueError for a key that is not 16, 24 or 32 bytes. Records written by
either open with the other (tests/host/test_aesgcm_interop.py).
"""

from __future__ import annotations

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from common.crypto.aesgcm import AuthError, check_nonce


class HostAesGcm:
    def __init__(self, key: bytes) -> None:
        self._aead = AESGCM(key)

    def encrypt(self, nonce: bytes, plaintext: bytes, aad: bytes) -> bytes:
        check_nonce(nonce)
        return self._aead.encrypt(nonce, plaintext, aad)

    def decrypt(self, nonce: bytes, data: bytes, aad: bytes) -> bytes:
        check_nonce(nonce)
        try:
            return self._aead.decrypt(nonce, data, aad)
        except InvalidTag:
            raise AuthError() from None


def make_aead(key: bytes) -> HostAesGcm:
    return HostAesGcm(key)

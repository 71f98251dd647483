# HKDF-SHA256 (RFC 5869): derives a board's store key from the provisioned
# key with machine.unique_id() as salt, so a key file copied to another
# board does not open this board's store.

from common.crypto.hmac256 import hmac_sha256

HASH_LEN = 32


def hkdf_sha256(ikm, salt, info, length):
    """`length` bytes of output keying material (RFC 5869 section 2)."""
    if not 0 <= length <= 255 * HASH_LEN:
        raise ValueError("HKDF-SHA256 output is at most 8160 bytes")
    # Extract: an absent salt is HashLen zero bytes (section 2.2).
    prk = hmac_sha256(salt if salt else bytes(HASH_LEN), ikm)
    # Expand: T(i) = HMAC(PRK, T(i-1) | info | i).
    okm = b""
    block = b""
    counter = 1
    while len(okm) < length:
        block = hmac_sha256(prk, block + info + bytes([counter]))
        okm += block
        counter += 1
    return okm[:length]

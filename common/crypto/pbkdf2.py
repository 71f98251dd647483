# PBKDF2-HMAC (RFC 8018) with SHA-256 or SHA-512: the password file's hashes
# (common/broker/users.py).
#
# CPython's hashlib.pbkdf2_hmac (C, fast) where the port has it; else
# pbkdf2_pure over our HMAC pads (common/crypto/hmac256.py), which is what
# MicroPython runs. MicroPython's hashlib has no sha512 (the unix and wasm
# ports and the ESP32 and RP2040 builds offer md5, sha1, sha256):
# has_hash("sha512") is False there, and the password file loader refuses
# such lines with that reason.

import hashlib

from common.crypto.hmac256 import hmac_pads

# hash name -> (block size, digest size)
HASHES = {"sha256": (64, 32), "sha512": (128, 64)}


def has_hash(name):
    """Whether this port can compute PBKDF2 with `name` ("sha256", "sha512")."""
    return name in HASHES and hasattr(hashlib, name)


def pbkdf2_hmac(name, password, salt, iterations, dklen=0):
    """The derived key of `dklen` bytes (0: the hash's digest size)."""
    fast = getattr(hashlib, "pbkdf2_hmac", None)
    if fast is not None:
        return fast(name, password, salt, iterations, dklen or HASHES[name][1])
    return pbkdf2_pure(name, password, salt, iterations, dklen)


def pbkdf2_pure(name, password, salt, iterations, dklen=0):
    """PBKDF2 in Python (MicroPython; CPython's tests compare it with hashlib's)."""
    block, size = HASHES[name]
    if not dklen:
        dklen = size
    new_hash = getattr(hashlib, name)
    inner, outer = hmac_pads(new_hash, block, password)
    out = b""
    index = 1
    while len(out) < dklen:
        u = new_hash(outer + new_hash(inner + salt + index.to_bytes(4, "big")).digest()).digest()
        acc = bytearray(u)
        for _ in range(iterations - 1):
            u = new_hash(outer + new_hash(inner + u).digest()).digest()
            for i in range(size):
                acc[i] ^= u[i]
        out += bytes(acc)
        index += 1
    return out[:dklen]


def same_bytes(a, b):
    """Constant-time comparison: the time depends on the lengths only."""
    diff = len(a) ^ len(b)
    n = len(a) if len(a) < len(b) else len(b)
    for i in range(n):
        diff |= a[i] ^ b[i]
    return diff == 0

# HMAC-SHA-256 (RFC 2104) on hashlib.sha256 alone: MicroPython ports have no
# hmac module in C (the WebAssembly port's is pure Python), and SCRAM and
# HKDF both need it.

import hashlib

BLOCK_SIZE = 64


def hmac_sha256(key, msg):
    if len(key) > BLOCK_SIZE:
        key = hashlib.sha256(key).digest()
    key = key + b"\x00" * (BLOCK_SIZE - len(key))
    inner = bytes([b ^ 0x36 for b in key])
    outer = bytes([b ^ 0x5C for b in key])
    return hashlib.sha256(outer + hashlib.sha256(inner + msg).digest()).digest()

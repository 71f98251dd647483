# HMAC (RFC 2104) on hashlib alone: MicroPython ports have no hmac module in
# C (the WebAssembly port's is pure Python), and SCRAM, HKDF and PBKDF2 all
# need it. `hmac_with` takes the hash constructor (hashlib.sha256, .sha512);
# hmac_sha256 is the common case. PBKDF2 computes the padded keys once
# (hmac_pads) for its thousands of HMACs under one key.

import hashlib

BLOCK_SIZE = 64  # SHA-256's block; SHA-512's is 128


def hmac_pads(new_hash, block_size, key):
    """The (inner, outer) padded keys of HMAC with `key`."""
    if len(key) > block_size:
        key = new_hash(key).digest()
    key = key + b"\x00" * (block_size - len(key))
    return bytes([b ^ 0x36 for b in key]), bytes([b ^ 0x5C for b in key])


def hmac_with(new_hash, block_size, key, msg):
    inner, outer = hmac_pads(new_hash, block_size, key)
    return new_hash(outer + new_hash(inner + msg).digest()).digest()


def hmac_sha256(key, msg):
    return hmac_with(hashlib.sha256, BLOCK_SIZE, key, msg)

# AES-GCM (NIST SP 800-38D) over a caller-supplied AES block function, for
# the encrypted store on boards whose only AES is cryptolib's ECB mode.
#
# Theory of operation. The caller binds the key into `ecb_encrypt(block16)`;
# this module adds CTR mode and GHASH. Only 96-bit nonces: J0 = nonce || 1,
# the payload uses counters 2, 3, ... and the tag is E(J0) ^ GHASH.
#
# GHASH works on Python ints. A 16-byte block read big-endian is a 128-bit
# int whose bit i (counting from the least significant) is the coefficient
# of x^(127 - i): GCM's reflected bit order, in which multiplying by x is a
# right shift. Every big-int operation allocates on MicroPython (a 128-bit
# int is a heap object on every port), so the multiply keeps their number
# low: __init__ precomputes 16-entry tables of H multiples (Shoup's 4-bit
# tables), the multiply XORs one table entry per nibble into an unreduced
# 255-bit carry-less product, and reduces once per block instead of once per
# nibble (about 60 big-int operations per block instead of about 130).
#
# Ciphertext and plaintext are written into one preallocated bytearray; the
# tag is compared in constant time (every byte, no early exit).

import struct

NONCE_SIZE = 12
TAG_SIZE = 16

# p >> 127 and p & LOW127 split a 255-bit product into degrees 0..127 and
# 128..254.
LOW127 = (1 << 127) - 1

# GCM's limit on one message: 2^39 - 256 bits.
MAX_PLAINTEXT = (1 << 36) - 32


class AuthError(ValueError):
    """The tag does not match: wrong key, nonce or AAD, or tampered data."""

    def __init__(self, msg="authentication failed: wrong key or tampered data"):
        super().__init__(msg)


def h_tables(h):
    """(low, high): low[n] is the carry-less product n * h for a nibble n,
    high[n] the same shifted one nibble up, so a byte costs two look-ups."""
    low = [0] * 16
    for n in range(1, 16):
        # n * h = (n >> 1) * h * 2, plus h when n is odd (no reduction yet)
        low[n] = (low[n >> 1] << 1) ^ (h if n & 1 else 0)
    high = [v << 4 for v in low]
    return tuple(low), tuple(high)


def gf_mul(x, tables):
    """x * H in GF(2^128), with GCM's bit order; `tables` from h_tables(H)."""
    low, high = tables
    p = 0
    for b in x.to_bytes(16, "big"):
        p = (p << 8) ^ high[b >> 4] ^ low[b & 15]
    return _reduce(p)


def _reduce(p):
    # p: 255-bit carry-less product; bit j is the coefficient of x^(254 - j).
    # The top 128 bits (p >> 127) are degrees 0..127, already reduced. The
    # low 127 bits are q * x^128 with q of degree <= 126, and
    # x^128 = 1 + x + x^2 + x^7, so they fold into q + q*x + q*x^2 + q*x^7.
    lo = p & LOW127
    # q in the 128-bit order is lo << 1; multiplying by x^e is >> e.
    folded = (lo << 1) ^ lo ^ (lo >> 1) ^ (lo >> 6)
    # The bits those right shifts dropped are degrees 128..133 (q*x^2 drops
    # lo's bit 0, q*x^7 its bits 0..5): fold them once more, as a small int
    # whose bit k is the coefficient of x^(5 - k).
    over = lo & 0x3F
    over ^= (over & 1) << 5
    over = (over << 7) ^ (over << 6) ^ (over << 5) ^ over  # now x^(12 - k)
    return (p >> 127) ^ folded ^ (over << 115)


def check_nonce(nonce):
    if len(nonce) != NONCE_SIZE:
        raise ValueError("AES-GCM nonce must be 12 bytes")


def tags_equal(a, b):
    """Constant-time comparison of two equal-length byte strings."""
    if len(a) != len(b):
        return False
    diff = 0
    for i in range(len(a)):
        diff |= a[i] ^ b[i]
    return diff == 0


class AesGcm:
    """AES-GCM with 96-bit nonces and 16-byte tags.

    `ecb_encrypt(block16) -> bytes` encrypts one 16-byte block with the key
    (cryptolib.aes(key, 1).encrypt on MicroPython); `key` is only checked
    for its length here.
    """

    def __init__(self, key, ecb_encrypt):
        if len(key) not in (16, 24, 32):
            raise ValueError("AES key must be 16, 24 or 32 bytes")
        self._ecb = ecb_encrypt
        self._tables = h_tables(int.from_bytes(ecb_encrypt(bytes(16)), "big"))

    def encrypt(self, nonce, plaintext, aad):
        """ciphertext || 16-byte tag."""
        check_nonce(nonce)
        n = len(plaintext)
        if n > MAX_PLAINTEXT:
            raise ValueError("plaintext too long for one AES-GCM message")
        out = bytearray(n + TAG_SIZE)
        counter = bytearray(nonce + b"\x00\x00\x00\x01")
        y = self._ctr_ghash(counter, plaintext, n, out, self._ghash(0, aad), True)
        out[n:] = self._tag(counter, y, len(aad), n)
        return bytes(out)

    def decrypt(self, nonce, data, aad):
        """The plaintext, or AuthError if the tag does not match."""
        check_nonce(nonce)
        n = len(data) - TAG_SIZE
        if n < 0:
            raise AuthError()
        out = bytearray(n)
        counter = bytearray(nonce + b"\x00\x00\x00\x01")
        y = self._ctr_ghash(counter, data, n, out, self._ghash(0, aad), False)
        if not tags_equal(self._tag(counter, y, len(aad), n), data[n:]):
            raise AuthError()
        return bytes(out)

    def _ghash(self, y, data):
        # Feed data into the GHASH state y, the last block zero-padded.
        tables = self._tables
        n = len(data)
        for pos in range(0, n, 16):
            take = min(16, n - pos)
            block = int.from_bytes(data[pos : pos + take], "big")
            y = gf_mul(y ^ (block << (8 * (16 - take))), tables)
        return y

    def _ctr_ghash(self, counter, src, n, out, y, encrypting):
        # CTR over src[:n] into out, and GHASH over the ciphertext side, in
        # one pass so each ciphertext block is read as an int only once.
        ecb = self._ecb
        tables = self._tables
        for pos in range(0, n, 16):
            take = min(16, n - pos)
            pad = 8 * (16 - take)
            struct.pack_into(">I", counter, 12, 2 + (pos >> 4))
            stream = int.from_bytes(ecb(counter), "big") >> pad
            block = int.from_bytes(src[pos : pos + take], "big")
            result = stream ^ block
            out[pos : pos + take] = result.to_bytes(take, "big")
            cipher = result if encrypting else block
            y = gf_mul(y ^ (cipher << pad), tables)
        return y

    def _tag(self, counter, y, aad_len, text_len):
        lengths = ((8 * aad_len) << 64) | (8 * text_len)
        y = gf_mul(y ^ lengths, self._tables)
        struct.pack_into(">I", counter, 12, 1)  # back to J0
        return (int.from_bytes(self._ecb(counter), "big") ^ y).to_bytes(16, "big")

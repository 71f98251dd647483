# On-medium record framing shared by the two storage backends
# (common/store/kvlog.py on a raw flash partition, common/store/filelog.py in a file).
#
# Theory of operation: a store is a log of records, each one self-checking:
#
#   offset  size   field
#   0       1      magic 0xA5
#   1       1      flags: bit 0 = tombstone (delete); bits 1..7 reserved, 0
#   2       2      key length K, little-endian
#   4       4      value length V, little-endian (0 for a tombstone)
#   8       K      key
#   8+K     V      value
#   8+K+V   4      CRC-32 (IEEE, binascii.crc32) of bytes 0 .. 8+K+V-1, LE
#
# A record is valid only if its magic and flags are right and the CRC
# matches, so a record that a power cut tore (a prefix written, the rest
# erased 0xFF, zeros, or old bits) is recognised as such: `decode` returns
# INVALID, never a value. The magic is neither 0xFF (erased NOR flash) nor
# 0x00 (zero fill), so an erased or zeroed area never starts a record.
#
# Pure functions over buffers and offsets (sans-I/O): the backends read and
# write the medium, this module only frames and checks bytes.

import struct

from common.compat import const, crc32

MAGIC = const(0xA5)
_FLAG_TOMBSTONE = const(0x01)
_FLAGS_KNOWN = const(0x01)
HEADER_SIZE = const(8)
CRC_SIZE = const(4)
OVERHEAD = const(12)  # HEADER_SIZE + CRC_SIZE
_MAX_KEY = const(0xFFFF)

# `decode` results that are not a record.
INVALID = const(-1)  # torn, damaged, truncated or not a record at all
ERASED = const(-2)  # the magic byte is 0xFF: erased flash, end of the log

HEADER_FORMAT = "<BBHI"
CRC_FORMAT = "<I"


class StoreFull(OSError):
    """The backend cannot fit a record even after compaction.

    A subclass of OSError (errno 28, ENOSPC) so that a caller that already
    handles "disk full" handles it too; catch StoreFull first to tell it
    from other I/O errors. Nothing was written: the previous value of the
    key is still there.
    """

    def __init__(self, msg="store full"):
        super().__init__(28, msg)


# -- framing ------------------------------------------------------------------


def record_size(klen, vlen):
    """Bytes one record takes on the medium."""
    return OVERHEAD + klen + vlen


def encode_into(buf, offset, key, value, tombstone=False):
    """Write one record into `buf` at `offset`; return the offset after it.

    `buf` must be a bytearray (or writable memoryview) with room for
    record_size(len(key), len(value)) bytes from `offset`.
    """
    klen = len(key)
    if klen > _MAX_KEY:
        raise ValueError("key too long")
    if tombstone:
        value = b""
    vlen = len(value)
    struct.pack_into(HEADER_FORMAT, buf, offset, MAGIC, _FLAG_TOMBSTONE if tombstone else 0, klen, vlen)
    p = offset + HEADER_SIZE
    buf[p : p + klen] = key
    p += klen
    buf[p : p + vlen] = value
    p += vlen
    mv = memoryview(buf)
    struct.pack_into(CRC_FORMAT, buf, p, crc32(mv[offset:p]))
    return p + CRC_SIZE


def encode(key, value, tombstone=False):
    """One record as a new bytearray (for callers without a buffer of their own)."""
    buf = bytearray(record_size(len(key), 0 if tombstone else len(value)))
    encode_into(buf, 0, key, value, tombstone)
    return buf


def decode_header(buf, offset):
    """(flags, klen, vlen) from the 8 header bytes at `offset`, ERASED if the
    magic byte is 0xFF, INVALID if the header is not a record header.

    The CRC is not checked here (the caller may not hold the whole record).
    """
    magic, flags, klen, vlen = struct.unpack_from(HEADER_FORMAT, buf, offset)
    if magic != MAGIC:
        return ERASED if magic == 0xFF else INVALID
    if flags & ~_FLAGS_KNOWN & 0xFF:
        return INVALID
    if flags & _FLAG_TOMBSTONE and vlen:
        return INVALID
    return flags, klen, vlen


def decode(buf, offset, end):
    """Check the record at buf[offset:end].

    Returns (flags, key_start, key_end, value_end, next_offset) for a valid
    record (the value is buf[key_end:value_end]), ERASED when the byte at
    `offset` is 0xFF, or INVALID for anything else: a torn, damaged or
    truncated record (including fewer than a header's bytes left).
    """
    if offset >= end:
        return INVALID
    if end - offset < OVERHEAD:
        return ERASED if buf[offset] == 0xFF else INVALID
    head = decode_header(buf, offset)
    if head == ERASED or head == INVALID:
        return head
    flags, klen, vlen = head
    key_start = offset + HEADER_SIZE
    key_end = key_start + klen
    value_end = key_end + vlen
    if value_end + CRC_SIZE > end:
        return INVALID
    stored = struct.unpack_from(CRC_FORMAT, buf, value_end)[0]
    if crc32(memoryview(buf)[offset:value_end]) != stored:
        return INVALID
    return flags, key_start, key_end, value_end, value_end + CRC_SIZE


def is_tombstone(flags):
    return flags & _FLAG_TOMBSTONE != 0


# -- damage reports -------------------------------------------------------------


def damaged_key(buf, total):
    """The key of a damaged record that spanned `total` bytes, from its first
    bytes in `buf`, as far as its header can be believed; None if unreadable.

    A key length that overruns the record is the damaged field: the key
    length is then what the value length leaves.
    """
    if len(buf) < HEADER_SIZE:
        return None
    klen, vlen = struct.unpack_from("<HI", buf, 2)
    if OVERHEAD + klen > total:
        klen = total - OVERHEAD - vlen
    if klen <= 0 or OVERHEAD + klen > total:
        return None
    return bytes(buf[HEADER_SIZE : HEADER_SIZE + klen])


def damage_note(key, start, end, where, kept):
    """(log level, text) for a damaged record the scan skipped."""
    return (
        30,
        "store: damaged record (key %r, as far as readable) at bytes %d..%d of %s skipped and lost; its bytes are %s"
        % (key, start, end, where, kept),
    )

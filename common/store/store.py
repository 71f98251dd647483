# The record layer of the persistent store: typed values in, sealed bytes out.
#
# Theory of operation. The persistence layer (persist.py) saves plain values
# (None, bool, int, str, bytes and lists of them) under a namespace byte and
# a key. This module packs them, seals them and hands the bytes to a backend
# (filelog.py on files, kvlog.py on raw flash) through its small interface:
# get, put, delete, keys(prefix), sync, close, len.
#
# Every record value starts with its schema version and flags:
#
#   plain      [schema u8][flags=0][packed body]
#   encrypted  [schema u8][flags=1][key id u8][nonce 12][AES-GCM(body) + tag 16]
#
# The backend frames each record with a CRC, so a torn or flipped record is
# never returned. When a key is configured every record is encrypted and
# authenticated with AES-GCM; the associated data is the record's header and
# its full key, so a record cannot be moved under another key or namespace.
# A nonce is the store's boot counter (persisted and synced before the first
# encryption of a boot) followed by a 64-bit record counter, so it never
# repeats under one key.
#
# The meta record (key b"V", never encrypted) holds the magic, the schema
# version, the boot counter and whether the store is encrypted (and under
# which key id). A key-check record (b"K") lets open() tell a wrong key from
# a tampered record. A store written by a newer schema, or encrypted when no
# key is configured (or the other way round), is refused with a StoreError
# that says what to do.

import struct

from common.compat import const
from common.mqtt.codec import write_varint

SCHEMA = 2

FLAG_ENCRYPTED = 1
_PLAIN = bytes([SCHEMA, 0])  # a plain record's schema and flags

# (The meta and key-check records, the schema migrations and the restore
# progress step are store_open.py's: only a start-up reads them.)


class StoreError(Exception):
    """The store cannot be used as it is; the message says what to do."""


# ------------------------------------------------------------------ packing

TAG_NONE = const(0)
TAG_FALSE = const(1)
TAG_TRUE = const(2)
TAG_INT = const(3)
TAG_STR = const(4)
TAG_BYTES = const(5)
TAG_LIST = const(6)


def _pack_into(out, value):
    if value is None:
        out.append(TAG_NONE)
    elif value is True:
        out.append(TAG_TRUE)
    elif value is False:
        out.append(TAG_FALSE)
    elif isinstance(value, int):
        out.append(TAG_INT)
        write_varint(out, value * 2 if value >= 0 else -value * 2 - 1)  # zigzag
    elif isinstance(value, str):
        data = value.encode()
        out.append(TAG_STR)
        write_varint(out, len(data))
        out.extend(data)
    elif isinstance(value, (bytes, bytearray, memoryview)):
        out.append(TAG_BYTES)
        write_varint(out, len(value))
        out.extend(value)
    elif isinstance(value, (list, tuple)):
        out.append(TAG_LIST)
        write_varint(out, len(value))
        for item in value:
            # The items of a record are mostly None, a flag, an int (a QoS,
            # a state, an id), a short str or bytes (a topic, a
            # payload): packed here without a call (the per-message path).
            if item is None:
                out.append(TAG_NONE)
            elif item is True:
                out.append(TAG_TRUE)
            elif item is False:
                out.append(TAG_FALSE)
            else:
                t = type(item)
                if t is int and item >= 0:
                    out.append(TAG_INT)
                    z = item * 2  # zigzag
                    if z < 128:
                        out.append(z)  # (a one-byte varint)
                    else:
                        write_varint(out, z)
                elif t is bytes or t is str:
                    if t is str:
                        out.append(TAG_STR)
                        item = item.encode()
                    else:
                        out.append(TAG_BYTES)
                    n = len(item)
                    if n < 128:
                        out.append(n)  # (a one-byte varint)
                    else:
                        write_varint(out, n)
                    out.extend(item)
                else:
                    _pack_into(out, item)
    else:
        raise TypeError("cannot store %r" % (value,))


def pack(value):
    """Bytes for a plain value (None, bool, int, str, bytes, list/tuple)."""
    out = bytearray()
    _pack_into(out, value)
    return bytes(out)


# ------------------------------------------------------------------- store


def u64be(n):
    """`n` as 8 bytes, big-endian (keys sort in numeric order)."""
    return struct.pack(">II", (n >> 32) & 0xFFFFFFFF, n & 0xFFFFFFFF)  # (every port packs 32 bits)


class Store:
    """Sealed, versioned records over a backend.

    `keys` maps key ids (0..255) to AEAD objects with encrypt(nonce, data,
    aad) / decrypt(nonce, data, aad) (common/crypto/aesgcm.py on MicroPython,
    cpython_host/runtime/crypto.py on CPython); `key_id` names the one new records
    use. With no keys the store is plain (CRC-checked by the backend only).
    `log` is an optional callable(level, text). `monitor`, optional (set by
    storeboot.open_store), hears of the restore's progress:
    monitor.progress("restore", records read, records in the store) every
    store_open.PROGRESS_STEP records and at the end (the shell logs it and tells
    systemd).
    """

    def __init__(self, backend, keys=None, key_id=0, log=None):
        self.backend = backend
        self.keys = keys or {}
        self.key_id = key_id
        self.log = log
        self.boot = 0
        self.counter = 0
        self.dirty = False
        self.skipped = 0  # records that failed their check at restore
        self.errors = 0  # writes the backend refused (full, I/O error)
        self.syncs = 0  # sync() calls that had changes to make durable
        self.monitor = None
        self.read = 0  # records store_open.read_items has read (the restore's progress)
        self.total = 0  # of how many: every record of the store, when the restore began
        if self.keys and key_id not in self.keys:
            raise StoreError("key id %d is not among the configured keys" % key_id)

    # (Opening it and reading its records back are store_open.py's, at
    # start-up only: open_records, read_items.)

    # -- records

    def put(self, ns, key, value):
        """Store `value` (see pack) under namespace byte-string `ns` + `key`."""
        full = ns + key
        if not self.keys:
            out = bytearray(_PLAIN)  # the header, then the body packed after it: no copy
            _pack_into(out, value)
        else:
            body = pack(value)
            self.counter += 1
            c = self.counter
            b = self.boot
            header = bytes([SCHEMA, FLAG_ENCRYPTED, self.key_id])
            nonce = u64be(b)[4:] + u64be(c)
            sealed = self.keys[self.key_id].encrypt(nonce, body, header + full)
            out = header + nonce + sealed
        # A full disk or flash, an I/O error or a record too big for a flash
        # block must not take the broker down mid-packet: the change is not
        # stored, the error is counted and logged (the first and every
        # 1000th), and the broker carries on serving from memory.
        try:
            self.backend.put(full, out)
        except (OSError, ValueError) as err:
            self._failed(err)
        self.dirty = True

    def delete(self, ns, key):
        try:  # (as put)
            self.backend.delete(ns + key)
        except (OSError, ValueError) as err:
            self._failed(err)
        self.dirty = True

    def _failed(self, err):
        self.errors += 1
        if self.log is not None and (self.errors == 1 or self.errors % 1000 == 0):
            self.log(
                40,
                "store: write failed (%d so far): %r; what is not stored is lost on a restart. "
                "Free space or fix the disk." % (self.errors, err),
            )

    def skip(self, full, why):
        """Count and log a record that cannot be used (`full`: namespace + key)."""
        self.skipped += 1
        if self.log is not None:
            self.log(30, "store: skipped record %r: %s; it is lost" % (full, why))

    def lost(self):
        """Records lost so far: damaged in the backend or unusable here."""
        return self.skipped + self.backend.skipped

    def sync(self):
        """Make every change so far durable (the backend's fsync)."""
        if self.dirty:
            self.dirty = False
            self.syncs += 1
            try:
                self.backend.sync()
            except OSError as err:
                self._failed(err)

    def close(self):
        self.sync()
        self.backend.close()

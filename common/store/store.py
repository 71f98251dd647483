# The record layer of the persistent store: typed values in, sealed bytes out.
#
# Theory of operation. The persistence layer (persist.py) saves plain values
# (None, bool, int, str, bytes and lists of them) under a namespace byte and
# a key. This module packs them, seals them and hands the bytes to a backend
# (filelog.py on files, kvlog.py on raw flash) through its small interface:
# get, put, delete, items(prefix), sync, close.
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

SCHEMA = 1
MAGIC = b"SKNS"
META_KEY = b"V"
CHECK_KEY = b"K"
CHECK_TEXT = "siskin key check"

FLAG_ENCRYPTED = 1
_PLAIN = bytes([SCHEMA, 0])  # a plain record's schema and flags
_NONCE_LEN = const(12)
_TAG_LEN = const(16)

# Schema migrations: MIGRATIONS[v](full_key, value) returns the value of a
# version-v record as version v + 1 has it. A record is upgraded step by step
# when it is read (and written back in the current schema whenever the broker
# next changes it), so an older store opens as long as every step from its
# version exists; otherwise open() refuses it with what to do. None exist yet:
# schema 1 is the first.
MIGRATIONS = {}


class StoreError(Exception):
    """The store cannot be used as it is; the message says what to do."""


# ------------------------------------------------------------------ packing

_NONE = const(0)
_FALSE = const(1)
_TRUE = const(2)
_INT = const(3)
_STR = const(4)
_BYTES = const(5)
_LIST = const(6)


def _put_varint(out, n):
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _pack_into(out, value):
    if value is None:
        out.append(_NONE)
    elif value is True:
        out.append(_TRUE)
    elif value is False:
        out.append(_FALSE)
    elif isinstance(value, int):
        out.append(_INT)
        _put_varint(out, value * 2 if value >= 0 else -value * 2 - 1)  # zigzag
    elif isinstance(value, str):
        data = value.encode()
        out.append(_STR)
        _put_varint(out, len(data))
        out.extend(data)
    elif isinstance(value, (bytes, bytearray, memoryview)):
        out.append(_BYTES)
        _put_varint(out, len(value))
        out.extend(value)
    elif isinstance(value, (list, tuple)):
        out.append(_LIST)
        _put_varint(out, len(value))
        for item in value:
            # Most items of a record are None or a small int (a QoS, a state,
            # a flag): one byte or two, packed here without a call.
            if item is None:
                out.append(_NONE)
            elif type(item) is int and 0 <= item < 64:
                out.append(_INT)
                out.append(item * 2)  # zigzag, one varint byte
            else:
                _pack_into(out, item)
    else:
        raise TypeError("cannot store %r" % (value,))


def pack(value):
    """Bytes for a plain value (None, bool, int, str, bytes, list/tuple)."""
    out = bytearray()
    _pack_into(out, value)
    return bytes(out)


def _get_varint(buf, i):
    n = 0
    shift = 0
    while True:
        b = buf[i]
        i += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return n, i
        shift += 7
        if shift > 70:
            raise ValueError("varint too long")


def _unpack_at(buf, i, depth):
    tag = buf[i]
    i += 1
    if tag == _NONE:
        return None, i
    if tag == _TRUE:
        return True, i
    if tag == _FALSE:
        return False, i
    if tag == _INT:
        z, i = _get_varint(buf, i)
        return (z >> 1) if not z & 1 else -((z + 1) >> 1), i
    if tag == _STR or tag == _BYTES:
        n, i = _get_varint(buf, i)
        if i + n > len(buf):
            raise ValueError("truncated value")
        data = bytes(buf[i : i + n])
        return (data.decode() if tag == _STR else data), i + n
    if tag == _LIST:
        if depth > 8:
            raise ValueError("nested too deep")
        n, i = _get_varint(buf, i)
        items = []
        for _ in range(n):
            item, i = _unpack_at(buf, i, depth + 1)
            items.append(item)
        return items, i
    raise ValueError("unknown value tag %d" % tag)


def unpack(buf):
    """The value packed in `buf`; ValueError (or IndexError) if damaged."""
    value, i = _unpack_at(buf, 0, 0)
    if i != len(buf):
        raise ValueError("trailing bytes")
    return value


# ------------------------------------------------------------------- store


def u64be(n):
    """`n` as 8 bytes, big-endian (keys sort in numeric order)."""
    return struct.pack(">II", (n >> 32) & 0xFFFFFFFF, n & 0xFFFFFFFF)  # (every port packs 32 bits)


def _can_migrate(schema):
    if schema > SCHEMA or schema < 1:
        return False
    for v in range(schema, SCHEMA):
        if v not in MIGRATIONS:
            return False
    return True


def _migrate(full, schema, value):
    for v in range(schema, SCHEMA):
        value = MIGRATIONS[v](full, value)
    return value


def _u32(data, i):
    return (data[i] << 24) | (data[i + 1] << 16) | (data[i + 2] << 8) | data[i + 3]


class Store:
    """Sealed, versioned records over a backend.

    `keys` maps key ids (0..255) to AEAD objects with encrypt(nonce, data,
    aad) / decrypt(nonce, data, aad) (common/crypto/aesgcm.py on MicroPython,
    cpython_host/crypto.py on CPython); `key_id` names the one new records
    use. With no keys the store is plain (CRC-checked by the backend only).
    `log` is an optional callable(level, text).
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
        if self.keys and key_id not in self.keys:
            raise StoreError("key id %d is not among the configured keys" % key_id)

    # -- opening

    def open(self, wipe=False):
        """Check the meta record, bump the boot counter; StoreError if unusable."""
        backend = self.backend
        # What the backend found damaged when it opened (it has no log of its own).
        if self.log is not None:
            for level, text in backend.notes:
                self.log(level, text)
        backend.notes = []  # said once; a board's heap need not keep the text
        if wipe:
            for key, _value in backend.items(b""):
                backend.delete(key)
        meta = backend.get(META_KEY)
        encrypted = bool(self.keys)
        if meta is None:
            if backend.items(b""):
                raise StoreError(
                    "the store has records but no meta record: it is not a Siskin store or it is damaged; "
                    "move it aside or start with --wipe-store to discard it"
                )
            self.boot = 0
        else:
            self._check_meta(meta, encrypted)
        self.boot = (self.boot + 1) & 0xFFFFFFFF
        if self.boot == 0:
            raise StoreError("the boot counter wrapped: rotate the key (new key id) and start with --wipe-store")
        backend.put(META_KEY, self._meta())
        backend.sync()  # the new boot counter is durable before any nonce uses it
        if encrypted:
            if meta is None or self._check_key() != self.key_id:
                self.put(CHECK_KEY, b"", CHECK_TEXT)  # new store, or a new current key
            self.sync()

    def _check_meta(self, meta, encrypted):
        if len(meta) < 11 or meta[:4] != MAGIC:
            raise StoreError("the store's meta record is not Siskin's: start with --wipe-store to discard the store")
        schema = meta[4]
        if schema > SCHEMA:
            raise StoreError(
                "the store was written by a newer Siskin (schema %d, this one reads up to %d): "
                "upgrade Siskin, or start with --wipe-store to discard the stored sessions and messages"
                % (schema, SCHEMA)
            )
        if not _can_migrate(schema):
            raise StoreError(
                "the store has schema %d, which this Siskin cannot migrate to %d: "
                "start with --wipe-store to discard it" % (schema, SCHEMA)
            )
        self.boot = _u32(meta, 5)
        was_encrypted = meta[9] == 1
        if was_encrypted and not encrypted:
            raise StoreError(
                "the store is encrypted (key id %d) but no key is configured: give the key "
                "(--store-key-file or SISKIN_STORE_KEY), or start with --wipe-store to discard it" % meta[10]
            )
        if encrypted and not was_encrypted:
            raise StoreError(
                "a key is configured but the store is not encrypted: start with --wipe-store to "
                "discard it and start encrypted, or run without the key"
            )

    def _check_key(self):
        """The key id of the key-check record, after checking it authenticates."""
        value = self.backend.get(CHECK_KEY)
        if value is None or len(value) < 3 + _NONCE_LEN + _TAG_LEN:
            raise StoreError("the store's key-check record is missing: start with --wipe-store to discard the store")
        kid = value[2]
        if kid not in self.keys:
            raise StoreError("the store is encrypted with key id %d, which is not configured: add that key" % kid)
        try:
            text = self._open_record(CHECK_KEY, value)
        except ValueError:
            raise StoreError(
                "wrong key: the store's key-check record does not authenticate under key id %d; "
                "give the key the store was written with" % kid
            )
        if text != CHECK_TEXT:
            raise StoreError("the store's key-check record is damaged: start with --wipe-store to discard the store")
        return kid

    def _meta(self):
        return MAGIC + bytes([SCHEMA]) + u64be(self.boot)[4:] + bytes([1 if self.keys else 0, self.key_id])

    # -- records

    def put(self, ns, key, value):
        """Store `value` (see pack) under namespace byte-string `ns` + `key`."""
        full = ns + key
        if not self.keys:
            out = bytearray(_PLAIN)  # the header, then the body packed after it: no copy
            _pack_into(out, value)
            self._write(self.backend.put, full, out)
        else:
            body = pack(value)
            self.counter += 1
            c = self.counter
            b = self.boot
            header = bytes([SCHEMA, FLAG_ENCRYPTED, self.key_id])
            nonce = u64be(b)[4:] + u64be(c)
            sealed = self.keys[self.key_id].encrypt(nonce, body, header + full)
            self._write(self.backend.put, full, header + nonce + sealed)
        self.dirty = True

    def delete(self, ns, key):
        self._write(self.backend.delete, ns + key)
        self.dirty = True

    def _write(self, op, *args):
        # A full disk or flash, an I/O error or a record too big for a flash
        # block must not take the broker down mid-packet: the change is not
        # stored, the error is counted and logged (the first and every
        # 1000th), and the broker carries on serving from memory.
        try:
            op(*args)
        except (OSError, ValueError) as err:
            self._failed(err)

    def _failed(self, err):
        self.errors += 1
        if self.log is not None and (self.errors == 1 or self.errors % 1000 == 0):
            self.log(
                40,
                "store: write failed (%d so far): %r; what is not stored is lost on a restart. "
                "Free space or fix the disk." % (self.errors, err),
            )

    def items(self, ns):
        """[(key without ns, value)] of a namespace; damaged records are skipped and counted."""
        out = []
        n = len(ns)
        for full, raw in self.backend.items(ns):
            try:
                value = self._open_record(full, raw)
            except (ValueError, IndexError, KeyError) as err:
                self.skip(full, err)
                continue
            out.append((full[n:], value))
        return out

    def skip(self, full, why):
        """Count and log a record that cannot be used (`full`: namespace + key)."""
        self.skipped += 1
        if self.log is not None:
            self.log(30, "store: skipped record %r: %s; it is lost" % (full, why))

    def lost(self):
        """Records lost so far: damaged in the backend or unusable here."""
        return self.skipped + self.backend.skipped

    def _open_record(self, full, raw):
        if len(raw) < 2:
            raise ValueError("record too short")
        schema = raw[0]
        if not _can_migrate(schema):
            raise ValueError("record schema %d, this Siskin reads %d" % (schema, SCHEMA))
        if raw[1] & FLAG_ENCRYPTED:
            if len(raw) < 3 + _NONCE_LEN + _TAG_LEN:
                raise ValueError("encrypted record too short")
            aead = self.keys.get(raw[2])
            if aead is None:
                raise ValueError("record under key id %d, which is not configured" % raw[2])
            nonce = bytes(raw[3 : 3 + _NONCE_LEN])
            try:
                body = aead.decrypt(nonce, bytes(raw[3 + _NONCE_LEN :]), bytes(raw[:3]) + full)
            except ValueError:
                raise ValueError("authentication failed: tampered, moved or under another key")
            return _migrate(full, schema, unpack(body))
        if self.keys:
            raise ValueError("plain record in an encrypted store: tampered")
        return _migrate(full, schema, unpack(memoryview(raw)[2:]))

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

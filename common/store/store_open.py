# The reading side of the Store (store.py): open_records() checks the meta
# and key-check records and bumps the boot counter (storeboot.open_store);
# read_items() opens the records of a namespace (authenticated, unpacked,
# migrated) for the restore. Both run only at start-up: a board unloads this
# module after it (firmware/startup_only.py), so their code and
# their words do not stay in the heap. It uses the Store's public side only;
# store.py's theory of operation describes the records.

from common.compat import const
from common.mqtt.codec import read_varint
from common.store import store as S

_NONCE_LEN = const(12)
_TAG_LEN = const(16)

MAGIC = b"SKNS"  # the meta record's first bytes
META_KEY = b"V"
CHECK_KEY = b"K"
CHECK_TEXT = "siskin key check"
PROGRESS_STEP = 4096  # records between two progress reports of the restore

# Schema migrations: MIGRATIONS[v](full_key, value) returns the value of a
# version-v record as version v + 1 has it. A record is upgraded step by step
# when it is read (and written back in the current schema whenever the broker
# next changes it), so an older store opens as long as every step from its
# version exists; otherwise open() refuses it with what to do.
#   1 -> 2: nothing changes in a record. Schema 2 adds a delivery record
#   that holds its message inline (persist.py), which a Siskin of schema 1
#   would read as a delivery of a missing message and drop: the version
#   makes it refuse such a store instead.
MIGRATIONS = {1: lambda full, value: value}


def meta_record(store):
    """The meta record's value: magic, schema, boot counter, key state."""
    return MAGIC + bytes([S.SCHEMA]) + S.u64be(store.boot)[4:] + bytes([1 if store.keys else 0, store.key_id])


def open_records(store, wipe=False):
    """Check the meta record, bump the boot counter; StoreError if unusable."""
    backend = store.backend
    # What the backend found damaged when it opened (it has no log of its own).
    if store.log is not None:
        for level, text in backend.notes:
            store.log(level, text)
    backend.notes = []  # said once; a board's heap need not keep the text
    if wipe:
        for key in backend.keys(b""):
            backend.delete(key)
    meta = backend.get(META_KEY)
    encrypted = bool(store.keys)
    if meta is None:
        if len(backend):
            raise S.StoreError(
                "the store has records but no meta record: it is not a Siskin store or it is damaged; "
                "move it aside or start with --wipe-store to discard it"
            )
        store.boot = 0
    else:
        _check_meta(store, meta, encrypted)
    store.boot = (store.boot + 1) & 0xFFFFFFFF
    if store.boot == 0:
        raise S.StoreError("the boot counter wrapped: rotate the key (new key id) and start with --wipe-store")
    backend.put(META_KEY, meta_record(store))
    backend.sync()  # the new boot counter is durable before any nonce uses it
    if encrypted:
        if meta is None or _check_key(store) != store.key_id:
            store.put(CHECK_KEY, b"", CHECK_TEXT)  # new store, or a new current key
        store.sync()


def _check_meta(store, meta, encrypted):
    if len(meta) < 11 or meta[:4] != MAGIC:
        raise S.StoreError("the store's meta record is not Siskin's: start with --wipe-store to discard the store")
    schema = meta[4]
    if schema > S.SCHEMA:
        raise S.StoreError(
            "the store was written by a newer Siskin (schema %d, this one reads up to %d): "
            "upgrade Siskin, or start with --wipe-store to discard the stored sessions and messages"
            % (schema, S.SCHEMA)
        )
    if not _can_migrate(schema):
        raise S.StoreError(
            "the store has schema %d, which this Siskin cannot migrate to %d: "
            "start with --wipe-store to discard it" % (schema, S.SCHEMA)
        )
    store.boot = _u32(meta, 5)
    was_encrypted = meta[9] == 1
    if was_encrypted and not encrypted:
        raise S.StoreError(
            "the store is encrypted (key id %d) but no key is configured: give the key "
            "(--store-key-file or SISKIN_STORE_KEY), or start with --wipe-store to discard it" % meta[10]
        )
    if encrypted and not was_encrypted:
        raise S.StoreError(
            "a key is configured but the store is not encrypted: start with --wipe-store to "
            "discard it and start encrypted, or run without the key"
        )


def _check_key(store):
    """The key id of the key-check record, after checking it authenticates."""
    value = store.backend.get(CHECK_KEY)
    if value is None or len(value) < 3 + _NONCE_LEN + _TAG_LEN:
        raise S.StoreError("the store's key-check record is missing: start with --wipe-store to discard the store")
    kid = value[2]
    if kid not in store.keys:
        raise S.StoreError("the store is encrypted with key id %d, which is not configured: add that key" % kid)
    try:
        text = _open_record(store, CHECK_KEY, value)
    except ValueError:
        raise S.StoreError(
            "wrong key: the store's key-check record does not authenticate under key id %d; "
            "give the key the store was written with" % kid
        )
    if text != CHECK_TEXT:
        raise S.StoreError("the store's key-check record is damaged: start with --wipe-store to discard the store")
    return kid


def read_items(store, ns, by_key=False):
    """Yield (key without ns, value) of a namespace; damaged records are skipped and
    counted. Each record is read and unpacked when the loop asks for it: only
    the keys are listed ahead (the backend's index already holds them)."""
    backend = store.backend
    keys = backend.keys(ns)
    if by_key:
        keys.sort()
    n = len(ns)
    monitor = store.monitor
    for full in keys:
        raw = backend.get(full)  # None: deleted meanwhile, or damaged (the backend counted it)
        store.read += 1
        if monitor is not None and store.read % PROGRESS_STEP == 0:
            monitor.progress("restore", store.read, store.total)
        if raw is None:
            continue
        try:
            value = _open_record(store, full, raw)
        except (ValueError, IndexError, KeyError) as err:
            store.skip(full, err)
            continue
        yield full[n:], value


def _open_record(store, full, raw):
    if len(raw) < 2:
        raise ValueError("record too short")
    schema = raw[0]
    if not _can_migrate(schema):
        raise ValueError("record schema %d, this Siskin reads %d" % (schema, S.SCHEMA))
    if raw[1] & S.FLAG_ENCRYPTED:
        if len(raw) < 3 + _NONCE_LEN + _TAG_LEN:
            raise ValueError("encrypted record too short")
        aead = store.keys.get(raw[2])
        if aead is None:
            raise ValueError("record under key id %d, which is not configured" % raw[2])
        nonce = bytes(raw[3 : 3 + _NONCE_LEN])
        try:
            body = aead.decrypt(nonce, bytes(raw[3 + _NONCE_LEN :]), bytes(raw[:3]) + full)
        except ValueError:
            raise ValueError("authentication failed: tampered, moved or under another key")
        return _migrate(full, schema, unpack(body))
    if store.keys:
        raise ValueError("plain record in an encrypted store: tampered")
    return _migrate(full, schema, unpack(memoryview(raw)[2:]))


def _can_migrate(schema):
    if schema > S.SCHEMA or schema < 1:
        return False
    for v in range(schema, S.SCHEMA):
        if v not in MIGRATIONS:
            return False
    return True


def _migrate(full, schema, value):
    for v in range(schema, S.SCHEMA):
        value = MIGRATIONS[v](full, value)
    return value


def _u32(data, i):
    return (data[i] << 24) | (data[i + 1] << 16) | (data[i + 2] << 8) | data[i + 3]


def _get_varint(buf, i):
    n, i = read_varint(buf, i, len(buf))
    if i < 0:
        raise ValueError("varint truncated or too long")
    return n, i


def _unpack_at(buf, i, depth):
    tag = buf[i]
    i += 1
    if tag == S.TAG_NONE:
        return None, i
    if tag == S.TAG_TRUE:
        return True, i
    if tag == S.TAG_FALSE:
        return False, i
    if tag == S.TAG_INT:
        z, i = _get_varint(buf, i)
        return (z >> 1) if not z & 1 else -((z + 1) >> 1), i
    if tag == S.TAG_STR or tag == S.TAG_BYTES:
        n, i = _get_varint(buf, i)
        if i + n > len(buf):
            raise ValueError("truncated value")
        data = bytes(buf[i : i + n])
        return (data.decode() if tag == S.TAG_STR else data), i + n
    if tag == S.TAG_LIST:
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

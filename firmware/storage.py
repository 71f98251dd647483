# The board's persistent store: which backend, which key.
#
# Device config (/siskin.json), key "storage":
#   a path           a log file on the board's littlefs (default
#                    "/siskin.store"; works on every stock firmware, and on
#                    the unix port)
#   "partition:NAME" the raw flash partition labelled NAME, for
#                    common/store/kvlog.py (ESP32: a data partition in a custom
#                    partition table, docs/boards.md; never the file system's)
#   "none"           nothing persisted
# and "storage_key_file" (default "/siskin.key"): key text as
# common/store/keytext.py reads it (64 or 32 hex digits, or ID:HEX lines). If the
# file exists, every record is encrypted with AES-GCM under keys derived from
# it with HKDF-SHA256 and the chip's machine.unique_id() as salt, so a copied
# key file does not open another board's store. If it does not exist, the
# store is plain (CRC-checked only) and the log says so.

from common.store.storeboot import open_store as open_backend

HKDF_INFO = b"siskin store key v1"


def _chip_id():
    try:
        import machine

        return machine.unique_id()
    except (ImportError, AttributeError):
        return b"unix-port"  # no chip: the salt is a constant


def read_keys(path, log):
    """The derived AES keys by id, or None when no key file exists."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        log.log(30, "store: no key file %s: the store is NOT encrypted" % path)
        return None
    from common.crypto.hkdf import hkdf_sha256  # only with a key file: not in the heap without
    from common.store.keytext import parse_keys

    keys = parse_keys(text)
    salt = _chip_id()
    for kid in keys:
        raw = keys[kid]
        keys[kid] = hkdf_sha256(raw, salt, HKDF_INFO, len(raw))
    return keys


def _backend(cfg, keys):
    where = cfg.get("storage", "/siskin.store")
    if where == "none":
        return None
    if where.startswith("partition:"):
        import esp32

        from common.store.kvlog import KVLog

        found = esp32.Partition.find(esp32.Partition.TYPE_DATA, label=where[10:])
        if not found:
            raise ValueError("no flash partition labelled %r (storage in the device config)" % where[10:])
        return KVLog(found[0])
    from common.store.filelog_open import open_file_log
    from firmware.littlefs_fs import LittleFS

    return open_file_log(LittleFS(), where, compact_min=16384, keys=keys)


def index_keys(settings):
    """How many records the store can hold at the board's limits: its RAM
    index is made that big at start (common/store/filelog.py _presize)."""
    s = settings
    return s.max_sessions + s.max_subscriptions + 2 * s.max_messages + s.max_retained


def open_store(cfg, log, keys=0):
    """The opened Store for the broker, or None (storage "none"); `keys`:
    index_keys() of the board's settings."""
    backend = _backend(cfg, keys)
    if backend is None:
        log.log(30, "store: storage is none: sessions and retained messages are lost on restart")
        return None
    keys = read_keys(cfg.get("storage_key_file", "/siskin.key"), log)
    make_aead = None
    if keys:
        from firmware.crypto import make_aead
    return open_backend(backend, keys, make_aead, log.log)

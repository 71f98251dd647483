# The board's persistent store: which backend, which key.
#
# Device config (/siskin.json), key "storage":
#   a path           a log file on the board's littlefs (default
#                    "/siskin.store"; works on every stock firmware, and on
#                    the unix port)
#   "partition:NAME" the raw flash partition labelled NAME, for
#                    common/kvlog.py (ESP32: a data partition in a custom
#                    partition table, docs/boards.md; never the file system's)
#   "none"           nothing persisted
# and "storage_key_file" (default "/siskin.key"): 64 or 32 hex digits. If the
# file exists, every record is encrypted with AES-GCM under a key derived
# from it with HKDF-SHA256 and the chip's machine.unique_id() as salt, so a
# copied key file does not open another board's store. If it does not exist,
# the store is plain (CRC-checked only) and the log says so.

from common.compat import from_hex
from common.filelog import FileLog
from common.hkdf import hkdf_sha256
from common.store import Store

HKDF_INFO = b"siskin store key v1"


def _chip_id():
    try:
        import machine

        return machine.unique_id()
    except (ImportError, AttributeError):
        return b"unix-port"  # no chip: the salt is a constant


def read_key(path, log):
    """The derived AES key, or None when no key file exists."""
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        log.log(30, "store: no key file %s: the store is NOT encrypted" % path)
        return None
    try:
        raw = from_hex(text)
    except ValueError:
        raise ValueError("%s: the store key must be hex digits" % path)
    if len(raw) not in (16, 32):
        raise ValueError("%s: the store key must be 32 or 64 hex digits (AES-128/256)" % path)
    return hkdf_sha256(raw, _chip_id(), HKDF_INFO, len(raw))


def _backend(cfg):
    where = cfg.get("storage", "/siskin.store")
    if where == "none":
        return None
    if where.startswith("partition:"):
        import esp32

        from common.kvlog import KVLog

        found = esp32.Partition.find(esp32.Partition.TYPE_DATA, label=where[10:])
        if not found:
            raise ValueError("no flash partition labelled %r (storage in the device config)" % where[10:])
        return KVLog(found[0])
    from firmware.littlefs_fs import LittleFS

    return FileLog(LittleFS(), where, compact_min=16384)


def open_store(cfg, log):
    """The opened Store for the broker, or None (storage "none")."""
    backend = _backend(cfg)
    if backend is None:
        log.log(30, "store: storage is none: sessions and retained messages are lost on restart")
        return None
    keys = {}
    key = read_key(cfg.get("storage_key_file", "/siskin.key"), log)
    if key is not None:
        from firmware.crypto import make_aead

        keys = {1: make_aead(key)}
    store = Store(backend, keys, 1 if keys else 0, log.log)
    store.open()
    return store

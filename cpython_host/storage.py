"""The host's persistent store: an append-only log in the data directory.

`open_store(data_dir, key_text, wipe)` returns an opened common.store.Store
over common/filelog.py on POSIX files (cpython_host/posix_fs.py: fsync of
the file and of the directory), sealed with AES-GCM (cpython_host/crypto.py,
the `cryptography` package) when a key is given.

Key text (from --store-key-file or SISKIN_STORE_KEY): one key as 64 hex
digits (AES-256) or 32 (AES-128), which gets key id 1; or, to rotate keys,
lines `ID:HEX` (ID 1..255) of which the highest id encrypts new records and
the others still read old ones. Lines starting with # are comments.
`python -m cpython_host store-key` prints a fresh key.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from common.filelog import FileLog
from common.store import Store, StoreError
from cpython_host.posix_fs import PosixFS

LOG_NAME = "siskin.log"


def parse_keys(text: str) -> dict[int, bytes]:
    """Key id -> key bytes from key text; StoreError naming what is wrong."""
    keys: dict[int, bytes] = {}
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    if not lines:
        raise StoreError("the store key is empty: give 64 hex digits (see `python -m cpython_host store-key`)")
    for line in lines:
        kid_text, sep, hex_text = line.rpartition(":")
        kid = 1
        if sep:
            if not kid_text.isdigit() or not 1 <= int(kid_text) <= 255:
                raise StoreError(f"store key line {line[:8]}...: the key id before ':' must be 1..255")
            kid = int(kid_text)
        elif len(lines) > 1:
            raise StoreError("several store keys need ids: write each line as ID:HEX")
        try:
            key = bytes.fromhex(hex_text)
        except ValueError:
            raise StoreError(f"store key {kid}: not hex digits") from None
        if len(key) not in (16, 32):
            raise StoreError(f"store key {kid}: {len(key)} bytes; AES needs 16 or 32 (32 or 64 hex digits)")
        if kid in keys:
            raise StoreError(f"store key id {kid} given twice")
        keys[kid] = key
    return keys


def open_store(
    data_dir: str,
    key_text: str | None = None,
    wipe: bool = False,
    log: Callable[[int, str], None] | None = None,
) -> Store:
    """The opened store in `data_dir`; StoreError with advice if it cannot be used."""
    os.makedirs(data_dir, exist_ok=True)
    aeads = {}
    key_id = 0
    if key_text is not None:
        keys = parse_keys(key_text)
        key_id = max(keys)
        try:
            # Only an encrypted store needs the `cryptography` package.
            from cpython_host.crypto import make_aead
        except ImportError:
            raise StoreError(
                "an encrypted store needs the Python package 'cryptography' (pip install cryptography)"
            ) from None
        aeads = {kid: make_aead(key) for kid, key in keys.items()}
    backend = FileLog(PosixFS(), os.path.join(data_dir, LOG_NAME))
    store = Store(backend, aeads, key_id, log)
    try:
        store.open(wipe)
    except BaseException:
        backend.close()
        raise
    return store

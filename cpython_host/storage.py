"""The host's persistent store: an append-only log in the data directory.

`open_store(data_dir, key_text, wipe)` opens common/store/storeboot.py's store over
common/store/filelog.py on POSIX files (cpython_host/posix_fs.py: fsync of the file
and of the directory), sealed with AES-GCM (cpython_host/crypto.py, the
`cryptography` package) when key text is given (--store-key-file or
SISKIN_STORE_KEY; the format in common/store/keytext.py; `python -m cpython_host
store-key` prints a fresh key).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from common.store.filelog_open import open_file_log
from common.store.keytext import parse_keys
from common.store.store import Store, StoreError
from common.store.storeboot import open_store as open_backend
from cpython_host.posix_fs import PosixFS

LOG_NAME = "siskin.log"
# Zeros kept written ahead of the log (FileLog's room): a sync then changes
# no file size, about 2.5 x cheaper on ext4. Compaction rewrites the file
# with its room, so it waits for 4 x that much log.
ROOM = 1 << 20
COMPACT_MIN = 4 << 20


def open_store(
    data_dir: str,
    key_text: str | None = None,
    wipe: bool = False,
    log: Callable[[int, str], None] | None = None,
) -> Store:
    """The opened store in `data_dir`; StoreError with advice if it cannot be used."""
    os.makedirs(data_dir, exist_ok=True)
    keys = None
    make_aead: Callable[[bytes], Any] | None = None
    if key_text is not None:
        keys = parse_keys(key_text)
        try:
            # Only an encrypted store needs the `cryptography` package.
            from cpython_host import crypto
        except ImportError:
            raise StoreError(
                "an encrypted store needs the Python package 'cryptography' (pip install cryptography)"
            ) from None
        make_aead = crypto.make_aead
    backend = open_file_log(PosixFS(), os.path.join(data_dir, LOG_NAME), compact_min=COMPACT_MIN, room=ROOM)
    store: Store = open_backend(backend, keys, make_aead, log, wipe)
    return store

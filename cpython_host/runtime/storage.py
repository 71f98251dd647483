"""The host's persistent store: an append-only log in the data directory.

`open_store(data_dir, key_text, wipe)` opens common/store/storeboot.py's store over
common/store/filelog.py on POSIX files (cpython_host/runtime/posix_fs.py: fsync of the file
and of the directory), sealed with AES-GCM (cpython_host/runtime/crypto.py, the
`cryptography` package) when key text is given (--store-key-file or
SISKIN_STORE_KEY; the format in common/store/keytext.py; `python -m cpython_host
store-key` prints a fresh key).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from common.store.filelog import FileLog
from common.store.filelog_open import open_log
from common.store.keytext import parse_keys
from common.store.store import Store, StoreError
from common.store.storeboot import open_store as open_backend
from cpython_host.runtime.posix_fs import PosixFS

LOG_NAME = "siskin.log"
# Zeros kept written ahead of the log (FileLog's room): a sync then changes
# no file size, about 2.5 x cheaper on ext4. Compaction rewrites the file
# with its room, so it waits for 4 x that much log.
ROOM = 1 << 20
COMPACT_MIN = 4 << 20


class MonitoredFileLog(FileLog):
    """The host's FileLog: its monitor (cpython_host/operations/store_monitor.py) hears
    of each compaction, before (file size, live records) and after (size
    before and after, live records), to log what it did and how long it
    took. (Here rather than in common/store/filelog.py: a board has no
    monitor, and keeps no code for one.) It gathers small records into
    writes of up to 32 KB (FileLog's batch): a sync's worth with a
    persistent subscriber (about 100 messages of 160 B)."""

    batch = 32 << 10

    def rewrite(self) -> None:
        monitor = self.monitor
        before = self.file_size
        if monitor is not None:
            monitor.compacting(before, len(self.index))
        super().rewrite()
        if monitor is not None:
            monitor.compacted(before, self.file_size, len(self.index))


def open_store(
    data_dir: str,
    key_text: str | None = None,
    wipe: bool = False,
    log: Callable[[int, str], None] | None = None,
    monitor: Any = None,
) -> Store:
    """The opened store in `data_dir`; StoreError with advice if it cannot be used.
    `monitor`: hears of the long work (cpython_host/operations/store_monitor.py)."""
    os.makedirs(data_dir, exist_ok=True)
    keys = None
    make_aead: Callable[[bytes], Any] | None = None
    if key_text is not None:
        keys = parse_keys(key_text)
        try:
            # Only an encrypted store needs the `cryptography` package.
            from cpython_host.runtime import crypto
        except ImportError:
            from cpython_host.hints import install_advice

            raise StoreError(
                "an encrypted store needs the Python package 'cryptography': "
                + install_advice("cryptography", "python3-cryptography")
            ) from None
        make_aead = crypto.make_aead
    backend = MonitoredFileLog(PosixFS(), os.path.join(data_dir, LOG_NAME), compact_min=COMPACT_MIN, room=ROOM)
    backend.monitor = monitor  # before the open's scan, which it hears of
    open_log(backend)
    store: Store = open_backend(backend, keys, make_aead, log, wipe, monitor)
    return store


def give_back_heap() -> None:
    """Return to the system the heap that the restore or PyPy's warm-ups
    (warmup.py) used in passing.

    The restore builds large tables for a while (the log's index as it
    grows, the key lists it reads by, the message ids of the deliveries);
    glibc keeps what they freed below the objects that stay, about 20 MB
    over 200,000 queued messages (tools/restart.py, docs/persistence.md).
    malloc_trim(0) gives it back. Not glibc (musl, macOS): nothing to do."""
    try:
        import ctypes

        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass

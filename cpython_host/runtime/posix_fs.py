"""The POSIX `fs` adapter for common/store/filelog.py (host build).

Durability is the point of this module: `sync` is flush + os.fdatasync of
the file (the data and the size, which is all a log needs back; not its
times, which would cost a journal commit on every sync of a log written
over its room of zeros: common/store/filelog.py), and `sync_dir` fsyncs the
directory itself (opened O_RDONLY), which is what makes a create or a
rename survive a power cut on Linux. `rename` is os.replace: atomic, and it
replaces an existing target.
"""

from __future__ import annotations

import os
from typing import IO, Any

_datasync = getattr(os, "fdatasync", os.fsync)  # (macOS has no fdatasync)


class PosixFS:
    """open / sync / rename / remove / exists / sync_dir over real files."""

    def open(self, path: str, mode: str) -> IO[Any]:
        if mode not in ("rb", "ab", "wb", "r+b"):
            raise ValueError(f"unsupported mode {mode!r}")
        return open(path, mode)

    def sync(self, f: IO[Any]) -> None:
        f.flush()
        _datasync(f.fileno())

    def rename(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def remove(self, path: str) -> None:
        os.remove(path)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def sync_dir(self, path: str) -> None:
        fd = os.open(path or ".", os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

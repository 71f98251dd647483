"""common/store/filelog.py on real files through cpython_host/runtime/posix_fs.py: reopen,
compaction by rename, a leftover .compact, a torn tail, and a writer process
killed with SIGKILL in the middle of its appends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from common.store.filelog import COMPACT_SUFFIX, FILE_HEADER_SIZE
from common.store.filelog_open import open_file_log
from cpython_host.runtime.posix_fs import PosixFS
from tests.conftest import REPO_ROOT
from tests.core import test_store_damage
from tests.core.kv_contract import items


def test_put_sync_reopen(tmp_path: Path) -> None:
    path = str(tmp_path / "store.log")
    kv = open_file_log(PosixFS(), path)
    kv.put(b"a", b"1")
    kv.put(b"b", b"x" * 10000)
    kv.delete(b"a")
    kv.put(b"c", b"3")
    kv.close()
    kv2 = open_file_log(PosixFS(), path)
    assert sorted(items(kv2)) == [(b"b", b"x" * 10000), (b"c", b"3")]
    assert kv2.skipped == 0
    kv2.close()


def test_compaction_renames_and_leaves_no_temp(tmp_path: Path) -> None:
    path = str(tmp_path / "store.log")
    kv = open_file_log(PosixFS(), path, compact_min=4096)
    for i in range(2000):
        kv.put(b"k%d" % (i % 10), b"%d" % i * 20)
    kv.sync()
    assert kv.compactions > 0
    assert not os.path.exists(path + COMPACT_SUFFIX)
    assert os.path.getsize(path) < 4096 * 2
    kv.close()
    kv2 = open_file_log(PosixFS(), path)
    assert kv2.get(b"k9") == b"1999" * 20


def test_leftover_compact_and_torn_tail(tmp_path: Path) -> None:
    path = str(tmp_path / "store.log")
    kv = open_file_log(PosixFS(), path)
    kv.put(b"a", b"kept")
    kv.close()
    size = os.path.getsize(path)
    with open(path, "ab") as f:
        f.write(b"\xa5\x00\x01\x00\x50\x00\x00\x00b")  # a record cut short
    Path(path + COMPACT_SUFFIX).write_bytes(b"SKVLOG1\n" + b"half")
    kv2 = open_file_log(PosixFS(), path)
    assert not os.path.exists(path + COMPACT_SUFFIX)
    assert os.path.getsize(path) == size
    kv2.put(b"b", b"after")
    kv2.close()
    assert sorted(items(open_file_log(PosixFS(), path))) == [(b"a", b"kept"), (b"b", b"after")]


WRITER = r"""
import sys
sys.path.insert(0, sys.argv[2])
from common.store.filelog_open import open_file_log
from cpython_host.runtime.posix_fs import PosixFS

kv = open_file_log(PosixFS(), sys.argv[1], compact_min=16384)
i = 0
while True:
    i += 1
    kv.put(b"counter", b"%d" % i)
    kv.put(b"junk/%d" % (i % 50), b"j" * (i % 700))
    if i % 3 == 0:
        kv.delete(b"junk/%d" % ((i * 7) % 50))
    if i % 5 == 0:
        kv.sync()
        sys.stdout.write("%d\n" % i)
        sys.stdout.flush()
"""


def test_reopen_after_killed_writer(tmp_path: Path) -> None:
    path = str(tmp_path / "store.log")
    for _ in range(3):  # each run resumes the log the last one was killed in
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, path, str(REPO_ROOT)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        last = 0
        for line in proc.stdout:
            last = int(line)
            if last >= 1500:
                break
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        kv = open_file_log(PosixFS(), path)
        value = kv.get(b"counter")
        assert value is not None
        # Synced before the kill: at least that; never garbage.
        assert int(value) >= last
        for _key, val in items(kv, b"junk/"):
            assert val == b"j" * len(val)
        assert os.path.getsize(path) >= FILE_HEADER_SIZE
        kv.put(b"after", b"ok")
        kv.close()
        assert open_file_log(PosixFS(), path).get(b"after") == b"ok"


class TestPosixFileLogDamage(test_store_damage.TestFileLogDamage):
    """tests/core/test_store_damage.py's file-log cases on real files (PosixFS)."""

    def setUp(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        self.fs = PosixFS()
        self.path = os.path.join(self.tmp.name, "siskin.log")

    def tearDown(self) -> None:
        self.tmp.cleanup()

    def file(self, path: str) -> bytes:
        return Path(path).read_bytes()

    def write(self, path: str, data: bytes, mode: str = "wb") -> None:
        with open(path, mode) as f:
            f.write(data)

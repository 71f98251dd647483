"""Long store work says what it is doing: progress lines and systemd's STATUS=/EXTEND_TIMEOUT_USEC=.

A real store on disk (the core's in-memory broker harness filling it through
cpython_host/runtime/storage.py) is opened and restored with the host's StoreMonitor,
whose clock the test drives: the lines logged and the datagrams on a real
NOTIFY_SOCKET follow the records read, not the machine's speed. Then the
real broker on such a store tells systemd the same before READY=1.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import sys
from pathlib import Path

import pytest

import common.store.store_open as opener
from common.mqtt import consts as C
from common.store.filelog import FILE_HEADER_SIZE
from common.store.filelog_open import open_log
from common.store.kvrecord import OVERHEAD
from cpython_host.operations.store_monitor import EXTEND_USEC, StoreMonitor
from cpython_host.runtime.posix_fs import PosixFS
from cpython_host.runtime.storage import LOG_NAME, MonitoredFileLog, open_store
from tests.core.harness import Harness
from tests.host.test_service import fields, ready_then_port, start, stop

# Progress every 256 records (not 4096): a store the test fills in a second.
PROGRESS_STEP = 256
MESSAGES = 3 * PROGRESS_STEP + 100  # one delivery record each, holding its message: 3 progress steps and more


@pytest.fixture(autouse=True)
def progress_step(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(opener, "PROGRESS_STEP", PROGRESS_STEP)


def fill(data: Path, messages: int) -> None:
    """A store with an offline persistent subscriber and `messages` QoS 1 messages queued for it."""
    store = open_store(str(data))
    h = Harness(store=store, store_sync="batch")  # synced once, at the close
    h.offline_subscriber("sub", "t/#")
    pub = h.client()
    pub.connect("pub")
    for i in range(messages):
        pub.publish("t/x", b"%06d" % i, qos=1, packet_id=i % 60000 + 1)
        assert pub.expect(C.PUBACK).packet_id == i % 60000 + 1
    store.close()


class Clock:
    """2.5 s pass at each look: every report is past the 2 s interval."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        self.now += 2.5
        return self.now


def test_restore_progress_by_records_logged_and_told_to_systemd(
    tmp_path: Path, notify_socket: socket.socket, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    fill(data, MESSAGES)
    monkeypatch.setenv("NOTIFY_SOCKET", notify_socket.getsockname())
    path = str(data / LOG_NAME)
    size = os.path.getsize(path)
    monitor = StoreMonitor(path, clock=Clock())
    caplog.set_level(logging.INFO, "siskin.store")
    store = open_store(str(data), monitor=monitor)
    h = Harness(store=store)
    monitor.starting = False  # serving: no more STATUS= from the store
    assert h.restored["messages"] == MESSAGES
    total = len(store.backend)
    records = MESSAGES + 3  # deliveries (each holding its message), the session, its subscription, the meta record
    assert total == records
    lines = [r.getMessage() for r in caplog.records]
    steps = [n * PROGRESS_STEP for n in range(1, records // PROGRESS_STEP + 1)]
    restoring = [ln for ln in lines if ln.startswith("store: restoring: ")]
    assert [re.sub(r" \(\d+%\), [\d,]+ records/s$", "", ln) for ln in restoring] == [
        f"store: restoring: {n:,} of {total:,} records" for n in steps
    ]
    assert restoring[0].endswith(f"({PROGRESS_STEP / total:.0%}), {PROGRESS_STEP / 2.5:,.0f} records/s")
    ended = [ln for ln in lines if ln.startswith("store: restored ")]
    assert ended == [
        f"store: restored {total:,} records in {2.5 * (len(steps) + 1):.1f} s, {total / (2.5 * (len(steps) + 1)):,.0f} records/s"
    ]
    assert f"store: read {path}: {size / 1e6:.1f} MB in 2.5 s" in "\n".join(lines)
    # systemd heard the start of each phase and each progress line, with a new window each time.
    told = []
    notify_socket.settimeout(0.5)
    while True:
        try:
            told.append(fields(notify_socket))
        except TimeoutError:
            break
    assert all(set(m) == {"STATUS", "EXTEND_TIMEOUT_USEC"} for m in told), told
    assert all(m["EXTEND_TIMEOUT_USEC"] == str(EXTEND_USEC) for m in told)
    statuses = [m["STATUS"] for m in told]
    assert statuses[0] == f"store: reading {path}: 0.0 MB of {size / 1e6:.1f} MB (0%)"
    assert statuses[1] == f"store: restoring: 0 of {total:,} records (0%)"
    assert statuses[2:] == restoring


def test_compaction_is_logged_with_sizes_and_time(caplog: pytest.LogCaptureFixture) -> None:
    monitor = StoreMonitor("/var/lib/siskin/siskin.log", clock=Clock())
    caplog.set_level(logging.INFO, "siskin.store")
    monitor.compacting(41_900_000, 200_003)
    monitor.compacted(41_900_000, 20_950_000, 200_003)
    assert [r.getMessage() for r in caplog.records] == [
        "store: compacted /var/lib/siskin/siskin.log: 41.9 MB -> 20.9 MB (200,003 live records) in 2.50 s"
    ]


def test_the_hosts_log_tells_its_monitor_of_each_compaction(tmp_path: Path) -> None:
    """cpython_host/runtime/storage.py's FileLog: before a compaction (file size, live
    records) and after it (size before and after, live records); the core's
    FileLog keeps no code for it (a board has no monitor)."""
    calls: list[tuple[object, ...]] = []

    class Monitor:
        def progress(self, phase: str, done: int, total: int) -> None:
            pass

        def compacting(self, size: int, records: int) -> None:
            calls.append(("compacting", size, records))

        def compacted(self, before: int, after: int, records: int) -> None:
            calls.append(("compacted", before, after, records))

    path = str(tmp_path / LOG_NAME)
    log = MonitoredFileLog(PosixFS(), path, compact_min=1 << 30)  # no compaction while it fills
    log.monitor = Monitor()
    open_log(log)
    value = b"v" * 100
    for i in range(400):
        log.put(b"k%02d" % (i % 40), value)
    assert calls == []
    log.compact_min = 0
    size = log.file_size + OVERHEAD + 3 + len(value)
    log.put(b"k00", value)  # the log is over twice its live bytes: compacted now
    assert log.compactions == 1
    assert log.file_size == FILE_HEADER_SIZE + 40 * (OVERHEAD + 3 + len(value)) < size
    assert calls == [("compacting", size, 40), ("compacted", size, log.file_size, 40)]
    log.close()


def test_the_broker_says_it_restores_before_ready(tmp_path: Path, notify_socket: socket.socket) -> None:
    """The real broker on a store: STATUS= and EXTEND_TIMEOUT_USEC= for the reading and the
    restore, then READY=1 once it listens."""
    data = tmp_path / "data"
    fill(data, 200)
    log = tmp_path / "broker.log"
    cmd = [sys.executable, "-m", "cpython_host", "--port", "0", "--data-dir", str(data)]
    proc = start(cmd, log, notify_socket)
    try:
        first, second = fields(notify_socket), fields(notify_socket)
        assert first["STATUS"].startswith(f"store: reading {data / LOG_NAME}: 0.0 MB of ")
        assert second["STATUS"] == "store: restoring: 0 of 203 records (0%)"  # 200 deliveries, each holding its message
        assert first["EXTEND_TIMEOUT_USEC"] == second["EXTEND_TIMEOUT_USEC"] == str(EXTEND_USEC)
        ready_then_port(proc, log, notify_socket)
        assert "restored 1 sessions, 1 subscriptions, 200 queued messages" in log.read_text()
        stop(proc, notify_socket)
    finally:
        proc.kill()
        proc.wait(10)

"""What the store is doing while it takes long: log lines, and systemd's STATUS= at start-up.

The core reports its long work to a monitor (common/store/filelog.py's
Monitor and common/store/store.py's Store.monitor): the open reading the
log ("scan", in bytes) and the restore ("restore", in records); the host's
FileLog (cpython_host/runtime/storage.py MonitoredFileLog) adds each compaction. This one, the host's, logs progress at most every `interval`
seconds of its clock (records read, of how many, the rate) and the end of
a phase that took that long, and, while the broker starts (before
READY=1), tells systemd what it is doing (STATUS=) and that it is alive
(EXTEND_TIMEOUT_USEC=, a window that each report renews), so a long
restore on a slow SD card is not killed by TimeoutStartSec. Each
compaction is logged once it is done: sizes before and after, time taken.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from cpython_host.operations import sdnotify

log = logging.getLogger("siskin.store")

# A restore must report again within this window or systemd's start timeout applies
# (the reports come every `interval` s: a window of many of them).
EXTEND_USEC = 30_000_000

PHASES = {"scan": "reading", "restore": "restoring"}


def mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


class StoreMonitor:
    def __init__(
        self,
        path: str,
        clock: Callable[[], float] = time.monotonic,
        interval: float = 2.0,
        notify: Callable[..., bool] = sdnotify.notify,
    ) -> None:
        self.path = path  # the log file, named in the lines
        self.clock = clock
        self.interval = interval
        self.notify = notify
        self.starting = True  # until the broker serves: STATUS= and EXTEND_TIMEOUT_USEC= too
        self.began = 0.0  # when the current phase (or compaction) began
        self.said = 0.0  # when progress was last logged
        self.logged = False  # whether the current phase logged progress (then its end is logged too)
        self.compaction_began = 0.0

    def progress(self, phase: str, done: int, total: int) -> None:
        now = self.clock()
        if done >= total:
            took = now - self.began
            level = logging.INFO if self.logged or took >= self.interval else logging.DEBUG
            log.log(level, "%s", self.ended(phase, total, took))
            return
        if done == 0:
            self.began = self.said = now
            self.logged = False
            self.tell(self.text(phase, done, total, now))
            return
        if now - self.said < self.interval:
            return
        self.said = now
        self.logged = True
        text = self.text(phase, done, total, now)
        log.info("%s", text)
        self.tell(text)

    def text(self, phase: str, done: int, total: int, now: float) -> str:
        took = now - self.began
        share = f" ({done / total:.0%})" if total else ""
        if phase == "scan":
            rate = f", {done / took / 1e6:.1f} MB/s" if took > 0 and done else ""
            return f"store: reading {self.path}: {mb(done)} of {mb(total)}{share}{rate}"
        rate = f", {done / took:,.0f} records/s" if took > 0 and done else ""
        return f"store: restoring: {done:,} of {total:,} records{share}{rate}"

    def ended(self, phase: str, total: int, took: float) -> str:
        if phase == "scan":
            rate = f", {total / took / 1e6:.1f} MB/s" if took > 0 else ""
            return f"store: read {self.path}: {mb(total)} in {took:.1f} s{rate}"
        rate = f", {total / took:,.0f} records/s" if took > 0 else ""
        return f"store: restored {total:,} records in {took:.1f} s{rate}"

    def tell(self, status: str) -> None:
        """systemd's STATUS= and a new EXTEND_TIMEOUT_USEC window, while starting."""
        if self.starting:
            self.notify(f"STATUS={status}", f"EXTEND_TIMEOUT_USEC={EXTEND_USEC}")

    def compacting(self, size: int, records: int) -> None:
        self.compaction_began = self.clock()

    def compacted(self, before: int, after: int, records: int) -> None:
        log.info(
            "store: compacted %s: %s -> %s (%s live records) in %.2f s",
            self.path,
            mb(before),
            mb(after),
            f"{records:,}",
            self.clock() - self.compaction_began,
        )

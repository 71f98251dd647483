"""tools/ram_serve, the tool that writes docs/boards.md's table of the firmware
serving real clients: it runs here on the venv's 64-bit MicroPython (at the
Pico W board file's limits and twice its heap plus the code), and what it
prints and writes must hang together with the board file it measured."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT
from tests.host.upy_broker_proc import PICOW_HEAP, micropython
from tools import ram_serve

BOARD = REPO_ROOT / "boards" / "rp2040_picow.json"


def test_ram_serve_fills_the_board_to_its_limits_and_writes_the_table(tmp_path: Path) -> None:
    exe = micropython()
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "tools.build", "--board", "unix", "--out", str(dist)],
        cwd=REPO_ROOT,
        check=True,
        capture_output=True,
    )
    doc = tmp_path / "boards.md"
    doc.write_text(f"before\n{ram_serve.BEGIN}\nstale\n{ram_serve.END}\nafter\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tools.ram_serve",
            "--micropython",
            exe,
            "--heap",
            PICOW_HEAP,
            "--mpy",
            str(dist / "unix"),
            "--write",
            str(doc),
            str(BOARD),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout.splitlines()[-1])
    limits = json.loads(BOARD.read_text())["limits"]
    # Filled to the board file's limits, as the table says.
    assert r["clients"] == limits["max_connections"]
    assert r["retained"] == limits["max_retained"]
    assert r["queued"] == limits["max_messages"] - limits["max_retained"]
    assert r["offline_sessions"] + r["clients"] <= limits["max_sessions"]
    assert r["subscriptions"] <= limits["max_subscriptions"]
    # The heap figures add up, and filling the board took heap.
    assert r["at_limits"] + r["free"] == r["heap"]
    assert r["start"] + r["start_free"] == r["heap"]
    assert r["at_limits"] > r["start"] + r["clients"] * r["per_client"] // 2
    assert r["free_pct"] == round(100 * r["free"] / r["heap"], 1)
    assert r["per_client"] > 0 and r["per_subscription"] > 0
    # Then the largest packet the board accepts still went through.
    assert r["largest_publish"] == limits["max_packet_size"]
    # The table replaced what stood between the markers, and nothing else.
    text = doc.read_text()
    assert text.startswith("before\n") and text.endswith("after\n") and "stale" not in text
    assert "64-bit" in text and f"`{dist / 'unix'}`" in text
    assert f"| idle client (socket, poller entry, core objects) | {r['per_client']:,} B |" in text
    assert f"| free at the limits | {r['free']:,} B ({r['free_pct']} %) |" in text
    # What a real image would have left: the same less its measured overhead (tools/emu/heap.py).
    assert r["free_real"] == r["free"] - ram_serve.REAL_IMAGE_OVERHEAD
    assert r["free_real_pct"] == round(100 * r["free_real"] / r["heap"], 1)
    assert f"**{r['free_real']:,} B ({r['free_real_pct']} %)** |" in text


def test_the_boards_doc_holds_a_table_the_tool_wrote() -> None:
    # docs/boards.md's table has the tool's rows (it is regenerated, never edited by hand).
    doc = (REPO_ROOT / "docs" / "boards.md").read_text()
    i, j = doc.find(ram_serve.BEGIN), doc.find(ram_serve.END)
    assert 0 <= i < j
    block = doc[i:j]
    assert "Measured by `python -m tools.ram_serve` on MicroPython" in block
    for row in ("heap (-X heapsize)", "idle client (socket, poller entry, core objects)", "free at the limits"):
        assert f"| {row} |" in block
    assert "| **free on a real image** (less the " in block


def test_fw_bench_measures_rates_and_garbage(tmp_path: Path) -> None:
    """tools/fw_bench (the firmware's round trips per gc_threshold): one short
    round on the venv's MicroPython prints a row per QoS and threshold, with
    messages that went through and a garbage figure per message. It asserts
    no speed (that is what the tool reports)."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tools.fw_bench",
            "--micropython",
            micropython(),
            "--heap",
            PICOW_HEAP,
            "--rounds",
            "1",
            "--seconds",
            "1.2",
            "--gc-threshold",
            "0",
            "--gc-threshold",
            "8192",
            str(BOARD),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line.split("|")[1:-1] for line in proc.stdout.splitlines() if line.startswith("| ") and "---" not in line]
    cells = [[c.strip() for c in row] for row in rows[1:]]  # (the header row first)
    assert [(c[0], c[1]) for c in cells] == [("0", "0"), ("0", "8192"), ("1", "0"), ("1", "8192")], proc.stdout
    for _qos, _threshold, rate, garbage in cells:
        assert float(rate.replace(",", "")) > 10, proc.stdout
        # Every message leaves garbage behind: the shell's and asyncio's per-read objects at least.
        assert garbage.endswith(" B") and int(garbage[:-2].replace(",", "")) > 0, proc.stdout

"""Sparkplug B's heap on the real Pico W image, in the emulated RP2040.

    python -m tools.emu.sparkplug_heap --bootrom bootrom.bin --uf2 dist/rp2040_picow/siskin-0.1.0.uf2

Runs tests/upy/sparkplug_heap.py (what docs/sparkplug.md, Memory, measures on
the unix and wasm ports from source) as the board's /main.py, beside
tests/core/harness.py, from a fresh flash: on the image the Sparkplug modules
are frozen, so importing them costs the heap their objects, not their
bytecode. Prints the script's table (emulated time; the figures are bytes of
gc.mem_alloc() after a collection).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO_ROOT))

from tools.emu.board import EmuBoard  # noqa: E402
from tools.emu.fsimage import LAYOUTS  # noqa: E402
from tools.emu.heap import config_files  # noqa: E402

SCRIPT = REPO_ROOT / "tests" / "upy" / "sparkplug_heap.py"
END = r"\(micropython [0-9.]+, \d+-bit\)"


def board_files() -> dict[str, bytes]:
    """The script as /main.py (its harness beside it, imported by its board name)."""
    script = SCRIPT.read_bytes().replace(b"from tests.core.harness import", b"from harness import")
    harness = (REPO_ROOT / "tests" / "core" / "harness.py").read_bytes()
    return {**config_files(), "main.py": script, "harness.py": harness}


def measure(uf2: Path, bootrom: Path) -> str:
    """The script's table, as the chip printed it."""
    with tempfile.TemporaryDirectory(prefix="siskin-emu-") as tmp:
        with EmuBoard(uf2, bootrom, LAYOUTS["rp2040_picow"], files=board_files(), workdir=Path(tmp)) as b:
            out = b.expect(END, ms=240_000)
    start = out.rindex("| what | bytes |")
    return out[start:].strip()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.emu.sparkplug_heap", description=__doc__.split("\n\n")[0])
    p.add_argument("--bootrom", type=Path, required=True, help="the RP2040's boot ROM (docs/boards.md)")
    p.add_argument("--uf2", type=Path, required=True, help="the Pico W image (make firmware BOARD=rp2040_picow)")
    args = p.parse_args(argv)
    print(measure(args.uf2, args.bootrom))
    return 0


if __name__ == "__main__":
    sys.exit(main())

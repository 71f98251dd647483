"""A freshly flashed board starts without any file copied by hand.

The image carries the board files (firmware/manifest.py freezes boards/*.json
as the module `siskin_boards`), the board is recognised from what the port
says it runs on (sys.implementation._machine), and a missing /siskin.json
means the defaults. Before, a fresh Pico W stopped with "/siskin.json: cannot
read ([Errno 2] ENOENT)", and with that file it needed boards/<board>.json on
the file system too and "board": "rp2040_picow" (the default was esp32).
`make test-emu` boots the real image fresh (tests/emu/); these run the same
code under CPython on every `make test`.
"""

from __future__ import annotations

import importlib
import json
import sys
import types
from pathlib import Path

import pytest

from common.broker.limits import ConfigError
from firmware import boardcfg
from tests.conftest import REPO_ROOT


@pytest.mark.parametrize(
    ("machine", "board"),
    [
        ("Raspberry Pi Pico W with RP2040", "rp2040_picow"),
        ("Raspberry Pi Pico with RP2040", "rp2040_picow"),  # the plain Pico: the same chip, lwIP and sockets
        ("Generic ESP32 module with ESP32", "esp32"),
        ("Generic ESP32 module with SPIRAM with ESP32", "esp32_psram"),
        ("ESP32S3 module with SPIRAM with ESP32S3", "esp32_psram"),
    ],
)
def test_the_board_is_recognised_from_the_machine(machine: str, board: str) -> None:
    assert boardcfg.detect_board(machine) == board
    assert (REPO_ROOT / "boards" / f"{board}.json").is_file()


def test_an_unknown_machine_asks_for_the_board_by_name() -> None:
    with pytest.raises(ConfigError, match='set "board" in the device config'):
        boardcfg.detect_board("linux [GCC 12.2.0] version")


def test_no_device_config_means_the_defaults(tmp_path: Path) -> None:
    cfg = boardcfg.load_device(str(tmp_path / "siskin.json"), missing_ok=True)
    assert cfg["board"] is None and cfg["wifi_ssid"] == "" and cfg["ap_ssid"] == "siskin-setup"
    with pytest.raises(ConfigError, match="cannot read"):
        boardcfg.load_device(str(tmp_path / "siskin.json"))


def frozen_boards_module(tmp_path: Path) -> types.ModuleType:
    """Run firmware/manifest.py as MicroPython's manifest reader would; the
    module it freezes as siskin_boards.py, imported."""
    frozen: list[tuple[str, str]] = []
    env = {
        "include": lambda *a, **k: None,
        "package": lambda *a, **k: None,
        "module": lambda name, base_path=".", opt=None: frozen.append((name, base_path)),
    }
    manifest = REPO_ROOT / "firmware" / "manifest.py"
    cwd = Path.cwd()
    try:
        import os

        os.chdir(manifest.parent)  # MicroPython's reader runs a manifest from its directory
        exec(compile(manifest.read_text(), str(manifest), "exec"), env)
    finally:
        os.chdir(cwd)
    (path,) = [Path(base) / name for name, base in frozen if name == "siskin_boards.py"]
    spec = importlib.util.spec_from_file_location("siskin_boards", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_image_carries_every_board_file_and_the_firmware_falls_back_to_it(tmp_path: Path) -> None:
    module = frozen_boards_module(tmp_path)
    files = {p.stem: p.read_text() for p in (REPO_ROOT / "boards").glob("*.json")}
    assert module.BOARDS == files
    sys.modules["siskin_boards"] = module
    try:
        missing = str(tmp_path / "boards" / "rp2040_picow.json")
        settings, opts = boardcfg.load_board(missing, builtin=boardcfg.builtin_board("rp2040_picow"))
        expected = json.loads(files["rp2040_picow"])
        assert settings.max_connections == expected["limits"]["max_connections"]
        assert opts["max_sockets"] == expected["server"]["max_sockets"]
        # A board file on the file system comes first (settings change without a new image).
        own = tmp_path / "own.json"
        own.write_text(json.dumps({"limits": {"max_connections": 2}, "server": {"max_sockets": 4}}))
        settings, _ = boardcfg.load_board(str(own), builtin=boardcfg.builtin_board("rp2040_picow"))
        assert settings.max_connections == 2
    finally:
        del sys.modules["siskin_boards"]
    assert boardcfg.builtin_board("rp2040_picow") is None  # not a frozen image

"""The real firmware images booted in an emulated RP2040 (`make test-emu`).

The Pico W .uf2 and a plain Pico .uf2 of `make firmware` run in rp2040js
through tools/emu/ (a bootrom built from raspberrypi/pico-bootrom, its flash
routines trapped to JavaScript; docs/boards.md, "The images in an emulated
RP2040"). Every wait is in emulated milliseconds, so the runs are the same
on a busy machine; each bound below is a deadline in emulated time for a
line the firmware prints, not a measured duration.

    make test-emu PICO_BOOTROM=.../bootrom.bin     # images from dist/ (make firmware)

Not part of `make test`: CI cannot fetch the MicroPython and bootrom
sources (tests/host/test_emu_runner.py tests the runner there).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, require
from tools.emu.board import EmuBoard
from tools.emu.fsimage import LAYOUTS, read_fs_files
from tools.emu.heap import HEAP_LINE, config_files, selftest_files

# Every bound below is in emulated time; the wall clock only guards against a
# hang (a busy board runs at what Node gets of a loaded machine: minutes).
pytestmark = [pytest.mark.emu, pytest.mark.timeout(3600)]

PICOW_UF2 = Path(os.environ.get("EMU_PICOW_UF2", REPO_ROOT / "dist" / "rp2040_picow" / "siskin-0.1.0.uf2"))
PICO_UF2 = Path(os.environ.get("EMU_PICO_UF2", REPO_ROOT / "dist" / "rp2040_pico" / "siskin-0.1.0.uf2"))
BOOTROM = Path(os.environ.get("PICO_BOOTROM", "")) if os.environ.get("PICO_BOOTROM") else None
WATCHDOG_MS = 8000  # the device config's default watchdog_ms
RESTORED = r"restored (\d+) sessions, (\d+) subscriptions, (\d+) queued messages, (\d+) retained"


def board(tmp_path: Path, uf2: Path, layout: str, files: dict[str, bytes] | None = None) -> EmuBoard:
    require("PICO_BOOTROM (a bootrom.bin built from raspberrypi/pico-bootrom)", BOOTROM and BOOTROM.is_file())
    require(f"the image {uf2} (make firmware)", uf2.is_file())
    assert BOOTROM is not None
    return EmuBoard(uf2, BOOTROM, LAYOUTS[layout], files=files, workdir=tmp_path)


def test_fresh_flash_first_boot_uses_the_built_in_defaults_and_claims_no_address(tmp_path: Path) -> None:
    # Before: "/siskin.json: cannot read ([Errno 2] ENOENT)", the board
    # stopped; with a config it claimed "access point 'siskin-setup' up,
    # address 0.0.0.0" and "listening on 0.0.0.0:1883" with the CYW43 dead.
    with board(tmp_path, PICOW_UF2, "rp2040_picow") as b:
        b.expect(r"no /siskin\.json: the built-in defaults", ms=5000)
        b.expect(r"Raspberry Pi Pico W with RP2040: rp2040_picow \(recognised\)", ms=1000)
        b.expect(r"restored 0 sessions", ms=5000)
        b.expect(r"watchdog started \(8000 ms\)", ms=5000)
        # rp2040js has no CYW43: every start of the radio fails. The board
        # keeps trying, the watchdog fed, through three of its periods.
        for pause in (1, 2, 4, 8, 16, 32):
            attempt = b.expect(rf"trying again in {pause} s", ms=3 * WATCHDOG_MS)
            assert attempt.count("Failed to start CYW43") == 1, attempt
            assert "access point 'siskin-setup' did not come up" in attempt, attempt
        assert b.t_ms > 3 * WATCHDOG_MS, b.t_ms
        print(f"fresh flash: 6 bring-ups of the dead radio by t={b.t_ms} ms, no reset")
        text = b.console()
        assert "address 0.0.0.0" not in text and "listening on 0.0.0.0:" not in text, text
        assert b.resets == 0, b.status()


def test_configured_boot_listens_and_reports_its_heap(tmp_path: Path) -> None:
    with board(tmp_path, PICOW_UF2, "rp2040_picow", config_files()) as b:
        b.expect(r"Wi-Fi: not brought up \(listening on loopback", ms=10_000)
        b.expect(r"listening on 127\.0\.0\.1:1883", ms=5000)
        free, alloc = (int(g) for g in re.search(HEAP_LINE, b.expect(HEAP_LINE, ms=3000)).groups())  # type: ignore[union-attr]
        print(f"Pico W image, heap after start: free={free} alloc={alloc} (t={b.t_ms} ms)")
        assert free + alloc > 200_000 and free > 0.3 * (free + alloc)
        assert b.status()["flash_ops"]["program"] > 0  # the store was written


def test_core_self_test_then_the_store_survives_a_reset(tmp_path: Path) -> None:
    with board(tmp_path, PICOW_UF2, "rp2040_picow", selftest_files()) as b:
        start = b.expect(r"SELFTEST heap start free=(\d+) alloc=(\d+)", ms=60_000)
        assert "Traceback" not in start, start
        b.expect(r"SELFTEST delivered 100 retained 1", ms=120_000)
        limits = b.expect(r"SELFTEST heap limits free=(\d+) alloc=(\d+)", ms=120_000)
        print("self-test on the Pico W image:", start.splitlines()[-1], limits.splitlines()[-1])
        b.expect(r"SELFTEST ok", ms=30_000)
        # machine.reset() (the watchdog's reset), then the firmware boots from
        # the same flash and restores what the self-test left in the store.
        restored = b.expect(RESTORED, ms=20_000)
        assert b.resets == 1, b.status()
        counts = [int(n) for n in re.search(RESTORED, restored).groups()]  # type: ignore[union-attr]
        # The keeper's session and its queued QoS 1 message, the fill's
        # sessions, every subscription and retained message the limits let in.
        limits = json.loads((REPO_ROOT / "boards" / "rp2040_picow.json").read_text())["limits"]
        expected = [1 + limits["max_connections"], limits["max_subscriptions"], 1, limits["max_retained"]]
        assert counts == expected, restored
        b.expect(r"listening on 127\.0\.0\.1:1883", ms=10_000)
        # Issue 28: the restore left what it restored spread over the heap
        # and the start stopped ("out of memory at start-up ... allocating
        # 1024 bytes") with 172 KB free; restarted at the limits, the board
        # keeps the margin docs/boards.md aims at.
        free, alloc = (int(g) for g in re.search(HEAP_LINE, b.expect(HEAP_LINE, ms=3000)).groups())  # type: ignore[union-attr]
        print(f"restarted over the store at the limits: heap free={free} alloc={alloc}")
        assert free > 0.3 * (free + alloc), (free, alloc)
        flash = tmp_path / "flash.bin"
        b.save_flash(flash)
    files_after = read_fs_files(LAYOUTS["rp2040_picow"], flash.read_bytes())
    assert "main.py" not in files_after and "siskin.store" in files_after


def test_a_stop_at_start_up_stays_stopped_through_three_watchdog_periods(tmp_path: Path) -> None:
    # Before: the watchdog (watchdog_ms 8000) started first and reset the
    # stopped board 8 s later, into the same stop: a reset loop.
    with board(tmp_path, PICOW_UF2, "rp2040_picow", config_files(storage="/no-such-dir/siskin.store")) as b:
        b.expect(r"cannot be opened", ms=10_000)
        b.expect(r">>> ", ms=2000)
        b.run(3 * WATCHDOG_MS + 1000)
        assert b.resets == 0, b.status()
        assert "watchdog started" not in b.console()
        assert b.exec_raw("print(6 * 7)", ms=2000).strip() == "42"


def test_plain_pico_without_an_uplink_stops_at_the_repl_without_a_reboot_loop(tmp_path: Path) -> None:
    # Before: sys.exit(2) in _stop without `network`: MicroPython soft-reboots
    # into main.py again, for ever. The plain Pico's image has lwIP and
    # network.PPP now but no Wi-Fi: with no "ppp" in the device config there
    # is nothing to serve on, which stops the start before the watchdog.
    with board(tmp_path, PICO_UF2, "rp2040_pico") as b:
        b.expect(r"Raspberry Pi Pico with RP2040: rp2040_picow \(recognised\)", ms=10_000)
        b.expect(r"Raspberry Pi Pico with RP2040 has no Wi-Fi and no PPP uplink is configured", ms=10_000)
        b.expect(r">>> ", ms=2000)
        b.run(3 * WATCHDOG_MS)
        assert "soft reboot" not in b.console().lower() and b.resets == 0, b.console()
        assert b.exec_raw("print(6 * 7)", ms=2000).strip() == "42"

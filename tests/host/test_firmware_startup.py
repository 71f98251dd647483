"""The firmware's start-up on the MicroPython unix port with a board's parts
stood in for (tests/upy/fake_board.py): the first-boot bugs that the real
image showed in the emulated RP2040 (make test-emu, tests/emu/), each
checked here on every `make test`.

- A stop at start-up (a store that cannot be opened, memory, config) comes
  before the watchdog starts: a started machine.WDT cannot be stopped on the
  RP2040 or the ESP32, so the stop "at the REPL" used to become a reset loop.
- A radio that fails to start is reported as such, the bring-up is tried
  again, and no address is claimed: the firmware used to log "access point
  'siskin-setup' up, address 0.0.0.0" and listen. Each attempt starts the
  radio once (a failed start blocks in the CYW43 driver, unfed, and leaks
  one of the PIO's 8 state machines): it used to start it four times.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.conftest import REPO_ROOT
from tests.host.broker_proc import wait_until
from tests.host.upy_broker_proc import UpyBrokerProcess, micropython

FAKE_BOARD = REPO_ROOT / "tests" / "upy" / "fake_board.py"


def launch(workdir: Path, spec: dict[str, object], device: dict[str, object]) -> tuple[subprocess.Popen[bytes], Path]:
    """The firmware under fake_board.py with `spec`'s stand-ins; (process, log path)."""
    b = UpyBrokerProcess(workdir, device=device)  # writes siskin.json as every firmware test does
    log = workdir / "fake-board.log"
    env = dict(os.environ, MICROPYPATH=".frozen", SISKIN_FAKE_BOARD=json.dumps(spec))
    cmd = [micropython(), "-X", "heapsize=600K", str(FAKE_BOARD), "--config", str(b.config_path), "--port", "0"]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=FAKE_BOARD.parent, stdout=out, stderr=subprocess.STDOUT, env=env)
    return proc, log


def log_until(workdir: Path, spec: dict[str, object], device: dict[str, object], mark: str, timeout: float = 30) -> str:
    """The fake board's log once `mark` is in it (or the firmware has exited), the firmware stopped."""
    proc, log = launch(workdir, spec, device)
    try:
        wait_until(lambda: mark in log.read_text() or proc.poll() is not None, timeout, log.read_text)
    finally:
        proc.kill()
        proc.wait()
    return log.read_text()


def test_a_stop_at_start_up_never_starts_the_watchdog(tmp_path: Path) -> None:
    proc, log = launch(tmp_path, {"wdt": True}, {"storage": str(tmp_path / "missing-dir" / "siskin.store")})
    assert proc.wait(30) == 2
    text = log.read_text()
    assert "cannot be opened" in text, text
    # Before: "FAKE WDT started 8000" and "watchdog started (8000 ms)" came
    # first, and 8 s later a board reset itself into the same stop.
    assert "FAKE WDT" not in text and "watchdog started" not in text, text


def test_the_watchdog_starts_once_nothing_can_stop_the_start(tmp_path: Path) -> None:
    text = log_until(tmp_path, {"wdt": True}, {}, "listening on")
    assert text.index("FAKE WDT started 8000") < text.index("listening on"), text


def test_a_radio_that_does_not_start_is_reported_and_tried_again_without_an_address(tmp_path: Path) -> None:
    text = log_until(tmp_path, {"wdt": True, "radio": "dead"}, {"host": "0.0.0.0"}, "trying again in 2 s", timeout=60)
    assert "trying again in 1 s" in text and "trying again in 2 s" in text, text
    assert "access point 'siskin-setup' did not come up" in text, text
    # One start of the radio per attempt. Before: four (active(True), then
    # config() on the active interface: down and up, then active(False)).
    starts = text.count("[FAKE CYW43] Failed to start CYW43")
    assert starts == text.count("did not come up") and starts >= 2, text
    # Before: "Wi-Fi: access point 'siskin-setup' up, address 0.0.0.0" and
    # "listening on 0.0.0.0:1883" with no interface up.
    # (The security warning "listening on 0.0.0.0 (not loopback-only) without
    # users" is about the config; the shell's line would name the port.)
    assert "address 0.0.0.0" not in text and " up, address" not in text, text
    assert "listening on 0.0.0.0:" not in text, text


def test_a_radio_that_starts_serves_on_the_access_point(tmp_path: Path) -> None:
    text = log_until(tmp_path, {"wdt": True, "radio": "ok"}, {"host": "0.0.0.0"}, "listening on 0.0.0.0:")
    assert "access point 'siskin-setup' up, address 192.168.4.1" in text, text
    assert "listening on 0.0.0.0:" in text, text


def test_a_loopback_listener_without_a_bridge_does_not_wait_for_wi_fi(tmp_path: Path) -> None:
    # (The shell's line, "listening on HOST:PORT"; the Wi-Fi line says "listening on loopback".)
    text = log_until(tmp_path, {"wdt": True, "radio": "dead"}, {"host": "127.0.0.1"}, "listening on 127.0.0.1:")
    assert "Wi-Fi: not brought up (listening on loopback 127.0.0.1 only" in text, text
    assert "CYW43" not in text and "listening on 127.0.0.1:" in text, text


def test_a_station_whose_radio_does_not_start_is_not_waited_for(tmp_path: Path) -> None:
    device = {"host": "0.0.0.0", "wifi_ssid": "home", "wifi_password": "secret", "wifi_attempts": 2}
    text = log_until(tmp_path, {"wdt": True, "radio": "dead"}, device, "trying again in 1 s", timeout=60)
    first = text[: text.index("trying again in 1 s")]
    # The driver refuses the join (EPERM): no join is under way, so no
    # wifi_timeout wait and no disconnect() (which would start the radio).
    assert first.count("connect failed: OSError(1") == 2, text
    assert "'home' unreachable after 2 attempts" in first, text
    # The radio started once for the station, once for the AP. Before: the
    # station's two disconnects and active(False), the AP's four: 8.
    assert first.count("[FAKE CYW43] Failed to start CYW43") == 2, text
    assert " up, address" not in text, text

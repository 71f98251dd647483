"""A config file with a mistake, end to end: the host's TOML through `siskin`,
the board's JSON (device config and board file) through the firmware under
the MicroPython unix port. Both go through the one validator of
common/broker/settings.py, so a typo, a wrong type and an out-of-range value get
the same one-line message on both: the file, the table, the key, the bad
value and what it wants (tests/core/test_settings.py tests it alone)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from common.broker.outbox import QUEUED_COST
from common.broker.settings import LIMITS, LIMITS_DOC, new_settings
from common.store.kvlog import SECTOR_HEADER_SIZE
from cpython_host.config import load_config
from tests.host.broker_proc import REPO_ROOT, run_cli
from tests.host.upy_broker_proc import micropython

MISTAKES = [
    # (limits, server, the words the message must hold)
    ({"max_conections": 5}, {}, ["limits", "unknown key 'max_conections'", "did you mean 'max_connections'?"]),
    ({"max_inflight": "16"}, {}, ["limits", "max_inflight = '16'", "wants an integer 1..65535"]),
    ({"topic_alias_maximum": 70000}, {}, ["limits", "topic_alias_maximum = 70000", "wants an integer 0..65535"]),
    ({}, {"shutdown_timeout": "soon"}, ["server", "shutdown_timeout = 'soon'", "wants a number >= 0"]),
    ({}, {"close_linger": -1}, ["server", "close_linger = -1", "wants a number >= 0"]),
]


def toml_table(name: str, values: dict[str, Any]) -> str:
    return f"[{name}]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in values.items())


def run_firmware(config: Path) -> subprocess.CompletedProcess[str]:
    main = REPO_ROOT / "firmware" / "main.py"
    return subprocess.run(
        [micropython(), str(main), "--config", str(config), "--port", "0"],
        cwd=main.parent,
        env=dict(os.environ, MICROPYPATH=".frozen"),
        capture_output=True,
        text=True,
        timeout=30,
    )


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text  # one line, no traceback
    return lines[0]


@pytest.mark.parametrize(("limits", "server", "words"), MISTAKES)
def test_host_toml(tmp_path: Path, limits: dict[str, Any], server: dict[str, Any], words: list[str]) -> None:
    cfg = tmp_path / "site.toml"
    cfg.write_text(toml_table("limits", limits) + toml_table("server", server))
    proc = run_cli("--config", str(cfg), "--port", "0")
    assert proc.returncode == 2, proc.stderr
    line = one_line(proc.stderr)
    assert line.startswith(f"siskin: config error: {cfg}: [{words[0]}]: "), line
    for word in words[1:]:
        assert word in line, line


@pytest.mark.parametrize(("limits", "server", "words"), MISTAKES)
def test_board_json(tmp_path: Path, limits: dict[str, Any], server: dict[str, Any], words: list[str]) -> None:
    board = tmp_path / "myboard.json"
    board.write_text(json.dumps({"_about": "a comment", "limits": limits, "server": server}))
    device = tmp_path / "siskin.json"
    device.write_text(json.dumps({"board": str(board), "host": "127.0.0.1"}))
    proc = run_firmware(device)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = one_line(proc.stdout)
    assert line.startswith(f"ERROR siskin: config: {board}: {words[0]}: "), line
    for word in words[1:]:
        assert word in line, line


@pytest.mark.parametrize(
    ("device", "words"),
    [
        ({"log_levl": "info"}, ["unknown key 'log_levl'", "did you mean 'log_level'?", "docs/boards.md"]),
        ({"wifi_attempts": "6"}, ["wifi_attempts = '6'", "wants an integer >= 0"]),
        ({"port": 70000}, ["port = 70000", "wants an integer 0..65535"]),
        ({"log_level": "loud"}, ["log_level = 'loud'", "wants one of debug, info, warning, error"]),
        ({"limits": {"max_retaind": 1}}, ["limits: unknown key 'max_retaind'", "did you mean 'max_retained'?"]),
    ],
)
def test_device_json(tmp_path: Path, device: dict[str, Any], words: list[str]) -> None:
    path = tmp_path / "siskin.json"
    path.write_text(json.dumps({"board": "rp2040_picow", "host": "127.0.0.1", **device}))
    proc = run_firmware(path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = one_line(proc.stdout)
    assert line.startswith(f"ERROR siskin: config: {path}: "), line
    for word in words:
        assert word in line, line


def test_deploy_refuses_what_the_board_would_refuse(tmp_path: Path) -> None:
    # tools/deploy checks the device config with the firmware's validator, so
    # a typo is caught on the desk, not after the board has rebooted into it.
    config = tmp_path / "siskin.json"
    config.write_text(json.dumps({"board": "esp32", "log_levl": "info"}))
    dist = tmp_path / "dist"
    for name in ("common", "firmware", "boards"):
        (dist / name).mkdir(parents=True)
    for name in ("main.py", "boot.py"):
        (dist / name).write_text("")
    args = ["--board", "esp32", "--dist", str(dist), "--port", "/dev/ttyUSB0", "--config", str(config), "--dry-run"]
    proc = subprocess.run(
        [sys.executable, "-m", "tools.deploy", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = one_line(proc.stderr)
    assert line.startswith(f"deploy: {config}: unknown key 'log_levl'; did you mean 'log_level'?"), line


# ---------------------------------------------------------------------------
# The shipped settings files size queues for what they run on (docs/limits.md,
# "Queue sizing"): the host's by bytes, the boards' by their preallocated
# pools and what their flash store holds.

HOST_FILES = [None, "boards/linux.toml", "boards/rpi.toml"]  # None: the built-in defaults

def raw_partition(kib: int) -> int:
    """What a raw flash partition of `kib` KiB stores (4 KiB sectors, 2 kept in reserve)."""
    return (kib // 4 - 2) * (4096 - SECTOR_HEADER_SIZE)


# Each board file with the smallest store it is sized for and the largest
# pools it may preallocate: the small boards' 256 KiB raw flash partition of
# docs/boards.md (a littlefs log, the default, holds more: the Pico W's 848
# KiB file system leaves room for twice this, the log compacting at twice its
# live data, beside the code) and counts their heaps hold; the PSRAM module's
# 1 MiB partition and a gateway's counts in its megabytes of heap.
BOARD_FILES = {
    "boards/esp32.json": (raw_partition(256), 64, 128),
    "boards/rp2040_picow.json": (raw_partition(256), 64, 128),
    "boards/esp32_psram.json": (raw_partition(1024), 256, 1024),
}
# Store bytes per queued copy beyond its topic and payload (message and
# delivery records, encrypted), and per retained message beyond its data:
# both well under what max_queued_total_bytes charges (QUEUED_COST).
STORE_OVERHEAD = 160


def test_linux_toml_documents_every_limit() -> None:
    text = (REPO_ROOT / LIMITS_DOC).read_text()
    missing = [e[0] for e in LIMITS if f"\n{e[0]} = " not in text]
    assert not missing, f"{LIMITS_DOC} does not set and explain {missing}"


@pytest.mark.parametrize("path", HOST_FILES)
def test_host_settings_bind_by_bytes_and_refuse(path: str | None) -> None:
    s = load_config(None if path is None else str(REPO_ROOT / path)).settings
    # Nothing acknowledged is dropped for a full queue.
    assert s.queue_full == "refuse"
    # The total binds before any count: every queued copy is charged at
    # least QUEUED_COST, so no more than total / QUEUED_COST copies fit.
    copies = s.max_queued_total_bytes // QUEUED_COST
    assert s.max_queued_messages >= copies, "max_queued_messages would bind before the byte budgets"
    assert s.max_messages >= copies + s.max_retained, "max_messages would be the cliff before the byte budgets"
    # One session (an uplink's bridge) may hold at least half of the total.
    assert 2 * s.max_queued_bytes >= s.max_queued_total_bytes * 3 // 4 or s.max_queued_bytes >= 32 << 20


@pytest.mark.parametrize("path", BOARD_FILES)
def test_board_settings_fit_their_store(path: str) -> None:
    store, queued_cap, messages_cap = BOARD_FILES[path]
    limits = json.loads((REPO_ROOT / path).read_text())["limits"]
    s = new_settings(limits, path)
    assert s.queue_full == "refuse"
    # The preallocated counts stay the binding limits in RAM ...
    assert s.max_queued_messages <= queued_cap and s.max_messages <= messages_cap
    # ... and the budget of all queues, which charges more per copy than the
    # store writes, keeps queues and retained messages inside the store.
    retained = s.max_retained_bytes + s.max_retained * STORE_OVERHEAD
    assert s.max_queued_total_bytes + retained <= store, (s.max_queued_total_bytes, retained, store)
    # It does not bind before the pools for small messages (the RAM table of docs/boards.md).
    queued = (s.max_messages - s.max_retained) * (QUEUED_COST + 128)
    assert s.max_queued_total_bytes >= queued


def test_linux_toml_bridge_example_documents_every_key_and_loads(tmp_path: Path) -> None:
    from common.bridge.settings import BRIDGE, TOPIC

    text = (REPO_ROOT / LIMITS_DOC).read_text()
    block = text[text.index("\n# [[bridge]]\n") :]
    missing = [e[0] for e in BRIDGE + TOPIC if f"\n# {e[0]} = " not in block]
    assert not missing, f"{LIMITS_DOC}'s [[bridge]] example does not set and explain {missing}"
    # Uncommented (its comments dropped), the example is a valid config.
    lines = [line[2:] for line in block.splitlines() if line.startswith("# ") and not line.startswith("# # ")]
    lines = [line for line in lines if line.startswith("[") or " = " in line]
    path = tmp_path / "bridge.toml"
    path.write_text("\n".join(lines) + "\n")
    (b,) = load_config(str(path)).bridges
    assert (b.name, b.addresses[1], b.topics[0]["remote_prefix"]) == (
        "cloud",
        "mqtt2.example.com:8883",
        "edge-1/sensors/",
    )


def test_linux_toml_mqttsn_example_documents_every_key_and_loads(tmp_path: Path) -> None:
    from common.mqttsn.settings import SN_LISTENER

    text = (REPO_ROOT / LIMITS_DOC).read_text()
    start = text.index('\n# protocol = "mqtt-sn"\n')
    block = text[start : text.index("\n\n", start)]
    missing = [e[0] for e in SN_LISTENER if f"\n# {e[0]} = " not in block]
    assert not missing, f"{LIMITS_DOC}'s MQTT-SN listener example does not set and explain {missing}"
    lines = [line[2:] for line in block.splitlines() if line.startswith("# ") and not line.startswith("# # ")]
    path = tmp_path / "sn.toml"
    path.write_text("[[listener]]\n" + "\n".join(line for line in lines if " = " in line) + "\n")
    (lst,) = load_config(str(path)).listeners()
    assert (lst.mqttsn, lst.port, lst.predefined["1"]) == (True, 1884, "plant/alarm")


def test_shared_keys_mean_the_same_on_both_shells() -> None:
    # The security, TLS and common server keys come from one schema each
    # (common/broker/settings.py): the host's tables and the board's device
    # config and board file hold the same entries, the host's server
    # defaults where HOST_SERVER_DEFAULTS says (and why, above it).
    from common.broker import settings
    from cpython_host import config
    from firmware import boardcfg

    host = {e[0]: e for e in config.SERVER + config.LISTENER + config.SECURITY}
    board = {e[0]: e for e in boardcfg.SERVER + boardcfg.DEVICE}
    for entry in settings.SECURITY + settings.TLS + settings.SERVER:
        name = entry[0]
        assert board[name] == entry, name
        expected = settings.with_defaults((entry,), settings.HOST_SERVER_DEFAULTS)[0]
        assert host[name] == expected, name
    assert set(settings.HOST_SERVER_DEFAULTS) <= {e[0] for e in settings.SERVER}


def test_a_relative_file_name_is_taken_from_the_config_files_directory(tmp_path: Path) -> None:
    from common.broker.settings import resolve
    from firmware import boardcfg

    assert resolve("/etc/siskin", "users") == "/etc/siskin/users"
    assert resolve("/etc/siskin/", "/abs/users") == "/abs/users"
    assert resolve("", "users") == resolve(".", "users") == "users"
    device = tmp_path / "siskin.json"
    device.write_text(json.dumps({"password_file": "users", "acl_file": "/abs/acl"}))
    cfg = boardcfg.load_device(str(device))
    assert cfg["password_file"] == str(tmp_path / "users")
    assert cfg["acl_file"] == "/abs/acl"


def test_linux_toml_listener_rates_example_documents_every_key_and_loads(tmp_path: Path) -> None:
    # Its public listener sets every per-listener rate key; uncommented, the
    # example loads: the listeners' own rates on Limits.per_listener.
    from common.broker.settings import LISTENER_RATE_KEYS

    text = (REPO_ROOT / LIMITS_DOC).read_text()
    start = text.index("\n# Rate limits per listener")
    block = text[start : text.index("\n\n", start)]
    missing = [name for name in LISTENER_RATE_KEYS if f"\n# {name} = " not in block]
    assert not missing, f"{LIMITS_DOC}'s per-listener rates example does not set and explain {missing}"
    lines = [line[2:] for line in block.splitlines() if line.startswith("# ") and not line.startswith("# # ")]
    path = tmp_path / "rates.toml"
    path.write_text("\n".join(line for line in lines if line.startswith("[") or " = " in line) + "\n")
    cfg = load_config(str(path))
    assert cfg.settings.per_listener[0]["rate_messages"] == 20
    off = {"rate_messages": 0, "rate_bytes": 0, "rate_subscribes": 0, "rate_connects": 0}
    assert cfg.settings.per_listener[1] == off

"""Installed and run as a service: the wheel, `siskin --version`, systemd's
readiness protocol (a real NOTIFY_SOCKET), SIGHUP's reload of the log level,
and contrib/systemd/siskin.service checked by systemd-analyze.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
import zipfile
from pathlib import Path

import pytest

from common import VERSION
from cpython_host.operations import sdnotify
from tests.conftest import REPO_ROOT, require, tool_path
from tests.host.broker_proc import RawClient, run_cli, wait_until

UNIT = REPO_ROOT / "contrib" / "systemd" / "siskin.service"
PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())


def fields(sock: socket.socket) -> dict[str, str]:
    data = sock.recv(4096).decode()
    return dict(line.split("=", 1) for line in data.split("\n"))


def start(cmd: list[str], log: Path, notify: socket.socket, cwd: Path = REPO_ROOT) -> subprocess.Popen[bytes]:
    env = dict(os.environ, NOTIFY_SOCKET=notify.getsockname(), PYTHONUNBUFFERED="1")
    with log.open("wb") as f:
        return subprocess.Popen(cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT, env=env)


def ready_then_port(proc: subprocess.Popen[bytes], log: Path, notify: socket.socket) -> int:
    """Wait for READY=1; the port the log names must accept at that moment."""
    try:
        msg = fields(notify)
        while "READY" not in msg:  # a store's restore first says what it does (test_store_monitor.py)
            assert msg["STATUS"].startswith("store: ") and msg["EXTEND_TIMEOUT_USEC"] == "30000000", msg
            msg = fields(notify)
    except TimeoutError:
        proc.kill()
        raise AssertionError(f"no READY=1:\n{log.read_text()}") from None
    assert msg["READY"] == "1" and msg["STATUS"].startswith("listening on 127.0.0.1:"), msg
    port = int(msg["STATUS"].rsplit(":", 1)[1])
    socket.create_connection(("127.0.0.1", port), timeout=1).close()  # already accepting
    return port


def stop(proc: subprocess.Popen[bytes], notify: socket.socket) -> None:
    proc.send_signal(signal.SIGTERM)
    assert fields(notify) == {"STOPPING": "1"}
    assert proc.wait(15) == 0


def test_sd_notify_ready_reloading_stopping_and_log_level_reload(tmp_path: Path, notify_socket: socket.socket) -> None:
    config = tmp_path / "siskin.toml"
    # [server] data_dir, relative: from the file's directory.
    config.write_text('[server]\ndata_dir = "state"\n[log]\nlevel = "info"\n[[listener]]\nport = 0\n')
    log = tmp_path / "broker.log"
    proc = start([sys.executable, "-m", "cpython_host", "--config", str(config)], log, notify_socket)
    try:
        port = ready_then_port(proc, log, notify_socket)
        assert f"persistent state in {tmp_path / 'state'} " in log.read_text()
        assert (tmp_path / "state" / "siskin.log").is_file()
        RawClient(port).connect("before")
        assert "connection #" not in log.read_text()  # a debug line: not at level info
        # SIGHUP: RELOADING=1 (with the monotonic time systemd >= 253 wants), then READY=1.
        config.write_text('[log]\nlevel = "debug"\n[[listener]]\nport = 0\n')
        proc.send_signal(signal.SIGHUP)
        msg = fields(notify_socket)
        assert msg["RELOADING"] == "1" and abs(int(msg["MONOTONIC_USEC"]) / 1e6 - time.monotonic()) < 30, msg
        assert fields(notify_socket) == {"READY": "1", "STATUS": "reloaded"}
        text = log.read_text()
        assert re.search(
            r"SIGHUP: reloaded users, ACL and anonymous access \(\[security\]\); log level info -> debug", text
        ), text
        RawClient(port).connect("after")
        wait_until(lambda: "connection #" in log.read_text(), 5, lambda: log.read_text())  # debug now on
        stop(proc, notify_socket)
    finally:
        proc.kill()
        proc.wait(10)


def test_log_level_flag_beats_the_file_on_sighup(tmp_path: Path, notify_socket: socket.socket) -> None:
    config = tmp_path / "siskin.toml"
    config.write_text('[log]\nlevel = "debug"\n[[listener]]\nport = 0\n')
    log = tmp_path / "broker.log"
    cmd = [sys.executable, "-m", "cpython_host", "--config", str(config), "--log-level", "warning"]
    proc = start(cmd, log, notify_socket)
    try:
        ready_then_port(proc, log, notify_socket)
        proc.send_signal(signal.SIGHUP)
        assert fields(notify_socket)["RELOADING"] == "1"
        assert fields(notify_socket)["READY"] == "1"
        stop(proc, notify_socket)
        # At level warning the reload's info line is not written; nothing at info is.
        assert " INFO " not in log.read_text()
    finally:
        proc.kill()
        proc.wait(10)


def test_notify_abstract_socket_and_no_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"siskin-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(5)
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        assert sdnotify.notify("READY=1", "STATUS=x")
        assert sock.recv(100) == b"READY=1\nSTATUS=x"
    monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)  # nobody listens any more: logged, not raised
    assert not sdnotify.notify("READY=1")
    monkeypatch.delenv("NOTIFY_SOCKET")
    assert not sdnotify.notify("READY=1")  # not run by systemd


def test_version_from_the_tree() -> None:
    assert PYPROJECT["project"]["version"] == VERSION  # the one `siskin --version` falls back to
    proc = run_cli("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"siskin {VERSION}"


def test_unit_file_verifies(tmp_path: Path) -> None:
    text = UNIT.read_text()
    for line in ("Type=notify", "Restart=on-failure", "ProtectSystem=strict", "StateDirectory=siskin",
                 "ConfigurationDirectory=siskin", "NoNewPrivileges=yes", "ExecReload=/bin/kill -HUP $MAINPID"):  # fmt: skip
        assert line in text.splitlines(), line
    exec_start = re.search(r"^ExecStart=(\S+) (.*)$", text, re.M)
    assert exec_start is not None and exec_start.group(1) == "/usr/local/bin/siskin"
    # The options the unit passes are the command's.
    assert "--config /etc/siskin/siskin.toml --data-dir /var/lib/siskin" == exec_start.group(2)
    analyze = tool_path("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (apt-get install systemd): the unit is not verified")
    # verify wants ExecStart's program to exist: a stand-in for the installed command.
    stand_in = tmp_path / "siskin"
    stand_in.write_text(f'#!/bin/sh\nexec {sys.executable} -m cpython_host "$@"\n')
    stand_in.chmod(0o755)
    unit = tmp_path / "siskin.service"
    unit.write_text(text.replace("/usr/local/bin/siskin", str(stand_in)))
    proc = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    # Unknown keys and bad values are only warnings to verify: none may appear.
    assert proc.returncode == 0 and proc.stderr.strip() == "", proc.stderr


def source_copy(dest: Path) -> Path:
    """What a wheel (or pipx) is made of, copied to `dest`: the two packages, pyproject.toml, README.md."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("common", "cpython_host"):
        shutil.copytree(REPO_ROOT / name, dest / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO_ROOT / name, dest / name)
    return dest


def test_wheel_installs_the_siskin_command(tmp_path: Path, notify_socket: socket.socket) -> None:
    """python -m build makes a wheel (what pipx installs); in a fresh venv it
    gives the `siskin` command with every module, data file and dependency."""
    require("build", importlib.util.find_spec("build"), "pip install build==1.6.1 (make test does)")
    # A copy of what the wheel is made of, so the build leaves nothing in the tree;
    # plus a probe under cpython_host/operations/status_page/, whose files must come along.
    src = source_copy(tmp_path / "src")
    (src / "cpython_host" / "operations" / "status_page" / "sub").mkdir(parents=True, exist_ok=True)
    (src / "cpython_host" / "operations" / "status_page" / "sub" / "probe.css").write_text("/* probe */\n")
    before = set(src.rglob("*"))
    built = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(tmp_path / "dist"), str(src)],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    assert set(src.rglob("*")) == before  # nothing left in the tree (no siskin.egg-info/, build/)
    (wheel,) = (tmp_path / "dist").glob("siskin-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    wanted = {
        p.relative_to(src).as_posix()
        for name in ("common", "cpython_host")
        for p in (src / name).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert wanted <= names, sorted(wanted - names)
    assert "cpython_host/operations/status_page/sub/probe.css" in names
    # A fresh venv; pip from this one installs into it (its cache serves the dependencies).
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    py = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(py), "--disable-pip-version-check", "-q"]
    installed = subprocess.run([*pip, "install", str(wheel)], capture_output=True, text=True, timeout=180)
    assert installed.returncode == 0, installed.stderr
    siskin = venv / "bin" / "siskin"
    version = subprocess.run([str(siskin), "--version"], capture_output=True, text=True, timeout=30, cwd=tmp_path)
    assert version.stdout.strip() == f"siskin {PYPROJECT['project']['version']}", version.stderr
    # Started from elsewhere than the tree, it serves and reports ready.
    log = tmp_path / "installed.log"
    proc = start([str(siskin), "--port", "0"], log, notify_socket, cwd=tmp_path)
    try:
        port = ready_then_port(proc, log, notify_socket)
        assert RawClient(port).connect("installed") == b"\x00\x00"
        stop(proc, notify_socket)
    finally:
        proc.kill()
        proc.wait(10)
    if sys.platform == "linux" and platform.machine() in ("x86_64", "aarch64"):
        assert "event loop: uvloop" in log.read_text()  # the dependency came along

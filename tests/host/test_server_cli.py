"""The command line: --help, config errors, board files, data dir, SIGTERM/SIGINT."""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import pytest

from common.broker.settings import LIMITS
from tests.host.broker_proc import REPO_ROOT, BrokerProcess, RawClient, publish_packet, run_cli

BOARDS = ("linux", "rpi")


def test_help_teaches() -> None:
    proc = run_cli("--help")
    assert proc.returncode == 0
    out = proc.stdout
    for option in ("--host", "--port", "--config", "--data-dir", "--log-level", "--event-loop"):
        assert option in out
    assert "default 127.0.0.1" in out and "default 1883" in out
    for option in ("--store-key-file", "--wipe-store", "SISKIN_STORE_KEY", "store_sync", "store-key"):
        assert option in out
    assert "examples:" in out and "--config boards/linux.toml" in out
    assert "$SYS" in out and "SIGTERM" in out


def test_version() -> None:
    proc = run_cli("--version")
    assert proc.returncode == 0 and proc.stdout.startswith("siskin ")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[limits]\nmax_conections = 5\n", ["[limits]", "max_conections", "did you mean 'max_connections'"]),
        ("[limits]\nmax_connections = 'many'\n", ["max_connections", "integer"]),
        ("[limits]\nmax_connections = -1\n", ["max_connections", "integer >= 0"]),
        ("[limits]\nallow_mqtt31 = 1\n", ["allow_mqtt31", "true or false"]),
        ("[limits]\nmax_inflight = 0\n", ["max_inflight", "1..65535"]),
        ("[limits]\ndeny_subscribe = [1]\n", ["deny_subscribe", "list of strings"]),
        ("[limits]\nscram_users = ['nonsense']\n", ["[limits]", "SCRAM"]),
        ("[limit]\nmax_connections = 5\n", ["[limit]", "did you mean 'limits'"]),
        ("[server]\nprot = 1\n", ["[server]", "prot", "did you mean 'port'"]),
        ("[server]\nport = 70000\n", ["port", "0..65535"]),
        ("[log]\nlevel = 'loud'\n", ["[log]", "loud", "debug, info, warning, error"]),
        ("[limits\nmax_connections = 5\n", ["not valid TOML", "line 1"]),
    ],
)
def test_bad_config_one_line_error(tmp_path: Path, text: str, expected: list[str]) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    proc = run_cli("--config", str(cfg), "--port", "0")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr  # one line, no traceback
    assert lines[0].startswith("siskin: config error: " + str(cfg))
    for word in expected:
        assert word in lines[0]


def test_missing_config_file(tmp_path: Path) -> None:
    proc = run_cli("--config", str(tmp_path / "nope.toml"))
    assert proc.returncode == 2
    assert "nope.toml" in proc.stderr and "no such config file" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_bad_flag_exit_2() -> None:
    proc = run_cli("--log-level", "loud")
    assert proc.returncode == 2
    assert "--log-level" in proc.stderr


@pytest.mark.parametrize("board", BOARDS)
def test_board_file_names_every_setting(board: str) -> None:
    path = REPO_ROOT / "boards" / f"{board}.toml"
    text = path.read_text()
    doc = tomllib.loads(text)
    assert set(doc["limits"]) == {entry[0] for entry in LIMITS}
    lines = text.splitlines()
    for name, *_ in LIMITS:
        i = next(i for i, line in enumerate(lines) if line.startswith(name + " ="))
        assert lines[i - 1].startswith("#"), f"{board}.toml: {name} has no comment"


@pytest.mark.parametrize("board", BOARDS)
def test_board_file_starts_a_broker(tmp_path: Path, board: str) -> None:
    src = (REPO_ROOT / "boards" / f"{board}.toml").read_text()
    b = BrokerProcess(tmp_path)
    b.config_path.write_text(src)  # the real board file (the CLI's --port 0 overrides its port)
    with b:
        b.wait_log(rf"settings: {b.config_path}")
        c = RawClient(b.port)
        assert c.connect("board") == b"\x00\x00"
        c.close()
        assert b.stop() == 0


def test_data_dir_created_and_store_opened(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path, log_level="info") as b:
        assert (tmp_path / "data").is_dir()
        b.wait_log(r"persistent state in .*data \(store_sync = always\)")
        assert (tmp_path / "data" / "siskin.log").is_file()
        assert b.stop() == 0


def test_port_in_use(tmp_path: Path) -> None:
    """The error names the process that holds the port (seen through /proc) and what to do."""
    with BrokerProcess(tmp_path / "first") as first:
        proc = run_cli("--port", str(first.port))
        assert proc.returncode == 1
        assert f"cannot listen on 127.0.0.1:{first.port}: " in proc.stderr
        assert "address already in use" in proc.stderr.lower()
        assert first.proc is not None
        assert f"(pid {first.proc.pid}) listens on port {first.port}" in proc.stderr
        assert "systemctl stop mosquitto" in proc.stderr and "--port" in proc.stderr


def test_data_dir_without_write_permission_names_the_user(tmp_path: Path) -> None:
    """The store's error says which user the broker runs as and how to give it the directory."""
    # Under a directory anyone may enter (pytest's own are private to their user):
    # the broker must find the data directory and fail to write into it.
    top = Path(tempfile.mkdtemp(dir=tmp_path if os.geteuid() else "/tmp"))
    top.chmod(0o755)
    data = top / "data"
    data.mkdir()
    data.chmod(0o555 if os.geteuid() else 0o755)  # its owner (root) may write; the broker's user not
    cmd = [sys.executable, "-m", "cpython_host", "--port", "0", "--data-dir", str(data)]
    user = pwd.getpwuid(os.geteuid()).pw_name
    kw: dict[str, object] = {}
    if os.geteuid() == 0:  # root may write anywhere: run as nobody, as a service user would be
        # (with the system's Python: the venv's may live under /root, which nobody cannot enter)
        if not os.access("/usr/bin/python3", os.X_OK):
            pytest.skip("as root, the test runs the broker as nobody with /usr/bin/python3")
        cmd[0] = "/usr/bin/python3"
        user = "nobody"
        nobody = pwd.getpwnam(user)
        kw = {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": []}
        # ... and from a copy of the code nobody can read: the tree itself may lie under a
        # directory only root enters (a clone in /root, or test-repeat's mkdtemp).
        cwd = top / "src"
        for package in ("common", "cpython_host"):
            shutil.copytree(REPO_ROOT / package, cwd / package, ignore=shutil.ignore_patterns("__pycache__"))
    else:
        cwd = REPO_ROOT
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=20, **kw)  # type: ignore[call-overload]
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("siskin: ")]  # one line says it all
    assert line.startswith(f"siskin: store in {data}: Permission denied")
    assert f"Siskin runs as the user {user} (uid " in line
    assert f"`sudo chown -R {user}: {data}`" in line
    shutil.rmtree(top)


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        (["-c", "/etc/mosquitto/mosquitto.conf"], "--mosquitto-conf FILE"),
        (["--config-file=/etc/mosquitto/mosquitto.conf"], "--mosquitto-conf FILE"),
        (["-p", "1884"], "--port N"),
        (["-v"], "--log-level debug"),
        (["-d"], "contrib/systemd/siskin.service"),
    ],
)
def test_mosquitto_habits_get_a_hint(args: list[str], hint: str) -> None:
    proc = run_cli(*args)
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"siskin: {args[0]} is Mosquitto's option: ") and hint in line, line


def test_unknown_command_lists_the_commands() -> None:
    proc = run_cli("pasword", "x")
    assert proc.returncode == 2
    assert "no command 'pasword': did you mean 'siskin passwd'?" in proc.stderr
    for name in ("serve", "passwd", "ctl", "convert-mosquitto-conf"):
        assert name in proc.stderr


def test_every_command_has_help_that_teaches() -> None:
    from cpython_host.cli import COMMANDS

    listed = run_cli("--help").stdout
    for name, _, _, what in COMMANDS:
        assert f"siskin {name}" in listed and what in listed  # siskin --help lists it
        proc = run_cli(name, "--help")
        assert proc.returncode == 0 and proc.stdout.startswith("usage: siskin"), (name, proc.stderr)
        assert len(proc.stdout.splitlines()) > 5, (name, proc.stdout)


def test_serve_is_the_default_command(tmp_path: Path) -> None:
    proc = run_cli("serve", "--version")
    assert proc.returncode == 0 and proc.stdout == run_cli("--version").stdout


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_shutdown(tmp_path: Path, sig: signal.Signals) -> None:
    # close_linger bounds how long shutdown waits for these clients (which only
    # look at their sockets after the broker has exited) to close their side.
    with BrokerProcess(tmp_path, log_level="info", server={"close_linger": 0.5}) as b:
        clients = [RawClient(b.port) for _ in range(3)]
        for i, c in enumerate(clients):
            c.connect(f"shut-{i}")
        idle = RawClient(b.port)  # accepted, CONNECT not sent yet
        assert b.proc is not None
        b.proc.send_signal(sig)
        assert b.proc.wait(10) == 0
        for c in [*clients, idle]:
            assert c.closed_within(3)  # every client sees the close
            c.close()
        log = b.log_text()
        assert f"shutting down ({sig.name})" in log
        assert "shutdown complete" in log
        assert "Traceback" not in log


def test_shutdown_with_a_client_that_does_not_read(tmp_path: Path) -> None:
    """A client with a full socket cannot hold up shutdown beyond its bound."""
    b = BrokerProcess(tmp_path, limits={"sys_interval": 0}, server={"shutdown_timeout": 1.0, "close_linger": 1.0})
    with b:
        slow = RawClient(b.port)
        slow.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        slow.connect("stuck")
        slow.subscribe("stuck/#", 0)
        pub = RawClient(b.port)
        pub.connect("stuck-pub")
        chunk = publish_packet("stuck/t", b"z" * 60000) * 20
        for _ in range(10):
            pub.send(chunk)
        assert b.stop(timeout=10) == 0
        assert "shutdown complete" in b.log_text()
        slow.close()
        pub.close()


def test_scram_user_line_is_accepted_by_the_broker(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "cpython_host", "scram-user", "alice", "--password-stdin"],
        cwd=REPO_ROOT,
        input="s3cret\n",
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert proc.returncode == 0, proc.stderr
    line = proc.stdout.strip()
    user, salt, iterations, stored, server = line.split(":")
    assert (user, iterations) == ("alice", "4096") and salt and stored and server
    assert "s3cret" not in line
    with BrokerProcess(tmp_path, limits={"scram_users": [line]}) as b:
        assert b.stop() == 0


def test_event_loop_uvloop_demanded_but_missing() -> None:
    # As on a machine without uvloop: its import fails.
    code = (
        "import sys; sys.modules['uvloop'] = None; from cpython_host.__main__ import main; "
        "sys.exit(main(['--port', '0', '--event-loop', 'uvloop']))"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=20)
    assert proc.returncode == 2
    assert "uvloop is not installed" in proc.stderr


def test_ctl_without_a_password_and_no_terminal_says_how() -> None:
    """`siskin ctl --user alice ... </dev/null`, SISKIN_CTL_PASSWORD unset: one clear line, no traceback."""
    env = {k: v for k, v in os.environ.items() if k != "SISKIN_CTL_PASSWORD"}
    proc = subprocess.run(
        [sys.executable, "-m", "cpython_host", "ctl", "--user", "alice", "clients"],
        cwd=REPO_ROOT, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=20, env=env,
    )  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip() == (
        "siskin ctl: --user alice needs a password and stdin is not a terminal to ask on: "
        "set SISKIN_CTL_PASSWORD, or give it on stdin's first line with --password-stdin"
    )


def test_under_the_journal_each_line_carries_its_priority(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """systemd sets JOURNAL_STREAM to the device:inode of the stream it reads: then each line starts
    with "<N>" (syslog priority), so `journalctl -u siskin -p warning` shows the warnings."""
    b = BrokerProcess(tmp_path, log_level="info", security={"allow_anonymous": False})
    b.log_path.write_bytes(b"")  # (start() reopens it: the same inode)
    st = b.log_path.stat()
    monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino}")
    with b:
        assert RawClient(b.port).connect("anon") == b"\x00\x05"  # refused: a warning
        b.wait_log(r"<4>siskin\.core: .*anonymous client refused")
        assert b.stop() == 0
    lines = b.log_text().splitlines()
    assert lines and all(re.match(r"<[2-7]>siskin\.", line) for line in lines), lines
    assert any(line.startswith("<6>siskin.host: ") and " listening on " in line for line in lines)
    assert not re.search(r"^<\d>\d{4}-\d\d-\d\d", b.log_text(), re.M)  # no time stamp: the journal has its own

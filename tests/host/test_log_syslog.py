"""[log] syslog (Mosquitto's log_dest syslog): the broker logs to a syslog socket too.

A datagram socket bound here stands in for /dev/log (rsyslog's and the
journal's socket take the same datagrams): the broker started with
`[log] syslog = "<it>"` sends "<PRI>siskin[PID]: LOGGER: text" there, PRI the
facility daemon (3) * 8 + the level's priority (6 info, 4 warning). A path
that is no socket (a typo) refuses the start with one line.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.host.broker_proc import REPO_ROOT, BrokerProcess


@pytest.fixture
def syslog() -> Iterator[tuple[socket.socket, str]]:
    with tempfile.TemporaryDirectory(prefix="sk", dir="/tmp") as d:  # (a socket path: at most 107 bytes)
        path = str(Path(d) / "log")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(path)
        sock.settimeout(15)
        yield sock, path
        sock.close()


def with_syslog(b: BrokerProcess, path: str) -> BrokerProcess:
    b.config_path.write_text(b.config_path.read_text() + f'[log]\nsyslog = "{path}"\n')
    return b


def test_lines_go_to_syslog_with_their_priority(tmp_path: Path, syslog: tuple[socket.socket, str]) -> None:
    sock, path = syslog
    # A bridge to a closed port: a warning within a second.
    bridge = {
        "name": "cloud",
        "addresses": ["127.0.0.1:1"],
        "backoff_min": 0.5,
        "backoff_max": 0.5,
        "topic": [{"pattern": "#"}],
    }
    b = with_syslog(BrokerProcess(tmp_path, log_level="info", bridges=[bridge]), path)
    with b:
        seen: list[str] = []
        while not any("cannot connect to 127.0.0.1:1" in line for line in seen):
            seen.append(sock.recv(65536).decode().rstrip("\x00"))
        pid = b.pid
    lines = "\n".join(seen)
    assert re.search(rf"^<30>siskin\[{pid}\]: siskin\.core: restored 0 sessions", lines, re.M), lines
    assert re.search(
        rf"^<28>siskin\[{pid}\]: siskin\.bridge: bridge cloud: cannot connect to 127\.0\.0\.1:1", lines, re.M
    ), lines
    assert "listening on" in b.log_text()  # stderr as before


def test_a_syslog_path_that_is_no_socket_refuses_the_start(tmp_path: Path) -> None:
    config = tmp_path / "siskin.toml"
    config.write_text(f'[log]\nsyslog = "{tmp_path / "dev-log"}"\n')
    proc = subprocess.run(
        [sys.executable, "-m", "cpython_host", "--config", str(config), "--port", "0"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "siskin: config error: [log] syslog" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr

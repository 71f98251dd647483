"""tools/deploy end to end against a stand-in board: the unix port behind a pty.

The stand-in: `micropython` (unix port) runs its REPL on a pseudo-terminal,
in an empty directory that plays the board's file system; a second pty
(whose path is the --port given to tools/deploy) is relayed to it, so
mpremote talks to a serial device path exactly as it does to a board. The
unix REPL supports the raw REPL and raw-paste mode mpremote uses; what it
cannot do like a board (soft reset at connect, machine.reset at the end,
":" as the file-system root) is listed in docs/boards.md, and the test
deploys with --resume --reset none --remote-dir ./ instead. Then it "boots"
the deployed tree (runs its main.py as a board would) and serves a client.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import tty
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, require, tool_path
from tests.host.broker_proc import Paho
from tests.host.upy_broker_proc import PICOW_HEAP, UpyBrokerProcess, micropython


class StandInBoard:
    """The unix port's REPL on a pty, reachable through another pty's path."""

    def __init__(self, fs_dir: Path) -> None:
        self.fs_dir = fs_dir
        m1, s1 = os.openpty()
        m2, s2 = os.openpty()
        tty.setraw(s1)
        tty.setraw(s2)
        self.proc = subprocess.Popen(
            [micropython()],
            stdin=s1,
            stdout=s1,
            stderr=s1,
            cwd=fs_dir,
            env=dict(os.environ, MICROPYPATH=".frozen"),
        )
        os.close(s1)
        self.fds = (m1, m2, s2)
        self.port = os.ttyname(s2)
        self.running = True
        self.thread = threading.Thread(target=self._relay, daemon=True)
        self.thread.start()

    def _relay(self) -> None:
        m1, m2, _ = self.fds
        while self.running:
            ready, _, _ = select.select([m1, m2], [], [], 0.2)
            try:
                if m1 in ready:
                    os.write(m2, os.read(m1, 4096))
                if m2 in ready:
                    os.write(m1, os.read(m2, 4096))
            except OSError:
                return

    def close(self) -> None:
        if not self.running:
            return
        self.running = False
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self.thread.join(2)
        for fd in self.fds:
            os.close(fd)


@pytest.fixture
def board(tmp_path: Path) -> Iterator[StandInBoard]:
    require("mpremote", tool_path("mpremote"), "pip install mpremote (make test does)")
    fs_dir = tmp_path / "board-fs"
    fs_dir.mkdir()
    b = StandInBoard(fs_dir)
    yield b
    b.close()


def tool(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", f"tools.{name}", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )


def deploy_to(board: StandInBoard, dist: Path, config: Path, *more: str) -> str:
    """tools/deploy to the stand-in (what it cannot do like a board is left out: docs/boards.md); its output."""
    dep = tool(
        "deploy",
        "--board", "unix",
        "--dist", str(dist),
        "--port", board.port,
        "--config", str(config),
        "--resume", "--reset", "none", "--remote-dir", "./",
        *more,
    )  # fmt: skip
    assert dep.returncode == 0, dep.stdout + dep.stderr
    return dep.stdout


def test_deploy_to_stand_in_board_then_boot_it(board: StandInBoard, tmp_path: Path) -> None:
    build = tool("build", "--board", "unix", "--out", str(tmp_path / "dist"))
    assert build.returncode == 0, build.stdout + build.stderr
    config = tmp_path / "my-siskin.json"
    config.write_text(json.dumps({"board": "rp2040_picow", "host": "127.0.0.1", "log_level": "info"}))
    out = deploy_to(board, tmp_path / "dist" / "unix", config)
    assert "mpremote connect " + board.port in out
    fs = board.fs_dir
    assert json.loads((fs / "siskin.json").read_text())["board"] == "rp2040_picow"
    assert (fs / "main.py").is_file() and (fs / "boot.py").is_file()
    deployed = sorted(p.relative_to(fs).as_posix() for p in fs.rglob("*.mpy"))
    built = sorted(
        p.relative_to(tmp_path / "dist" / "unix").as_posix() for p in (tmp_path / "dist" / "unix").rglob("*.mpy")
    )
    assert deployed == built and "common/broker/broker.mpy" in deployed
    for rel in deployed:  # byte for byte over the raw REPL
        assert (fs / rel).read_bytes() == (tmp_path / "dist" / "unix" / rel).read_bytes(), rel
    # --settings: a changed device config and board file, without the code.
    # (A changed main.py in dist/ shows that code is not copied: mpremote
    # skips unchanged files anyway.)
    main_py = tmp_path / "dist" / "unix" / "main.py"
    main_py.write_text(main_py.read_text() + "# changed after the deploy\n")
    config.write_text(
        json.dumps({"board": "rp2040_picow", "host": "127.0.0.1", "log_level": "info", "limits": {"sys_interval": 1}})
    )
    board_file = tmp_path / "dist" / "unix" / "boards" / "rp2040_picow.json"
    changed = json.loads(board_file.read_text())
    changed["_pushed"] = "by --settings"
    board_file.write_text(json.dumps(changed))
    out = deploy_to(board, tmp_path / "dist" / "unix", config, "--settings")
    assert " + cp -r boards :./ + cp " in out and "common" not in out
    assert json.loads((fs / "siskin.json").read_text())["limits"] == {"sys_interval": 1}
    assert json.loads((fs / "boards" / "rp2040_picow.json").read_text())["_pushed"] == "by --settings"
    assert "# changed after the deploy" not in (fs / "main.py").read_text()  # the code was not copied
    board.close()
    # "Boot": run the deployed main.py with the deployed config, as the board would.
    broker = UpyBrokerProcess(tmp_path / "boot", heap=PICOW_HEAP, main=fs / "main.py")
    broker.config_path = fs / "siskin.json"
    try:
        broker.start()
        c = Paho(broker.port, "after-deploy").connect()
        try:
            c.subscribe("deploy/t", 0)
            c.publish("deploy/t", b"hi", 0)
            assert c.get().payload == b"hi"
            # The pushed settings are in force: $SYS every second (a board's default is off).
            c.subscribe("$SYS/broker/uptime", 0)
            assert c.get(timeout=5).topic == "$SYS/broker/uptime"
        finally:
            c.close()
    finally:
        broker.kill()


def test_deploy_dry_run_names_the_port_and_refuses_a_wrong_config(tmp_path: Path) -> None:
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"board": "esp32"}))
    dist = fake_dist(tmp_path)
    ok = tool(
        "deploy",
        "--board",
        "esp32",
        "--dist",
        str(dist),
        "--port",
        "/dev/ttyUSB7",
        "--config",
        str(config),
        "--dry-run",
    )
    assert ok.returncode == 0, ok.stderr
    line = ok.stdout.strip()
    assert "connect /dev/ttyUSB7 + cp -r common firmware boards main.py boot.py : + cp " in line
    assert line.endswith(":siskin.json + reset)")
    wrong = tool("deploy", "--board", "rp2040_picow", "--dist", str(dist), "--port", "COM3", "--config", str(config))
    assert wrong.returncode != 0 and "names board 'esp32'" in wrong.stderr
    # --settings: the board files and the config, no code; the same check of the config.
    settings = tool(
        "deploy", "--board", "esp32", "--dist", str(dist), "--port", "COM3", "--config", str(config),
        "--settings", "--dry-run",
    )  # fmt: skip
    assert settings.returncode == 0, settings.stderr
    line = settings.stdout.strip()
    assert "connect COM3 + cp -r boards : + cp " in line and line.endswith(":siskin.json + reset)")
    assert "common" not in line and "main.py" not in line
    config.write_text(json.dumps({"board": "esp32", "limits": {"max_conections": 5}}))
    bad = tool(
        "deploy", "--board", "esp32", "--dist", str(dist), "--port", "COM3", "--config", str(config), "--settings"
    )
    assert bad.returncode != 0 and "max_conections" in bad.stderr


def fake_dist(tmp_path: Path) -> Path:
    """A dist/<board>/ with the names tools/deploy checks for (empty)."""
    dist = tmp_path / "dist"
    for name in ("common", "firmware", "boards"):
        (dist / name).mkdir(parents=True)
    for name in ("main.py", "boot.py"):
        (dist / name).write_text("")
    return dist


def tls_deploy(tmp_path: Path, config: Path) -> tuple[str, ...]:
    """The tools/deploy arguments for `config` to an ESP32, a fake dist."""
    return (
        "deploy",
        "--board",
        "esp32",
        "--dist",
        str(fake_dist(tmp_path)),
        "--port",
        "/dev/ttyUSB7",
        "--config",
        str(config),
    )


def test_deploy_converts_the_tls_files_to_der(tmp_path: Path) -> None:
    import trustme

    ca = trustme.CA()
    leaf, other = ca.issue_cert("board.local"), ca.issue_cert("other.local")
    pem = {"cert": tmp_path / "board.pem", "key": tmp_path / "board.key", "other_key": tmp_path / "other.key"}
    leaf.cert_chain_pems[0].write_to_path(str(pem["cert"]))
    leaf.private_key_pem.write_to_path(str(pem["key"]))
    other.private_key_pem.write_to_path(str(pem["other_key"]))
    two_cas = tmp_path / "two-cas.pem"
    two_cas.write_bytes(ca.cert_pem.bytes() + trustme.CA().cert_pem.bytes())
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"board": "esp32", "certfile": "/siskin.crt", "keyfile": "/siskin.key"}))
    base = tls_deploy(tmp_path, config)
    ok = tool(*base, "--certfile", str(pem["cert"]), "--keyfile", str(pem["key"]), "--dry-run")
    assert ok.returncode == 0, ok.stderr
    assert "certfile.der :/siskin.crt + cp " in ok.stdout and "keyfile.der :/siskin.key + reset)" in ok.stdout
    cases = [
        (("--certfile", str(pem["cert"]), "--keyfile", str(pem["other_key"])), "is not the private key of --certfile"),
        (("--cafile", str(two_cas)), "sets no 'cafile'"),
        (("--keyfile", str(pem["cert"])), "--keyfile " + str(pem["cert"]) + ": not a private key"),
    ]
    for args, words in cases:
        bad = tool(*base, *args, "--dry-run")
        assert bad.returncode != 0 and words in bad.stderr, bad.stderr
    config.write_text(json.dumps({"board": "esp32", "cafile": "/ca.der", "require_certificate": True}))
    bad = tool(*base, "--cafile", str(two_cas), "--dry-run")
    assert bad.returncode != 0 and "2 certificates; a board trusts one CA" in bad.stderr, bad.stderr


def test_deploy_installs_a_bridges_tls_files(tmp_path: Path) -> None:
    import trustme

    ca = trustme.CA()
    leaf, other = ca.issue_cert(common_name="edge-7"), ca.issue_cert(common_name="edge-8")
    pem = {"ca": tmp_path / "ca.pem", "cert": tmp_path / "edge.pem", "key": tmp_path / "edge.key"}
    ca.cert_pem.write_to_path(str(pem["ca"]))
    leaf.cert_chain_pems[0].write_to_path(str(pem["cert"]))
    leaf.private_key_pem.write_to_path(str(pem["key"]))
    other_key = tmp_path / "other.key"
    other.private_key_pem.write_to_path(str(other_key))
    bridge = {
        "name": "cloud",
        "addresses": ["mqtt.example.com:8883"],
        "cafile": "/up-ca.der",
        "certfile": "/edge.der",
        "keyfile": "/edge.key.der",
        "topic": [{"pattern": "#"}],
    }
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"board": "esp32", "bridge": [bridge]}))
    base = tls_deploy(tmp_path, config)
    files = [f"cloud.cafile={pem['ca']}", f"cloud.certfile={pem['cert']}", f"cloud.keyfile={pem['key']}"]
    ok = tool(*base, *[a for f in files for a in ("--bridge-file", f)], "--dry-run")
    assert ok.returncode == 0, ok.stderr
    for der, remote in (("cafile", "/up-ca.der"), ("certfile", "/edge.der"), ("keyfile", "/edge.key.der")):
        assert f"/cloud/{der}.der :{remote} " in ok.stdout, ok.stdout
    cases = [
        (("--bridge-file", f"cloud.pem={pem['ca']}"), "wants NAME.KEY=FILE"),
        (("--bridge-file", f"edge.cafile={pem['ca']}"), "has no bridge 'edge' with 'cafile'"),
        (
            ("--bridge-file", f"cloud.certfile={pem['cert']}", "--bridge-file", f"cloud.keyfile={other_key}"),
            f"--bridge-file cloud.keyfile {other_key} is not the private key of --bridge-file cloud.certfile",
        ),
    ]
    for args, words in cases:
        bad = tool(*base, *args, "--dry-run")
        assert bad.returncode != 0 and words in bad.stderr, bad.stderr

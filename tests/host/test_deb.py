"""The Debian package (tools/deb.py, `make deb`): its contents, lintian, and the broker it installs.

Built once per run (a few seconds: dpkg-deb over the tree's files). The
installed command is run from the package's own files (dpkg-deb -x into a
throwaway root) on Debian's python3 with Debian's python3-h11, -wsproto,
-prometheus-client, -uvloop and -cryptography, which .ci/run installs:
`siskin --version`, a start (READY=1 on a real NOTIFY_SOCKET), an MQTT
client, /metrics, a WebSocket upgrade and `siskin cert`. The whole install
with dpkg into a debootstrap root (maintainer scripts: the user, the
conffile's group) is `make test-deb` (tests/host/test_deb.py -m deb).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from common import VERSION
from tests.conftest import REPO_ROOT, require
from tests.host.broker_proc import RawClient
from tests.host.test_service import ready_then_port, stop
from tools.deb import DEPENDS, RECOMMENDS, build

SYSTEM_PYTHON = "/usr/bin/python3"
DEBIAN_MODULES = ("h11", "wsproto", "prometheus_client", "uvloop", "cryptography")


def tool(name: str) -> str:
    path = shutil.which(name)
    require(name, path, "apt-get install dpkg-dev lintian")
    assert path is not None
    return path


@pytest.fixture(scope="module")
def deb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tool("dpkg-deb")
    return build(tmp_path_factory.mktemp("deb"))


@pytest.fixture(scope="module")
def root(deb: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package's files, extracted into a throwaway root."""
    target = tmp_path_factory.mktemp("root")
    subprocess.run([tool("dpkg-deb"), "-x", str(deb), str(target)], check=True, timeout=60)
    return target


def field(deb: Path, name: str) -> str:
    return subprocess.run(
        [tool("dpkg-deb"), "-f", str(deb), name], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_control_names_debians_packages(deb: Path) -> None:
    assert deb.name == f"siskin_{VERSION}_all.deb"
    assert field(deb, "Architecture") == "all" and field(deb, "Version") == VERSION
    assert field(deb, "Depends") == DEPENDS and field(deb, "Recommends") == RECOMMENDS
    for package in ("python3-h11", "python3-wsproto", "python3-prometheus-client"):
        assert package in DEPENDS
    info = subprocess.run([tool("dpkg-deb"), "-I", str(deb), "conffiles"], capture_output=True, text=True, check=True)
    assert info.stdout.split() == ["/etc/siskin/siskin.toml"]
    listing = subprocess.run([tool("dpkg-deb"), "-c", str(deb)], capture_output=True, text=True, check=True).stdout
    for path in ("./usr/bin/siskin", "./lib/systemd/system/siskin.service", "./etc/siskin/siskin.toml",
                 "./usr/share/siskin/cpython_host/operations/status_page/index.html", "./usr/share/man/man1/siskin.1.gz"):  # fmt: skip
        assert path in listing, path
    assert "root/root" in listing and "__pycache__" not in listing


def test_lintian_passes(deb: Path) -> None:
    """No error and no warning (the informational tags are printed for the record)."""
    lintian = tool("lintian")
    proc = subprocess.run(
        [lintian, "--allow-root", "--display-info", "--pedantic", str(deb)], capture_output=True, text=True, timeout=300
    )
    print(proc.stdout + proc.stderr)
    tags = [line for line in proc.stdout.splitlines() if line[:2] in ("E:", "W:")]
    assert tags == [] and proc.returncode == 0, proc.stdout


def test_unit_runs_the_packaged_command(root: Path) -> None:
    unit = (root / "lib/systemd/system/siskin.service").read_text()
    assert "ExecStart=/usr/bin/siskin --config /etc/siskin/siskin.toml --data-dir /var/lib/siskin" in unit
    assert "User=siskin" in unit and "Type=notify" in unit


@pytest.fixture(scope="module")
def debian_python() -> None:
    code = "import " + ", ".join(DEBIAN_MODULES)
    ok = os.access(SYSTEM_PYTHON, os.X_OK) and subprocess.run([SYSTEM_PYTHON, "-c", code]).returncode == 0
    require(
        "Debian's python3 with its packages", ok, "apt-get install " + " ".join(
            f"python3-{m.replace('_', '-')}" for m in DEBIAN_MODULES
        )
    )  # fmt: skip


def clean_env() -> dict[str, str]:
    """The environment without the test venv's Python settings: the system's python3 alone."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}


def test_packaged_command_on_debians_python(
    root: Path, debian_python: None, tmp_path: Path, notify_socket: socket.socket
) -> None:
    siskin = str(root / "usr/bin/siskin")
    version = subprocess.run([siskin, "--version"], capture_output=True, text=True, env=clean_env(), timeout=30)
    assert version.stdout.strip() == f"siskin {VERSION}", version.stderr
    # The packaged configuration, with a WebSocket listener and [http] added, on free ports.
    config = tmp_path / "siskin.toml"
    config.write_text(
        (root / "etc/siskin/siskin.toml").read_text()
        + '\n[[listener]]\nhost = "127.0.0.1"\nport = 0\nprotocol = "websockets"\n\n[http]\nport = 0\n'
    )
    log = tmp_path / "broker.log"
    cmd = [siskin, "--config", str(config), "--port", "0", "--data-dir", str(tmp_path / "data")]
    env = dict(clean_env(), NOTIFY_SOCKET=notify_socket.getsockname(), PYTHONUNBUFFERED="1")
    with log.open("wb") as f:
        proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=f, stderr=subprocess.STDOUT, env=env)
    try:
        ready_then_port(proc, log, notify_socket)
        mqtt = re.search(r"listening on 127\.0\.0\.1:(\d+)", log.read_text())  # the first: plain MQTT
        assert mqtt is not None
        c = RawClient(int(mqtt.group(1)))
        assert c.connect("from-the-deb") == b"\x00\x00"
        c.close()
        text = log.read_text()
        assert "event loop: uvloop" in text  # python3-uvloop
        http = re.search(r"HTTP listener on (http://127\.0\.0\.1:\d+)", text)
        assert http is not None, text
        metrics = urllib.request.urlopen(http.group(1) + "/metrics", timeout=10).read()
        assert b"siskin_clients_connected" in metrics  # python3-prometheus-client, python3-h11
        ws = re.search(r"ws://127\.0\.0\.1:(\d+)/mqtt", text)
        assert ws is not None, text
        ws_port = int(ws.group(1))
        with socket.create_connection(("127.0.0.1", ws_port), timeout=10) as s:  # python3-wsproto
            s.sendall(
                b"GET /mqtt HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                b"Sec-WebSocket-Protocol: mqtt\r\n\r\n"
            )
            assert s.recv(4096).startswith(b"HTTP/1.1 101 ")
        stop(proc, notify_socket)
    finally:
        proc.kill()
        proc.wait(10)
    cert = subprocess.run(
        [siskin, "cert", "-o", str(tmp_path / "tls"), "--name", "gw.local"],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=60,
    )  # fmt: skip  (python3-cryptography)
    assert cert.returncode == 0 and "SHA-256 fingerprint" in cert.stdout, cert.stderr


# ---------------------------------------------------------------------------
# make test-deb: dpkg into a debootstrap root, maintainer scripts and all


@pytest.fixture(scope="module")
def chroot() -> Iterator[Path]:
    base = os.environ.get("SISKIN_DEB_ROOT")
    require("a debootstrap root", base and Path(base, "usr/bin/python3").exists(), "make test-deb makes one")
    assert base is not None
    yield Path(base)


@pytest.mark.deb
def test_dpkg_installs_it_into_a_debian_root(deb: Path, chroot: Path, tmp_path: Path) -> None:
    """apt installs the package with Debian's dependencies; the maintainer scripts make the
    user and give it the configuration; the installed command starts and serves."""

    def inside(*cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["chroot", str(chroot), *cmd], capture_output=True, text=True, check=check, timeout=600)

    shutil.copy(deb, chroot / "tmp" / deb.name)
    shutil.copy("/etc/resolv.conf", chroot / "etc/resolv.conf")  # apt fetches the dependencies
    installed = inside("apt-get", "install", "-y", "-q", "--no-install-recommends", f"/tmp/{deb.name}")
    # adduser once warned "The home dir /var/lib/siskin you specified can't be accessed".
    said = installed.stdout + installed.stderr
    assert "adduser: Warning" not in said and "can't be accessed" not in said, said
    assert inside("stat", "-c", "%U:%G %a", "/var/lib/siskin").stdout.split() == ["siskin:siskin", "700"]
    assert inside("siskin", "--version").stdout.strip() == f"siskin {VERSION}"
    assert inside("getent", "passwd", "siskin").stdout.startswith("siskin:")
    assert inside("stat", "-c", "%U:%G %a", "/etc/siskin/siskin.toml").stdout.split() == ["root:siskin", "640"]
    assert inside("dpkg-query", "-W", "-f", "${Conffiles}", "siskin").stdout.split()[0] == "/etc/siskin/siskin.toml"
    started = inside(
        "timeout", "-s", "INT", "5", "setpriv", "--reuid=siskin", "--regid=siskin", "--clear-groups",
        "siskin", "--config", "/etc/siskin/siskin.toml", "--port", "0", "--data-dir", "/tmp/siskin-state",
        check=False,
    )  # fmt: skip
    assert "listening on 127.0.0.1:" in started.stderr and "shutdown complete" in started.stderr, started.stderr
    inside("apt-get", "purge", "-y", "-q", "siskin")
    assert not (chroot / "etc/siskin/siskin.toml").exists()


def test_make_deb_needs_no_venv(tmp_path: Path) -> None:
    """`make deb` on a fresh checkout builds the package with python3 and dpkg-deb alone:
    no test venv is made first (it was 365 MB)."""
    require("dpkg-deb", shutil.which("dpkg-deb"), "apt-get install dpkg")
    venv = tmp_path / "no-venv"
    proc = subprocess.run(
        ["make", "-s", "deb", f"VENV={venv}", f"DEB_OUT={tmp_path}"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert not venv.exists()
    assert [p.name for p in tmp_path.glob("siskin_*_all.deb")] == [f"siskin_{VERSION}_all.deb"]

"""`siskin cert`: a self-signed certificate that the [http] listener serves and a client pins.

docs/monitoring.md's three lines, run as written (with /etc/siskin moved
into a temporary directory, and the listener on a free loopback port): the
certificate made, the [http] table appended, the broker serving HTTPS with
it; a client with the certificate as its only CA verifies the names and
finds the fingerprint that was printed. Without `cryptography` the command
prints an openssl command, which makes files the broker takes too.
"""

from __future__ import annotations

import base64
import grp
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import tomllib
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, require
from tests.host.broker_proc import BrokerProcess
from tests.host.test_server_security import siskin_passwd

MONITORING = (REPO_ROOT / "docs" / "monitoring.md").read_text()


def siskin(*args: str, code: str = "pass") -> subprocess.CompletedProcess[str]:
    """`python -m cpython_host ARGS`, after `code` (e.g. hiding a package)."""
    run = f"import sys; {code}; from cpython_host.__main__ import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", run, *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)


def printed_fingerprint(out: str) -> bytes:
    m = re.search(r"SHA-256 fingerprint \(compare it with the browser's\):\n  ([0-9A-F:]{95})\n", out)
    assert m is not None, out
    return bytes.fromhex(m.group(1).replace(":", ""))


def served_certificate(port: int, cafile: Path, server_hostname: str) -> bytes:
    """The DER certificate of the HTTPS listener, verified against `cafile` alone for `server_hostname`."""
    context = ssl.create_default_context(cafile=str(cafile))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=server_hostname) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def test_the_three_lines_serve_the_page_over_https(tmp_path: Path) -> None:
    import hashlib

    lines = re.search(r"### The page on the LAN, over HTTPS\n.*?```sh\n(.*?)```", MONITORING, re.S)
    assert lines is not None
    make, append, restart = lines.group(1).strip().splitlines()
    assert restart.split("#")[0].split() == ["sudo", "systemctl", "restart", "siskin"]
    b = BrokerProcess(tmp_path / "etc-siskin", limits={"sys_interval": 0}, security={"password_file": "passwd"})
    etc = b.workdir  # /etc/siskin: the config file's directory, where relative names point
    siskin_passwd(etc / "passwd", "admin", "s3cret", "-c")
    words = make.split("#")[0].split()
    assert words[:5] == ["sudo", "siskin", "cert", "-o", "/etc/siskin"] and words[5:] == ["--group", "siskin"]
    group = grp.getgrgid(os.getegid()).gr_name  # (no group siskin here: the test's own)
    made = siskin("cert", "-o", str(etc), "--group", group, "--name", "localhost", "--ip", "127.0.0.1")
    assert made.returncode == 0, made.stderr
    key = etc / "siskin.key"
    assert (key.stat().st_mode & 0o777, key.stat().st_gid) == (0o640, os.getegid())
    assert (etc / "siskin.crt").stat().st_mode & 0o777 == 0o644
    shell = append.replace("sudo ", "").replace("/etc/siskin/siskin.toml", str(b.config_path))
    subprocess.run(["bash", "-c", shell], check=True, capture_output=True, timeout=10)
    http = tomllib.loads(b.config_path.read_text())["http"]
    assert http == {"host": "0.0.0.0", "certfile": "siskin.crt", "keyfile": "siskin.key"}
    # On a free loopback port here (a test listens on loopback only); auth = "basic" asks for
    # the login that 0.0.0.0 would.
    text = b.config_path.read_text().replace('host = "0.0.0.0"', 'host = "127.0.0.1"\nport = 0\nauth = "basic"')
    b.config_path.write_text(text)
    with b:
        url = b.http_url()
        assert url.startswith("https://127.0.0.1:")
        port = int(url.rsplit(":", 1)[1])
        for name in ("localhost", "127.0.0.1"):  # the names in the certificate, verified
            der = served_certificate(port, etc / "siskin.crt", name)
            assert hashlib.sha256(der).digest() == printed_fingerprint(made.stdout)
        with pytest.raises(ssl.SSLCertVerificationError):
            served_certificate(port, etc / "siskin.crt", "not-the-gateway.example")
        request = urllib.request.Request(
            url + "/api/status", headers={"Authorization": "Basic " + base64.b64encode(b"admin:s3cret").decode()}
        )
        context = ssl.create_default_context(cafile=str(etc / "siskin.crt"))
        with urllib.request.urlopen(request, timeout=10, context=context) as answer:
            assert answer.status == 200
        assert b.stop() == 0


def test_default_names_are_the_machines(tmp_path: Path) -> None:
    from cryptography import x509

    made = siskin("cert", "-o", str(tmp_path))
    assert made.returncode == 0, made.stderr
    cert = x509.load_pem_x509_certificate((tmp_path / "siskin.crt").read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    names = san.get_values_for_type(x509.DNSName)
    addresses = {str(a) for a in san.get_values_for_type(x509.IPAddress)}
    host = socket.gethostname()
    assert {host, f"{host.split('.')[0]}.local", "localhost"} <= set(names)
    assert {"127.0.0.1", "::1"} <= addresses
    # Every IPv4 address this machine has (as the kernel reports them) is named.
    ip = shutil.which("ip")
    if ip is not None:
        shown = subprocess.run([ip, "-4", "-o", "addr"], capture_output=True, text=True, timeout=10).stdout
        assert {line.split()[3].split("/")[0] for line in shown.splitlines()} <= addresses
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    assert (tmp_path / "siskin.key").stat().st_mode & 0o777 == 0o600
    again = siskin("cert", "-o", str(tmp_path))
    assert again.returncode == 2 and "exists; --force replaces it" in again.stderr


def test_a_pipx_install_is_told_the_pipx_inject_that_works(tmp_path: Path) -> None:
    """Installed by pipx under PIPX_HOME (docs/install.md: /opt/pipx): `pipx inject` must name the
    same PIPX_HOME (and PIPX_BIN_DIR), else it looks in ~/.local/pipx and fails; Debian's
    python3-cryptography would change nothing for it. A real venv in pipx's layout, run as pipx's link."""
    venv = tmp_path / "pipx" / "venvs" / "siskin"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "siskin").write_text(
        f"#!{venv}/bin/python\nimport sys\nfrom cpython_host.__main__ import main\nsys.exit(main())\n"
    )
    (bin_dir / "siskin").chmod(0o755)
    proc = subprocess.run(
        [str(bin_dir / "siskin"), "cert", "-o", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=60, env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)),
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert (
        f"needs the Python package cryptography, which is not installed: PIPX_HOME={tmp_path / 'pipx'} "
        f"PIPX_BIN_DIR={bin_dir} pipx inject siskin cryptography (this siskin is pipx's, in {venv})"
    ) in proc.stderr
    assert "apt install" not in proc.stderr


def test_without_cryptography_it_prints_an_openssl_command_that_works(tmp_path: Path) -> None:
    openssl = shutil.which("openssl")
    require("openssl", openssl, "apt-get install openssl")
    out = tmp_path / "out"
    hidden = siskin(
        "cert", "-o", str(out), "--name", "localhost", "--ip", "127.0.0.1", code="sys.modules['cryptography'] = None"
    )
    assert hidden.returncode == 1
    assert "needs the Python package cryptography" in hidden.stderr
    # Run from a virtual environment (the test venv): its own pip, named whole.
    assert (
        f"{os.path.abspath(sys.prefix)}/bin/pip install cryptography (this siskin runs in the virtual" in hidden.stderr
    )
    command = hidden.stderr.splitlines()[-1].strip()
    assert command.startswith("openssl req -x509 ") and not out.exists()
    out.mkdir()
    subprocess.run(["bash", "-c", command], check=True, capture_output=True, timeout=30)
    b = BrokerProcess(
        tmp_path / "b", http={"port": 0, "certfile": str(out / "siskin.crt"), "keyfile": str(out / "siskin.key")}
    )
    with b:
        port = int(b.http_url().rsplit(":", 1)[1])
        served_certificate(port, out / "siskin.crt", "localhost")
        assert b.stop() == 0

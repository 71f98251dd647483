"""docs/install.md and the README's service block, followed as written.

The commands are read out of the documents themselves (not copied here),
with their system paths moved into a temporary directory: pipx installs the
command from a copy of the tree and leaves nothing in it; the copied
rpi.toml with the documented edit and [security] table serves a user that
`siskin passwd` made; the README's block has every step `systemctl enable
--now` needs, in order. (The package route: tests/host/test_deb.py.)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from common import VERSION
from tests.conftest import REPO_ROOT, require, tool_path
from tests.host.broker_proc import BrokerProcess, RawClient
from tests.host.test_service import source_copy

INSTALL = (REPO_ROOT / "docs" / "install.md").read_text()
README = (REPO_ROOT / "README.md").read_text()
UNIT = (REPO_ROOT / "contrib" / "systemd" / "siskin.service").read_text()


def blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", text, re.M | re.S)


def block_with(text: str, lang: str, words: str) -> str:
    """The one code block of `text` that holds `words`."""
    (block,) = [b for b in blocks(text, lang) if words in b]
    return block


def files_of(tree: Path) -> set[str]:
    return {p.relative_to(tree).as_posix() for p in tree.rglob("*")}


@pytest.mark.slow
def test_pipx_install_as_written_leaves_the_tree_clean(tmp_path: Path) -> None:
    pipx = tool_path("pipx")
    require("pipx", pipx, "apt-get install pipx")
    assert pipx is not None
    cpython = block_with(INSTALL, "sh", "PIPX_HOME=/opt/pipx PIPX_BIN_DIR=/usr/local/bin pipx install")  # (not PyPy's)
    (line,) = [ln for ln in cpython.splitlines() if "pipx install ./siskin" in ln]
    words = line.split("#")[0].split()
    # sudo PIPX_HOME=/opt/pipx PIPX_BIN_DIR=/usr/local/bin pipx install ./siskin
    assert words[0] == "sudo" and words[3:] == ["pipx", "install", "./siskin"], line
    env = dict(os.environ)
    moved = {"/opt/pipx": tmp_path / "opt-pipx", "/usr/local/bin": tmp_path / "bin"}
    for word in words[1:3]:
        name, value = word.split("=", 1)
        env[name] = str(moved[value])
    # "git clone <siskin repository> siskin": the files a clone has that the install reads.
    tree = source_copy(tmp_path / "siskin")
    before = files_of(tree)
    proc = subprocess.run([pipx, *words[4:]], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert files_of(tree) == before  # no siskin.egg-info/, no build/
    siskin = tmp_path / "bin" / "siskin"
    version = subprocess.run([str(siskin), "--version"], capture_output=True, text=True, timeout=30, cwd=tmp_path)
    assert version.stdout.strip() == f"siskin {VERSION}", version.stderr
    # `siskin cert` without cryptography names the inject line for this very install ...
    cert = [str(siskin), "cert", "-o", str(tmp_path / "certs"), "--name", "localhost", "--ip", "127.0.0.1"]
    told = subprocess.run(cert, capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env)
    if told.returncode == 1:  # (pipx's venv may have found cryptography elsewhere: nothing to say then)
        advice = (
            f"PIPX_HOME={moved['/opt/pipx']} PIPX_BIN_DIR={moved['/usr/local/bin']} pipx inject siskin cryptography"
        )
        assert advice in told.stderr, told.stderr
    # ... and the docs' line, as written (moved like the install's), adds it where that siskin finds it.
    (inject,) = [ln for ln in block_with(INSTALL, "sh", "pipx inject siskin").splitlines() if "pipx inject" in ln]
    words = inject.split("#")[0].split()
    assert (
        words[0] == "sudo"
        and words[1:3] == line.split()[1:3]
        and words[3:] == ["pipx", "inject", "siskin", "cryptography"]
    )
    proc = subprocess.run([pipx, *words[4:]], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    made = subprocess.run(cert, capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env)
    assert made.returncode == 0 and (tmp_path / "certs" / "siskin.crt").is_file(), made.stderr


def test_config_as_written_serves_the_users(tmp_path: Path) -> None:
    """Step 2: rpi.toml copied, its listener opened to the network as the doc says, the
    doc's [security] table appended, a user made with `siskin passwd`: the broker starts
    and lets that user in, and nobody else (it used to refuse the file twice)."""
    listener = block_with(INSTALL, "toml", "[[listener]]")
    security = block_with(INSTALL, "toml", "[security]")
    assert "the `host` of its `[[listener]]` table" in INSTALL
    text = (REPO_ROOT / "boards" / "rpi.toml").read_text()
    assert text.count('host = "127.0.0.1"') == 1
    text = text.replace('host = "127.0.0.1"', 'host = "0.0.0.0"')
    assert tomllib.loads(text)["listener"] == tomllib.loads(listener)["listener"]  # what the doc shows
    text += "\n" + security
    b = BrokerProcess(tmp_path)
    b.config_path.write_text(text)
    (passwd_line,) = [ln for ln in block_with(INSTALL, "sh", "useradd").splitlines() if "siskin passwd -c" in ln]
    assert passwd_line.split("#")[0].split() == ["sudo", "siskin", "passwd", "-c", "/etc/siskin/passwd", "alice"]
    made = subprocess.run(
        [sys.executable, "-m", "cpython_host", "passwd", "--stdin", "-c", str(tmp_path / "passwd"), "alice"],
        cwd=REPO_ROOT, input="wonderland\n", capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    with b:  # (the test's --host 127.0.0.1 --port 0 stand in for the listener's 0.0.0.0:1883)
        alice = RawClient(b.port)
        assert alice.connect("alice-1", username="alice", password=b"wonderland") == b"\x00\x00"
        alice.close()
        anonymous = RawClient(b.port)
        assert anonymous.connect("anon-1") == b"\x00\x05"  # 3.1.1: not authorized
        anonymous.close()
        assert b.stop() == 0


def test_readme_service_block_has_every_step() -> None:
    """`systemctl enable --now` as written needs the user and the config file first."""
    block = block_with(README, "sh", "systemctl enable --now siskin")
    steps = [
        "pipx install ./siskin",
        "useradd --system",
        "install -d -m 750 -o root -g siskin /etc/siskin",
        "/etc/siskin/siskin.toml",
        "siskin.service /etc/systemd/system/",
        "systemctl daemon-reload",
        "systemctl enable --now siskin",
    ]
    where = [block.find(step) for step in steps]
    assert -1 not in where and where == sorted(where), dict(zip(steps, where, strict=True))
    # What the unit starts with is what the block installed.
    assert "--config /etc/siskin/siskin.toml" in UNIT and "User=siskin" in UNIT


def test_mosquitto_user_note_names_what_the_unit_does() -> None:
    from cpython_host.mosquitto.conf import NOTED

    note = NOTED["user"]
    settings = re.findall(r"\b([A-Z][A-Za-z]+=\S+?)\)", note)
    assert settings and all(s in UNIT.splitlines() for s in settings), note

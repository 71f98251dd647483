"""Build the Debian package: dist/siskin_<version>_all.deb (`make deb`).

    python -m tools.deb [--out DIR]

A binary package of the host (the `common` and `cpython_host` packages),
for Debian 12 (bookworm) and Raspberry Pi OS 12, that takes its Python
dependencies from Debian: python3-h11, python3-wsproto and
python3-prometheus-client (Depends), python3-uvloop and python3-cryptography
(Recommends: a faster event loop; encrypted stores and `siskin cert`).

  /usr/bin/siskin                   the command (python3, the modules below on its path)
  /usr/share/siskin/                the modules and the status page's files (private to it)
  /lib/systemd/system/siskin.service  contrib/systemd/siskin.service, ExecStart=/usr/bin/siskin
  /etc/siskin/siskin.toml           boards/rpi.toml, a conffile (a local edit survives upgrades)
  /usr/share/doc/siskin/            copyright, changelog.gz
  /usr/share/man/man1/siskin.1.gz   the --help of the command and its subcommands

The maintainer scripts create the system user and group `siskin` (adduser,
with its home /var/lib/siskin, the state directory, 0700),
give /etc/siskin to root:siskin (0750, the config 0640) and enable and start
the unit as debhelper's dh_installsystemd would write it (deb-systemd-helper,
deb-systemd-invoke), stop it on removal and forget it on purge. Only
dpkg-deb is needed (no debhelper, no build of the tree): the package is
assembled here file by file, owned by root, with md5sums; tests/host/test_deb.py
runs lintian on it and installs it (docs/install.md, "Debian package").
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from common import VERSION

ROOT = Path(__file__).resolve().parent.parent
DEPENDS = "python3 (>= 3.11), python3-h11, python3-wsproto, python3-prometheus-client, adduser"
RECOMMENDS = "python3-uvloop, python3-cryptography"
MAINTAINER = "Siskin maintainers <siskin@example.org>"

LAUNCHER = """\
#!/usr/bin/python3
# The siskin command of the Debian package: its modules are private, in
# ../share/siskin from here (/usr/share/siskin).
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "share", "siskin"))
from cpython_host.__main__ import main  # noqa: E402

sys.exit(main())
"""

DESCRIPTION = """\
MQTT 3.1.1 and 5.0 broker for the edge
 Siskin is an MQTT broker for gateways and small Linux boards: bounded
 memory, every acknowledged message kept on disk before its acknowledgement
 (persistent sessions, queues and retained messages survive a crash or a
 power cut), encryption at rest, TLS and MQTT over WebSockets, users and
 ACLs (Mosquitto's files are read as they are), Prometheus metrics and a
 status page, and bridges to upstream brokers with store-and-forward.
 .
 The unit siskin.service runs it as the user siskin with
 /etc/siskin/siskin.toml and its state in /var/lib/siskin."""

POSTINST = """\
#!/bin/sh
set -e

if [ "$1" = "configure" ]; then
    if ! getent passwd siskin >/dev/null; then
        # adduser makes the home, the state directory (with --no-create-home
        # it warned that it could not be accessed); 0700 as the unit's
        # StateDirectoryMode: sessions and messages are the clients' data.
        adduser --system --group --home /var/lib/siskin \\
            --gecos "Siskin MQTT broker" siskin >/dev/null
        chmod 0700 /var/lib/siskin
    fi
    # The service reads its configuration through the group siskin; others may not
    # (a password file and keys go here too).
    chgrp siskin /etc/siskin /etc/siskin/siskin.toml
    chmod 0750 /etc/siskin
    chmod 0640 /etc/siskin/siskin.toml
fi

if [ "$1" = "configure" ] || [ "$1" = "abort-upgrade" ] || [ "$1" = "abort-deconfigure" ] || [ "$1" = "abort-remove" ] ; then
    # This will only remove masks created by d-s-h on package removal.
    deb-systemd-helper unmask 'siskin.service' >/dev/null || true
    # was-enabled defaults to true, so new installations run enable.
    if deb-systemd-helper --quiet was-enabled 'siskin.service'; then
        deb-systemd-helper enable 'siskin.service' >/dev/null || true
    else
        deb-systemd-helper update-state 'siskin.service' >/dev/null || true
    fi
    if [ -d /run/systemd/system ]; then
        systemctl --system daemon-reload >/dev/null || true
        if [ -n "$2" ]; then
            _action=restart
        else
            _action=start
        fi
        deb-systemd-invoke $_action 'siskin.service' >/dev/null || true
    fi
fi
"""

PRERM = """\
#!/bin/sh
set -e

if [ -d /run/systemd/system ] && [ "$1" = remove ]; then
    deb-systemd-invoke stop 'siskin.service' >/dev/null || true
fi
"""

POSTRM = """\
#!/bin/sh
set -e

if [ -d /run/systemd/system ]; then
    systemctl --system daemon-reload >/dev/null || true
fi

if [ "$1" = "remove" ]; then
    if [ -x "/usr/bin/deb-systemd-helper" ]; then
        deb-systemd-helper mask 'siskin.service' >/dev/null || true
    fi
fi

if [ "$1" = "purge" ]; then
    if [ -x "/usr/bin/deb-systemd-helper" ]; then
        deb-systemd-helper purge 'siskin.service' >/dev/null || true
        deb-systemd-helper unmask 'siskin.service' >/dev/null || true
    fi
    # The broker's state (sessions, queued and retained messages) goes with a purge.
    rm -rf /var/lib/siskin
fi
"""

COPYRIGHT = """\
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: siskin
Source: https://github.com/siskin-mqtt/siskin

Files: *
Copyright: 2026 Siskin authors
License: Expat
 Permission is hereby granted, free of charge, to any person obtaining a
 copy of this software and associated documentation files (the "Software"),
 to deal in the Software without restriction, including without limitation
 the rights to use, copy, modify, merge, publish, distribute, sublicense,
 and/or sell copies of the Software, and to permit persons to whom the
 Software is furnished to do so, subject to the following conditions:
 .
 The above copyright notice and this permission notice shall be included
 in all copies or substantial portions of the Software.
 .
 THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS
 OR IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF
 MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT.
 IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY
 CLAIM, DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT,
 TORT OR OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION WITH THE
 SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
"""

CHANGELOG = f"""\
siskin ({VERSION}) unstable; urgency=medium

  * The host broker as a Debian package: Debian's own python3 packages,
    the systemd unit, the user siskin and /etc/siskin/siskin.toml.

 -- {MAINTAINER}  Wed, 02 Dec 2026 00:00:00 +0000
"""


def gz(data: bytes) -> bytes:
    """gzip -9n: no name, no time stamp (reproducible, and what lintian asks)."""
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=9, mtime=0, filename="") as f:
        f.write(data)
    return out.getvalue()


def manpage() -> bytes:
    """siskin(1): the --help of the command and of each subcommand, as preformatted text."""
    from cpython_host.__main__ import main as siskin
    from cpython_host.cli import COMMANDS

    def helptext(*args: str) -> str:
        out = io.StringIO()
        columns = os.environ.get("COLUMNS")
        os.environ["COLUMNS"] = "78"  # argparse's width
        try:
            with contextlib.redirect_stdout(out):
                siskin([*args, "--help"])
        except SystemExit:
            pass
        finally:
            if columns is None:
                del os.environ["COLUMNS"]
            else:
                os.environ["COLUMNS"] = columns
        return out.getvalue()

    def escape(text: str) -> str:
        lines = [line.replace("\\", "\\e") for line in text.splitlines()]
        return "\n".join(("\\&" + line) if line.startswith((".", "'")) else line for line in lines)

    parts = [
        f'.TH SISKIN 1 "2026-12-02" "siskin {VERSION}" "User Commands"',
        ".SH NAME",
        "siskin \\- MQTT 3.1.1 and 5.0 broker for the edge",
        ".SH SYNOPSIS",
        ".B siskin",
        "[\\fIOPTIONS\\fR]",
        ".br",
        ".B siskin",
        "\\fICOMMAND\\fR [\\fIOPTIONS\\fR]",
        ".SH DESCRIPTION",
        ".nf",
        escape(helptext()),
        ".fi",
    ]
    for name, _module, _usage, _what in COMMANDS:
        if name == "serve":
            continue
        parts += [f".SH COMMAND {name.upper()}", ".nf", escape(helptext(name)), ".fi"]
    return ("\n".join(parts) + "\n").encode()


def put(root: Path, path: str, data: bytes, mode: int = 0o644) -> None:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    target.chmod(mode)


def stage(root: Path) -> None:
    """The package's files under `root` (its DEBIAN/ included)."""
    share = root / "usr/share/siskin"
    for package in ("common", "cpython_host"):
        for src in sorted((ROOT / package).rglob("*")):
            if src.is_file() and "__pycache__" not in src.parts and src.suffix not in (".pyc", ".mpy"):
                put(share, str(src.relative_to(ROOT)), src.read_bytes())
    put(root, "usr/bin/siskin", LAUNCHER.encode(), 0o755)
    unit = (ROOT / "contrib/systemd/siskin.service").read_text()
    unit = unit.replace("/usr/local/bin/siskin", "/usr/bin/siskin")
    unit = unit.replace("Description=Siskin MQTT broker\n", "Description=Siskin MQTT broker\nDocumentation=man:siskin(1)\n")
    unit = unit.replace("# pipx installed into /usr/local/bin (docs/install.md)", "# The Debian package's command")
    put(root, "lib/systemd/system/siskin.service", unit.encode())
    put(root, "etc/siskin/siskin.toml", (ROOT / "boards/rpi.toml").read_bytes())
    put(root, "usr/share/doc/siskin/copyright", COPYRIGHT.encode())
    put(root, "usr/share/doc/siskin/changelog.gz", gz(CHANGELOG.encode()))
    put(root, "usr/share/man/man1/siskin.1.gz", gz(manpage()))
    for d in sorted(p for p in root.rglob("*") if p.is_dir()):
        d.chmod(0o755)
    sums = []
    size = 0
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = f.relative_to(root).as_posix()
        size += (f.stat().st_size + 1023) // 1024
        if not rel.startswith("etc/"):  # conffiles have their own sums in dpkg
            sums.append(f"{hashlib.md5(f.read_bytes()).hexdigest()}  {rel}\n")
    control = (
        f"Package: siskin\nVersion: {VERSION}\nArchitecture: all\nMaintainer: {MAINTAINER}\n"
        f"Installed-Size: {size}\nDepends: {DEPENDS}\nRecommends: {RECOMMENDS}\n"
        f"Section: net\nPriority: optional\nHomepage: https://github.com/siskin-mqtt/siskin\n"
        f"Description: {DESCRIPTION}\n"
    )
    put(root, "DEBIAN/control", control.encode())
    put(root, "DEBIAN/conffiles", b"/etc/siskin/siskin.toml\n")
    put(root, "DEBIAN/md5sums", "".join(sums).encode())
    for name, text in (("postinst", POSTINST), ("prerm", PRERM), ("postrm", POSTRM)):
        put(root, f"DEBIAN/{name}", text.encode(), 0o755)
    (root / "DEBIAN").chmod(0o755)


def build(out: Path) -> Path:
    """Stage and pack the package into `out`; its path."""
    if shutil.which("dpkg-deb") is None:
        raise SystemExit("tools.deb: dpkg-deb is not installed (apt-get install dpkg-dev)")
    out.mkdir(parents=True, exist_ok=True)
    deb = out / f"siskin_{VERSION}_all.deb"
    with tempfile.TemporaryDirectory(prefix="siskin-deb-") as tmp:
        root = Path(tmp) / "siskin"
        stage(root)
        subprocess.run(
            ["dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(root), str(deb)],
            check=True, capture_output=True,
        )  # fmt: skip
    return deb


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.deb", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(ROOT / "dist"), help="where the .deb goes (default dist/)")
    args = p.parse_args(argv)
    print(build(Path(args.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

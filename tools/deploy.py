"""Copy a built firmware and a device config onto a board with mpremote, then reset it.

    python -m tools.build --board esp32
    python -m tools.deploy --board esp32 --port /dev/ttyUSB0 --config my-siskin.json
    tools/deploy --board rp2040_picow --port /dev/ttyACM0 --config my-siskin.json
    tools/deploy --board esp32 --port /dev/ttyUSB0 --config my-siskin.json --settings   (settings only)

Theory of operation
-------------------
One mpremote (PyPI `mpremote`, the official MicroPython tool) session over
the serial REPL:

    mpremote connect PORT [resume]
        + cp -r common firmware boards main.py boot.py :   (from dist/<board>/)
        + cp CONFIG :siskin.json
        + cp CERT.der :/siskin.crt ...                      (--certfile/--keyfile/--cafile:
                                                              converted to DER, copied where
                                                              the config's keys say; a
                                                              bridge's: --bridge-file)
        + reset | soft-reset                                 (--reset)

--settings pushes the settings only, not the code: the device config and
the board files (`cp -r boards :` + `cp CONFIG :siskin.json` + reset), for a
changed limit, Wi-Fi network or port, or a board whose code is frozen into
its firmware image. The firmware reads them at boot, hence the reset.

Entering the raw REPL interrupts a running broker (Ctrl-C: the firmware
stops gracefully and returns to the REPL), so a board running Siskin can be
redeployed without pressing a button. Remote paths are relative (":" is the
board's current directory, the root of its file system after boot), so the
same command works against a stand-in that is not a board. Files of an
earlier deploy that no longer exist in dist/ are left on the board
(`mpremote fs rm -r :common` first for a clean slate). --remote-dir ./ serves
the unix-port stand-in the tests use (tests/host/test_firmware_deploy.py).

--dry-run prints the mpremote command instead of running it.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
CONTENTS = ("common", "firmware", "boards", "main.py", "boot.py")


def mpremote_exe() -> list[str]:
    beside = Path(sys.executable).parent / "mpremote"
    if beside.is_file():
        return [str(beside)]
    found = shutil.which("mpremote")
    if found:
        return [found]
    return [sys.executable, "-m", "mpremote"]


def check_config(path: Path, board: str) -> None:
    """Refuse a config that the board would refuse at boot (the firmware's own
    validator, firmware/boardcfg.py), or that names another board."""
    from common.broker.settings import ConfigError
    from firmware.boardcfg import load_device

    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise SystemExit(f"deploy: {path}: {e}") from None
    if not isinstance(data, dict):
        raise SystemExit(f"deploy: {path}: must hold a JSON object")
    try:
        load_device(str(path))
    except ConfigError as e:
        raise SystemExit(f"deploy: {e}") from None
    named = data.get("board", board)
    if board != "unix" and named != board:
        raise SystemExit(f"deploy: {path} names board {named!r}, deploying {board!r}")


# --certfile/--keyfile/--cafile: the device config key each installs.
TLS_FILES = ("certfile", "keyfile", "cafile")


def der_files(sources: dict[str, Path], out: Path, option: str = "--") -> dict[str, Path]:
    """The TLS files as the boards read them: DER (MicroPython's mbedTLS
    builds do not all parse PEM, and DER is smaller to hold while loading).
    A PEM or DER certificate, one CA certificate, an unencrypted PEM/DER key
    that belongs to the certificate; SystemExit with the reason otherwise
    (naming the option as `option` + key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    der = serialization.Encoding.DER
    made: dict[str, Path] = {}
    certs: dict[str, x509.Certificate] = {}
    for key, src in sources.items():
        try:
            data = src.read_bytes()
        except OSError as e:
            raise SystemExit(f"deploy: {option}{key} {src}: {e.strerror or e}") from None
        if key == "keyfile":
            try:
                pem = b"-----BEGIN" in data
                load = serialization.load_pem_private_key if pem else serialization.load_der_private_key
                private = load(data, password=None)
            except TypeError:
                raise SystemExit(f"deploy: {option}keyfile {src}: the key is encrypted; give it unencrypted") from None
            except ValueError as e:
                raise SystemExit(f"deploy: {option}keyfile {src}: not a private key ({e})") from None
            fmt = serialization.PrivateFormat.PKCS8
            blob = private.private_bytes(der, fmt, serialization.NoEncryption())
        else:
            try:
                found = (
                    x509.load_pem_x509_certificates(data)
                    if b"-----BEGIN" in data
                    else [x509.load_der_x509_certificate(data)]
                )
            except ValueError as e:
                raise SystemExit(f"deploy: {option}{key} {src}: not a certificate ({e})") from None
            if key == "cafile" and len(found) > 1:
                raise SystemExit(
                    f"deploy: {option}cafile {src}: {len(found)} certificates; a board trusts one CA (DER holds one)"
                )
            certs[key] = found[0]  # certfile: the leaf (a chain's intermediates are not sent by the board)
            blob = found[0].public_bytes(der)
        path = out / (key + ".der")
        path.write_bytes(blob)
        made[key] = path
    if "certfile" in certs and "keyfile" in sources:
        spki = serialization.PublicFormat.SubjectPublicKeyInfo
        public = serialization.load_der_private_key(made["keyfile"].read_bytes(), None).public_key()
        if public.public_bytes(der, spki) != certs["certfile"].public_key().public_bytes(der, spki):
            raise SystemExit(
                f"deploy: {option}keyfile {sources['keyfile']} is not the private key of {option}certfile"
                f" {sources['certfile']}"
            )
    return made


def bridge_files(specs: list[str], config: Path, out: Path) -> dict[str, tuple[Path, str]]:
    """--bridge-file NAME.KEY=FILE: each converted to DER (der_files, a
    bridge's files checked together), with the path the config's bridge
    NAME gives KEY on the board; SystemExit for a spec that names nothing."""
    per_bridge: dict[str, dict[str, Path]] = {}
    for spec in specs:
        target, _, local = spec.partition("=")
        name, _, key = target.rpartition(".")
        if not local or not name or key not in TLS_FILES:
            raise SystemExit(f"deploy: --bridge-file {spec!r}: wants NAME.KEY=FILE, KEY one of {', '.join(TLS_FILES)}")
        per_bridge.setdefault(name, {})[key] = Path(local)
    if not per_bridge:
        return {}
    bridges = {b.get("name"): b for b in json.loads(config.read_text()).get("bridge", []) if isinstance(b, dict)}
    files = {}
    for name, sources in per_bridge.items():
        for key in sources:
            if not bridges.get(name, {}).get(key):
                raise SystemExit(
                    f"deploy: --bridge-file {name}.{key} given but {config} has no bridge {name!r} with {key!r}"
                    " (where the board reads it)"
                )
        (out / name).mkdir()
        made = der_files(sources, out / name, f"--bridge-file {name}.")
        files.update({f"{name}.{key}": (made[key], bridges[name][key]) for key in sources})
    return files


def command(
    port: str,
    dist: Path,
    config: Path,
    reset: str,
    resume: bool,
    remote_dir: str = "",
    files: dict[str, tuple[Path, str]] | None = None,
    settings_only: bool = False,
) -> list[str]:
    """The mpremote command line (run with cwd = dist); `files`: device config
    key -> (local file, its path on the board) to copy too; `settings_only`:
    the board files and config (and those files), no code."""
    contents = ("boards",) if settings_only else CONTENTS
    missing = [name for name in contents if not (dist / name).exists()]
    if missing:
        raise SystemExit(f"deploy: {dist} lacks {', '.join(missing)}: run python -m tools.build first")
    cmd = [*mpremote_exe(), "connect", port]
    if resume:
        cmd.append("resume")
    cmd += ["+", "cp", "-r", *contents, ":" + remote_dir]
    cmd += ["+", "cp", str(config.resolve()), ":" + remote_dir + "siskin.json"]
    for local, remote in (files or {}).values():
        cmd += ["+", "cp", str(local.resolve()), ":" + (remote if remote.startswith("/") else remote_dir + remote)]
    if reset == "hard":
        cmd += ["+", "reset"]
    elif reset == "soft":
        cmd += ["+", "soft-reset"]
    return cmd


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tools/deploy", description=__doc__.split("\n\n")[0])
    ap.add_argument("--board", required=True, help="esp32 | rp2040_picow (the dist/<board>/ to copy)")
    ap.add_argument("--port", required=True, help="serial device of the board, e.g. /dev/ttyUSB0, /dev/ttyACM0, COM3")
    ap.add_argument("--config", required=True, help="the device config to install as /siskin.json")
    ap.add_argument("--dist", help="the build to copy (default: dist/<board>)")
    ap.add_argument("--reset", choices=("hard", "soft", "none"), default="hard", help="after copying (default: hard)")
    ap.add_argument("--resume", action="store_true", help="do not soft-reset the board before copying")
    ap.add_argument(
        "--remote-dir",
        default="",
        help="directory on the device, relative to its current one (default: none, the root of a board);"
        " './' for the unix-port stand-in, whose os.stat('') fails",
    )
    ap.add_argument(
        "--settings",
        action="store_true",
        help="push the settings only (the --config file and the build's boards/*.json), not the code, then reset:"
        " a changed limit, network or port without reflashing",
    )
    for key in TLS_FILES:
        ap.add_argument(
            f"--{key}",
            type=Path,
            help=f"PEM or DER file to install, as DER, where the config's {key!r} says (TLS; docs/security.md)",
        )
    ap.add_argument(
        "--bridge-file",
        action="append",
        default=[],
        metavar="NAME.KEY=FILE",
        help="a bridge's TLS file (KEY: cafile, certfile or keyfile of the bridge named NAME), PEM or DER, to install"
        " as DER where that bridge's KEY in the config says (docs/bridge.md); repeat for each",
    )
    ap.add_argument("--dry-run", action="store_true", help="print the mpremote command, do not run it")
    args = ap.parse_args(argv)
    dist = Path(args.dist) if args.dist else REPO_ROOT / "dist" / args.board
    config = Path(args.config)
    check_config(config, args.board)
    sources = {key: getattr(args, key) for key in TLS_FILES if getattr(args, key) is not None}
    with tempfile.TemporaryDirectory(prefix="siskin-tls-") as tmp:
        files = {}
        if sources:
            remote = json.loads(config.read_text())
            for key in sources:
                if not remote.get(key):
                    raise SystemExit(f"deploy: --{key} given but {config} sets no {key!r} (where the board reads it)")
            made = der_files(sources, Path(tmp))
            files = {key: (made[key], remote[key]) for key in sources}
        files.update(bridge_files(args.bridge_file, config, Path(tmp)))
        cmd = command(args.port, dist, config, args.reset, args.resume, args.remote_dir, files, args.settings)
        print(f"(cd {shlex.quote(str(dist))} && {shlex.join(cmd)})")
        if args.dry_run:
            return 0
        proc = subprocess.run(cmd, cwd=dist)
    if proc.returncode != 0:
        print(f"deploy: mpremote failed with exit code {proc.returncode}", file=sys.stderr)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())

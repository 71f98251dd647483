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


def command(
    port: str, dist: Path, config: Path, reset: str, resume: bool, remote_dir: str = "", settings_only: bool = False
) -> list[str]:
    """The mpremote command line (run with cwd = dist); `settings_only`: the board files and config, no code."""
    contents = ("boards",) if settings_only else CONTENTS
    missing = [name for name in contents if not (dist / name).exists()]
    if missing:
        raise SystemExit(f"deploy: {dist} lacks {', '.join(missing)}: run python -m tools.build first")
    cmd = [*mpremote_exe(), "connect", port]
    if resume:
        cmd.append("resume")
    cmd += ["+", "cp", "-r", *contents, ":" + remote_dir]
    cmd += ["+", "cp", str(config.resolve()), ":" + remote_dir + "siskin.json"]
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
    ap.add_argument("--dry-run", action="store_true", help="print the mpremote command, do not run it")
    args = ap.parse_args(argv)
    dist = Path(args.dist) if args.dist else REPO_ROOT / "dist" / args.board
    config = Path(args.config)
    check_config(config, args.board)
    cmd = command(args.port, dist, config, args.reset, args.resume, args.remote_dir, args.settings)
    print(f"(cd {shlex.quote(str(dist))} && {shlex.join(cmd)})")
    if args.dry_run:
        return 0
    proc = subprocess.run(cmd, cwd=dist)
    if proc.returncode != 0:
        print(f"deploy: mpremote failed with exit code {proc.returncode}", file=sys.stderr)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())

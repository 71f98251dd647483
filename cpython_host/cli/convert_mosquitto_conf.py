"""`siskin convert-mosquitto-conf FILE`: print (or write) the Siskin TOML of a mosquitto.conf."""

from __future__ import annotations

import argparse
import grp
import sys
from collections.abc import Sequence
from pathlib import Path

from cpython_host.cli.cert import write
from cpython_host.config import ConfigError
from cpython_host.mosquitto.conf import convert, to_toml


def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(
        prog="siskin convert-mosquitto-conf",
        description="Convert a Mosquitto configuration to a Siskin TOML config file: listeners (with\n"
        "protocol websockets and TLS), allow_anonymous, password_file (mosquitto_passwd files are\n"
        "read as they are), acl_file, persistence, limits, sys_interval, log_type; include_dir is\n"
        "followed. Every option Siskin cannot honour is named with its file and line; by default\n"
        "that stops the conversion (exit 2). Notes (differences in meaning) are written into the\n"
        "output as comments and to stderr. docs/install.md has the whole table.",
        epilog="examples:\n"
        "  siskin convert-mosquitto-conf /etc/mosquitto/mosquitto.conf\n"
        "  siskin convert-mosquitto-conf /etc/mosquitto/mosquitto.conf -o /etc/siskin/siskin.toml --group siskin\n"
        "  siskin --config /etc/siskin/siskin.toml",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("file", help="the mosquitto.conf to read")
    p.add_argument(
        "-o",
        "--output",
        metavar="OUT",
        help="write the TOML to OUT instead of stdout (mode 0600: it may hold a bridge's password)",
    )
    p.add_argument(
        "--group",
        metavar="GROUP",
        help="with -o: OUT belongs to GROUP, mode 0640 (e.g. siskin, the service's group)",
    )
    p.add_argument(
        "--ignore-unsupported",
        action="store_true",
        help="leave out the options Siskin cannot honour (listed as notes) instead of stopping",
    )
    args = p.parse_args(argv)
    gid = None
    if args.group is not None:
        if args.output is None:
            p.error("--group goes with -o")
        try:
            gid = grp.getgrnam(args.group).gr_gid
        except KeyError:
            p.error(f"--group {args.group}: no such group")
    try:
        conv = convert(args.file, args.ignore_unsupported)
    except ConfigError as e:
        print(f"siskin: {e}", file=sys.stderr)
        return 2
    for note in conv.notes:
        print(f"siskin: {note}", file=sys.stderr)
    text = to_toml(conv, args.file)
    if args.output is None:
        sys.stdout.write(text)
    else:
        try:
            # Never readable by everyone, not even for a moment: it may hold a bridge's password.
            write(Path(args.output), text.encode(), 0o600 if gid is None else 0o640, gid)
        except OSError as e:
            print(f"siskin: cannot write {args.output}: {e}", file=sys.stderr)
            return 1
    return 0

"""`siskin convert-mosquitto-conf FILE`: print (or write) the Siskin TOML of a mosquitto.conf."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

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
        "  siskin convert-mosquitto-conf /etc/mosquitto/mosquitto.conf -o /etc/siskin/siskin.toml\n"
        "  siskin --config /etc/siskin/siskin.toml",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("file", help="the mosquitto.conf to read")
    p.add_argument("-o", "--output", metavar="OUT", help="write the TOML to OUT instead of stdout")
    p.add_argument(
        "--ignore-unsupported",
        action="store_true",
        help="leave out the options Siskin cannot honour (listed as notes) instead of stopping",
    )
    args = p.parse_args(argv)
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
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    return 0

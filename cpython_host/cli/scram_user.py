"""`siskin scram-user NAME`: print a [limits] scram_users line for a v5 SCRAM-SHA-256 user."""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from collections.abc import Sequence

from common.crypto.auth_scram import make_credentials


def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(
        prog="siskin scram-user",
        description="Print the scram_users line (user:salt:iterations:StoredKey:ServerKey) for a v5 "
        "SCRAM-SHA-256 user. The broker keeps no password, only these derived keys. Add the line "
        "to [limits] scram_users in the config file.",
        epilog='example:  siskin scram-user alice  ->  scram_users = ["alice:..."]',
    )
    p.add_argument("name", help="user name (no ':' and no ',')")
    p.add_argument("--iterations", type=int, default=4096, help="PBKDF2 iterations (default 4096)")
    p.add_argument(
        "--password-stdin", action="store_true", help="read the password from the first line of stdin, not a prompt"
    )
    args = p.parse_args(argv)
    if ":" in args.name or "," in args.name or not args.name:
        p.error("the name must be non-empty and contain no ':' or ','")
    if args.iterations < 1:
        p.error("--iterations must be at least 1")
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = getpass.getpass(f"password for {args.name}: ")
    if not password:
        p.error("empty password")
    print(make_credentials(args.name, password, os.urandom(16), args.iterations))
    return 0

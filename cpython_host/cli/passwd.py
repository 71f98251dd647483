"""`siskin passwd FILE USER`: add, change or delete a user of a password file."""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from collections.abc import Sequence

from common.broker.users import DEFAULT_ITERATIONS, MAX_ITERATIONS, format_hash
from common.crypto.pbkdf2 import pbkdf2_hmac


def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(
        prog="siskin passwd",
        description="Add, change or delete a user of a password file ([security] password_file),\n"
        "like mosquitto_passwd. The file keeps a salted PBKDF2-SHA256 hash of each\n"
        "password ($pbkdf2-sha256$ITERATIONS$SALT$HASH), never the password. Siskin\n"
        "also reads mosquitto_passwd's $7$ lines (mosquitto does not read Siskin's).\n"
        "Other lines and comments are kept. Send the broker SIGHUP to apply a change.",
        epilog="examples:\n"
        "  siskin passwd -c /etc/siskin/passwd alice      new file; asks for the password twice\n"
        '  echo "$PW" | siskin passwd --stdin /etc/siskin/passwd bob\n'
        "  siskin passwd -D /etc/siskin/passwd bob",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "file", help="the password file (a new one gets mode 0600; a changed one keeps its owner, group and mode)"
    )
    p.add_argument("user", help="user name (no ':', no control characters)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("-c", action="store_true", help="create the file, replacing it if it exists")
    mode.add_argument("-D", action="store_true", help="delete the user")
    p.add_argument("--stdin", action="store_true", help="read the password from the first line of stdin, not a prompt")
    p.add_argument(
        "--iterations",
        type=int,
        default=DEFAULT_ITERATIONS,
        help=f"PBKDF2 iterations (default {DEFAULT_ITERATIONS}; each login costs about 3 ms at "
        "10,000 on a PC, a board's pure-Python PBKDF2 much more: docs/security.md)",
    )
    args = p.parse_args(argv)
    user = args.user
    if not user or ":" in user or any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in user):
        p.error("the user name must be non-empty, without ':' or control characters")
    if not 1 <= args.iterations <= MAX_ITERATIONS:
        p.error(f"--iterations wants 1..{MAX_ITERATIONS}")
    lines: list[str] = []
    if not args.c:
        try:
            with open(args.file, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            p.error(f"{args.file}: no such file (use -c to create it)")
        except OSError as e:
            p.error(f"{args.file}: {e.strerror}")
    new_line = None
    if not args.D:
        if args.stdin:
            password = sys.stdin.readline().rstrip("\n")
        else:
            password = getpass.getpass("Password: ")
            if getpass.getpass("Reenter password: ") != password:
                p.error("the passwords do not match")
        if not password:
            p.error("empty password")
        salt = os.urandom(16)
        digest = pbkdf2_hmac("sha256", password.encode(), salt, args.iterations)
        new_line = f"{user}:{format_hash(args.iterations, salt, digest)}"
    kept = []
    found = False
    for line in lines:
        if not line.lstrip().startswith("#") and line.split(":", 1)[0] == user:
            found = True
            if new_line is not None:
                kept.append(new_line)  # changed in place
        else:
            kept.append(line)
    if args.D and not found:
        p.error(f"user {user!r} is not in {args.file}")
    if new_line is not None and not found:
        kept.append(new_line)
    return replace_file(args.file, "".join(ln + "\n" for ln in kept))


def replace_file(path: str, text: str) -> int:
    """Write `text` to `path` at once (a new file, then rename), keeping the owner, group
    and mode of the file it replaces: the docs give it to the group `siskin` (chgrp,
    chmod 640) so that the service can read it, and a change must not take that away.
    A new file is 0600, owned by whoever runs this."""
    try:
        old = os.stat(path)
    except FileNotFoundError:
        old = None
    tmp = f"{path}.tmp{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            if old is not None:
                try:
                    os.fchown(f.fileno(), old.st_uid, old.st_gid)
                except PermissionError:
                    os.unlink(tmp)
                    print(
                        f"siskin passwd: {path} belongs to uid {old.st_uid}, gid {old.st_gid}, which this user "
                        "cannot give a file: run it as root (sudo), or as the file's owner; the file is unchanged",
                        file=sys.stderr,
                    )
                    return 1
                os.fchmod(f.fileno(), old.st_mode & 0o7777)
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return 0

"""`siskin store-key`: print a fresh 256-bit store key (--store-key-file, SISKIN_STORE_KEY)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence


def main(argv: Sequence[str]) -> int:
    argparse.ArgumentParser(
        prog="siskin store-key",
        description="Print a fresh random AES-256 key (64 hex digits) for --store-key-file or "
        "SISKIN_STORE_KEY. Keep it secret and keep a copy: without it the store cannot be read.",
        epilog="example:  siskin store-key > /etc/siskin/store.key && chmod 600 /etc/siskin/store.key",
    ).parse_args(argv)
    print(os.urandom(32).hex())
    return 0

"""The `siskin` command: `siskin [OPTIONS]` runs the broker, `siskin NAME ...` a subcommand.

A dispatcher only: each subcommand is a module of cpython_host/cli/ (their
list: cpython_host.cli.COMMANDS) with its own --help. `siskin --help`
explains the broker's options and lists the subcommands.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from cpython_host.cli import COMMANDS
from cpython_host.runtime.pypy_heap import pin_nursery


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None:
        pin_nursery(sys.argv[1:])  # on PyPy: before anything is allocated (a re-exec)
    argv = list(sys.argv[1:] if argv is None else argv)
    modules = {name: module for name, module, *_ in COMMANDS}
    if argv and argv[0] in modules:
        command = importlib.import_module(f"cpython_host.cli.{modules[argv[0]]}")
        code: int = command.main(argv[1:])
        return code
    if argv and not argv[0].startswith("-"):
        import difflib  # (only for a mistyped subcommand)

        close = difflib.get_close_matches(argv[0], modules, n=1)
        hint = f"did you mean 'siskin {close[0]}'? " if close else ""
        print(
            f"siskin: no command {argv[0]!r}: {hint}the commands are {', '.join(modules)} "
            "(siskin --help explains each; siskin NAME --help its options)",
            file=sys.stderr,
        )
        return 2
    from cpython_host.cli import serve

    return serve.main(argv)


if __name__ == "__main__":
    sys.exit(main())

"""What the host needs from Python 3.11 that PyPy's Python 3.9 spells differently.

The host runs on CPython >= 3.11 and on PyPy >= 7.3 (Python 3.9, Debian's
`pypy3`) from the same tree (docs/install.md). Everything that differs
between the two lives here, chosen by feature, so the rest of the host is
plain 3.9 code (ruff's target and tests/host/test_pypy.py keep it so).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

if sys.version_info >= (3, 11):
    import tomllib
else:  # PyPy 3.9: the same parser, from PyPI (a dependency there)
    import tomli as tomllib

__all__ = ["run", "tomllib"]

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T], loop_factory: Callable[[], asyncio.AbstractEventLoop] | None) -> T:
    """Run `main` to completion on a new loop from `loop_factory` (None: asyncio's own)."""
    if sys.version_info >= (3, 11):
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            return runner.run(main)
    if loop_factory is None:
        return asyncio.run(main)
    factory = loop_factory

    class Policy(asyncio.DefaultEventLoopPolicy):  # 3.9's asyncio.run takes its loop from the policy
        def new_event_loop(self) -> asyncio.AbstractEventLoop:
            return factory()

    asyncio.set_event_loop_policy(Policy())
    try:
        return asyncio.run(main)
    finally:
        asyncio.set_event_loop_policy(None)

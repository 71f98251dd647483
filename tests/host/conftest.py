"""Fixtures shared by the host tests (real broker processes, real clients)."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT, require
from tests.host.broker_proc import BROKER_PYTHON


@pytest.fixture
def clients() -> Iterator[list[Any]]:
    """A list a test appends the clients it opens to (paho wrappers: anything
    with close()); each is closed at the end of the test, pass or fail."""
    made: list[Any] = []
    yield made
    for c in made:
        c.close()


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[socket.socket]:
    """systemd's end: a unix datagram socket; its path goes into NOTIFY_SOCKET."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "notify"))
    sock.settimeout(15)
    yield sock
    sock.close()


def pypy_python() -> str:
    """make's PyPy venv interpreter (SISKIN_PYPY, default .venv-pypy/bin/python); skips
    (fails under SISKIN_REQUIRE_ALL=1) without one."""
    path = os.environ.get("SISKIN_PYPY") or str(REPO_ROOT / ".venv-pypy" / "bin" / "python")
    require("PyPy", os.access(path, os.X_OK), f"no {path}: apt-get install pypy3 pypy3-venv, then make setup")
    return path


# The host's runtimes as the params of a module-scoped broker fixture:
# CPython on uvloop and on asyncio's own loop, PyPy (asyncio's loop).
RUNTIMES = ["uvloop", "asyncio", "pypy"]


def runtime_args(runtime: str) -> dict[str, Any]:
    """BrokerProcess keyword arguments for one of RUNTIMES."""
    if runtime == "pypy":
        return {"python": pypy_python(), "extra_args": ("--event-loop", "asyncio")}
    return {"extra_args": ("--event-loop", runtime)}


# The PyPy leg: a test that uses this fixture runs twice, its brokers on
# CPython (this interpreter) and on PyPy (docs/install.md: both runtimes are
# supported). Its clients stay on CPython. Module-scoped broker fixtures
# take "pypy" as one of their params instead (test_server_paho.py).
@pytest.fixture(params=["cpython", "pypy"])
def broker_runtime(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "pypy":
        monkeypatch.setenv(BROKER_PYTHON, pypy_python())
    else:
        monkeypatch.delenv(BROKER_PYTHON, raising=False)
    return str(request.param)

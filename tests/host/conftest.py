"""Fixtures shared by the host tests (real broker processes, real clients)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


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

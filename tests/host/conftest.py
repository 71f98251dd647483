"""Fixtures shared by the host tests (real broker processes, real clients)."""

from __future__ import annotations

from collections.abc import Iterator
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

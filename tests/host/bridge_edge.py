"""What the bridge's host tests share (tests/host/test_bridge_*.py): an edge
Siskin with one [[bridge]], paho clients closed at the end, the distinct
payloads a consumer got, and the check that a refused upstream is retried
with back-off."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tests.host.broker_proc import BrokerProcess, Paho, wait_until

RULES = [
    {"pattern": "#", "direction": "out", "local_prefix": "up/", "remote_prefix": "edge1/", "qos": 2},
    {"pattern": "#", "direction": "in", "local_prefix": "down/", "remote_prefix": "cmd/edge1/", "qos": 2},
]


@contextlib.contextmanager
def edge(
    workdir: Path, ports: list[int], connected: bool = True, http: dict[str, Any] | None = None, **over: Any
) -> Iterator[BrokerProcess]:
    """Siskin bridged (up/ -> edge1/, cmd/edge1/ -> down/) to `ports` with
    short timers; yielded once the bridge is connected (`connected` False:
    once it runs), killed at the end. `over`: [[bridge]] keys to change
    (name stays "cloud"); `http`: its [http] table."""
    table: dict[str, Any] = {
        "name": "cloud",
        "addresses": [f"127.0.0.1:{p}" for p in ports],
        "client_id": "edge1",
        "keepalive": 1,
        "connect_timeout": 1.0,
        "backoff_min": 0.2,
        "backoff_max": 1.0,
        "topic": RULES,
    }
    table.update(over)
    with BrokerProcess(workdir, limits={"sys_interval": 0}, bridges=[table], http=http) as b:
        if connected:
            b.wait_log("bridge cloud: connected to", 30)
        yield b
        assert "Traceback" not in b.log_text(), b.log_text()


def paho(port: int, clients: list[Paho], client_id: str, clean: bool = True) -> Paho:
    c = Paho(port, client_id, clean)
    clients.append(c)
    return c.connect(15)


def drain(sub: Paho, n: int, timeout: float = 20.0, earlier: tuple[bytes, ...] = ()) -> list[bytes]:
    """Payloads until `n` distinct ones came, in order of arrival without
    repeats (QoS 1 may repeat one across a reconnect); `earlier`: payloads
    drained before, left out if QoS 1 brings them again."""
    got: dict[bytes, None] = {}
    while len(got) < n:
        payload = sub.get(timeout).payload
        if payload not in earlier:
            got.setdefault(payload)
    return list(got)


def retried_with_back_off(attempts: Callable[[], int], more: int = 4, timeout: float = 60.0) -> None:
    """A refused upstream is retried, `more` times at least (waited for, however
    busy the machine), and with back-off: no more attempts than the back-off
    of these tests allows in the time they took (backoff_min 0.2 s doubling
    to backoff_max 1 s, half of each delay random: three short ones, then at
    most one per 0.5 s; a tight loop makes hundreds). `attempts()` counts
    the attempts logged so far. The time is taken around the two counts, so
    a slow machine only lowers the count against it, never raises it."""
    started = time.monotonic()
    before = attempts()
    wait_until(lambda: attempts() >= before + more, timeout, f"fewer than {more} attempts after {before}")
    made = attempts() - before
    took = time.monotonic() - started
    assert made <= 3 + took / 0.5, f"{made} attempts in {took:.2f} s: not backing off"

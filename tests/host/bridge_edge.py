"""What the bridge's host tests share (tests/host/test_bridge_*.py): an edge
Siskin with one [[bridge]], paho clients closed at the end, and the
distinct payloads a consumer got."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.host.broker_proc import BrokerProcess, Paho

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

"""Bridge notifications (docs/bridge.md, "Notifications") against a real Mosquitto upstream.

The edge Siskin bridges to a Mosquitto started here with `notifications =
true`, as a converted Mosquitto bridge has by default: a subscriber on
Mosquitto sees the retained "1" once the bridge is connected, and the
retained "0" that Mosquitto publishes from the bridge's will when the link
is cut (the edge killed with SIGKILL: no DISCONNECT, the socket closed by
the kernel). The edge's own subscribers see the same state here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.host.bridge_edge import edge, paho
from tests.host.broker_proc import Paho
from tests.host.test_bridge_mosquitto import mosquitto
from tools.bench.brokers import Mosquitto

pytestmark = pytest.mark.interop

__all__ = ["mosquitto"]  # the fixture, from test_bridge_mosquitto

TOPIC = "$SYS/broker/connection/gw-7/state"


def retained(port: int, clients: list[Paho], client_id: str) -> tuple[bytes, bool]:
    """What a new subscriber gets at once on TOPIC: (payload, retain flag)."""
    sub = paho(port, clients, client_id)
    sub.subscribe(TOPIC, 1)
    m = sub.get(10)
    return m.payload, m.retain


def test_upstream_sees_1_when_connected_and_the_will_0_when_the_link_is_cut(
    tmp_path: Path, mosquitto: Mosquitto, clients: list[Paho]
) -> None:
    watcher = paho(mosquitto.port, clients, "watcher")
    watcher.subscribe(TOPIC, 1)
    with edge(tmp_path, [mosquitto.port], notifications=True, client_id="gw-7") as siskin:
        assert watcher.get(10).payload == b"1"
        assert retained(mosquitto.port, clients, "late-1") == (b"1", True)
        assert retained(siskin.port, clients, "here-1") == (b"1", True)  # and here
        siskin.kill()  # SIGKILL: the link cut, no DISCONNECT
        assert watcher.get(20).payload == b"0"  # Mosquitto publishes the bridge's will
        assert retained(mosquitto.port, clients, "late-0") == (b"0", True)

"""The bridge (docs/bridge.md) with the nats profile against a real 3-node
NATS JetStream cluster, MQTT on every node (tests/host/nats_cluster.py).

NATS's MQTT listener: 3.1.1, QoS 0/1, no bridge bit, a topic with "." or a
space closes the connection (the bridge dead-letters those instead), and
JetStream holds a persistent session on the cluster, so the bridge can move
to another node when its node dies.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.host.bridge_edge import drain, edge, paho
from tests.host.broker_proc import BrokerProcess, Paho, wait_until
from tests.host.nats_cluster import nats_cluster, nats_single

pytestmark = pytest.mark.interop
__all__ = ["nats_cluster", "nats_single"]  # the fixtures

NATS = {"profile": "nats", "keepalive": 2, "connect_timeout": 10.0}  # a fresh node's first CONNACK can take seconds


def connected_port(siskin: BrokerProcess) -> int:
    ports = re.findall(r"bridge cloud: connected to 127\.0\.0\.1:(\d+)", siskin.log_text())
    return int(ports[-1])


def test_both_ways_qos_0_1_and_a_dead_letter(tmp_path: Path, nats_single: Any, clients: list[Paho]) -> None:
    ports = nats_single.mqtt_ports
    with edge(tmp_path, ports, **NATS) as siskin:
        cloud_sub = paho(ports[0], clients, "consumer")
        cloud_sub.subscribe("edge1/#", 1)
        dev_sub = paho(siskin.port, clients, "dev-sub")
        dev_sub.subscribe("down/#", 1)
        dev = paho(siskin.port, clients, "dev")
        for qos in (0, 1, 2):
            dev.publish(f"up/t/{qos}", b"q%d" % qos, qos)
            m = cloud_sub.get(10)
            assert (m.topic, m.payload, m.qos) == (f"edge1/t/{qos}", b"q%d" % qos, min(qos, 1))  # QoS 2 -> 1
        # A "." would make NATS close the connection: dead-lettered, the rest goes on.
        dev.publish("up/a.b", b"dotted", 1)
        dev.publish("up/after", b"after", 1)
        assert cloud_sub.get(10).payload == b"after"
        siskin.wait_log(r"dead-lettered \(1 so far\)")
        dev_sub.get_nothing(0.5)  # out and in apart upstream: nothing sent up came back down
        cmd = paho(ports[0], clients, "cmd")
        for qos in (0, 1):
            cmd.publish(f"cmd/edge1/x/{qos}", b"c%d" % qos, qos)
            m = dev_sub.get(10)
            assert (m.topic, m.payload) == (f"down/x/{qos}", b"c%d" % qos)


def test_node_killed_the_bridge_moves_nothing_lost(tmp_path: Path, nats_cluster: Any, clients: list[Paho]) -> None:
    ports = nats_cluster.mqtt_ports
    with edge(tmp_path, ports, **NATS) as siskin:
        first = connected_port(siskin)
        index = ports.index(first)
        other = ports[(index + 1) % len(ports)]
        cloud_sub = paho(other, clients, "consumer-kill", clean=False)
        cloud_sub.subscribe("edge1/#", 1)
        dev = paho(siskin.port, clients, "dev")
        dev.publish("up/k", b"before", 1)
        assert cloud_sub.get(10).payload == b"before"
        nats_cluster.kill(index)
        try:
            n = 50
            for i in range(n):
                dev.publish("up/k", b"%d" % i, 1)  # acknowledged by the edge whatever the cluster does
            wait_until(lambda: connected_port(siskin) != first or None, 60, lambda: siskin.log_text()[-3000:])
            # "before", whose PUBACK the killed node may never have sent, can
            # come again from the next node (QoS 1: at least once).
            got = drain(cloud_sub, n, 30, earlier=(b"before",))
            assert got == [b"%d" % i for i in range(n)]  # in order, none lost
        finally:
            nats_cluster.restart(index)

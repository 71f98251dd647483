"""A NATS JetStream cluster (MQTT on every node) for the host tests.

    from tests.host.nats_cluster import nats_cluster   # a module-scoped fixture

    def test_x(nats_cluster: NatsCluster) -> None:
        port_a, port_b, port_c = nats_cluster.mqtt_ports

`nats_cluster` starts 3 nodes once per test module (tools/nats_cluster.py
does the work; `python -m tools.nats_cluster` starts the same cluster by
hand) and stops them after its last test; `nats_single` is one node;
`nats_server` is the path of the binary. A test
that kills a node restarts it (`nats_cluster.restart(i)`) before it ends,
so the next test finds every node serving. Without nats-server the tests
skip, or fail under SISKIN_REQUIRE_ALL=1 (tests/conftest.py).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import require
from tools.nats_cluster import HINT, NatsCluster, nats_server_path

__all__ = ["NatsCluster", "nats_cluster", "nats_server", "nats_single", "start_cluster"]


def nats_server_binary() -> str:
    """The nats-server binary; skips (fails under SISKIN_REQUIRE_ALL=1) without one."""
    path = nats_server_path()
    require("nats-server", path, HINT)
    assert path is not None
    return path


@pytest.fixture
def nats_server() -> str:
    return nats_server_binary()


def start_cluster(tmp_path_factory: pytest.TempPathFactory, size: int) -> Iterator[NatsCluster]:
    with NatsCluster(tmp_path_factory.mktemp(f"nats{size}"), size, nats_server_binary()) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def nats_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsCluster]:
    yield from start_cluster(tmp_path_factory, 3)


@pytest.fixture(scope="module")
def nats_single(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsCluster]:
    yield from start_cluster(tmp_path_factory, 1)

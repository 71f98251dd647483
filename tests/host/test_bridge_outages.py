"""The bridge through broken links: resets, a cut with a kill -9
of Siskin during it, a silent upstream — against a real Mosquitto, the
link made and broken by a proxy the test drives (tools/link_proxy.py), on
the host and on the firmware (MicroPython unix port). Short versions of
what tools/bridge_outage.py measures over 60 s outages (make soak).
"""

from __future__ import annotations

import argparse
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require
from tests.host.bridge_edge import edge, paho
from tests.host.broker_proc import Paho, wait_until
from tests.host.test_bridge_mosquitto import mosquitto
from tests.host.test_firmware_bridge_tls import board_bridge
from tools import bridge_outage
from tools.bench.brokers import Mosquitto
from tools.link_proxy import LinkProxy

pytestmark = pytest.mark.interop
__all__ = ["mosquitto"]  # the fixture

QOS2_UP = [{"pattern": "#", "direction": "out", "local_prefix": "up/", "remote_prefix": "edge1/", "qos": 2}]


@pytest.fixture
def link(mosquitto: Mosquitto) -> Iterator[LinkProxy]:
    with LinkProxy(mosquitto.port) as proxy:
        yield proxy


def connections(log: str) -> int:
    return len(re.findall(r"bridge cloud: connected to", log))


class Flow:
    """Numbered messages published to the edge from a thread, until stopped."""

    def __init__(self, port: int, qos: int) -> None:
        self.pub = Paho.fast_publisher(port, "flow")
        self.qos = qos
        self.sent = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set() and self.sent < 60000:
            self.pub.publish("up/f", b"%d" % self.sent, self.qos, timeout=30)
            self.sent += 1

    def end(self) -> int:
        self.stop.set()
        self.thread.join(60)
        self.pub.close()
        return self.sent


def received(sub: Paho, n: int, timeout: float = 30.0) -> list[int]:
    """Every payload (as an int) until the n distinct numbers 0..n-1 came."""
    got: list[int] = []
    seen: set[int] = set()
    while len(seen) < n:
        m = sub.get(timeout)
        got.append(int(m.payload))
        seen.add(int(m.payload))
    return got


@pytest.mark.parametrize("protocol", [4, 5])
def test_link_resets_the_task_lives_on_qos2_exactly_once(
    tmp_path: Path, link: LinkProxy, mosquitto: Mosquitto, clients: list[Paho], protocol: int
) -> None:
    # Each reset while messages flow: a write may meet a transport the loop
    # just closed (uvloop: RuntimeError), which once ended the bridge's task.
    cloud_sub = paho(mosquitto.port, clients, "consumer", clean=False)
    cloud_sub.subscribe("edge1/#", 2)
    with edge(tmp_path, [link.port], topic=QOS2_UP, protocol=protocol) as siskin:
        flow = Flow(siskin.port, 2)
        for k in range(1, 9):
            wait_until(lambda k=k: flow.sent > 25 * k or None, 30, "the flow goes on")
            link.reset()
            wait_until(lambda k=k: connections(siskin.log_text()) > k or None, 30, lambda: siskin.log_text()[-2000:])
        n = flow.end()
        got = received(cloud_sub, n)
        assert sorted(got) == list(range(n))  # none lost, none twice [MQTT-4.3.3-10]
        cloud_sub.get_nothing(0.5)
        log = siskin.log_text()
        assert "fault in" not in log, log
        assert connections(log) >= 9


def outage_args(**over: Any) -> argparse.Namespace:
    """tools/bridge_outage.py's arguments for a short run."""
    args = bridge_outage.parser().parse_args(
        ["--outage", "4", "--rate", "100", "--before", "1", "--after", "2", "--settle", "20"]
    )
    for k, v in over.items():
        setattr(args, k, v)
    return args


@pytest.mark.parametrize("protocol", [4, 5])
def test_a_cut_link_and_a_kill_9_qos2_exactly_once(tmp_path: Path, protocol: int) -> None:
    # The link down (every connection reset) with QoS 2 flows in flight,
    # Siskin kill -9'd during the cut: what it acknowledged reaches the
    # upstream's subscriber once, the PUBRELs owed resent [MQTT-4.4.0-1].
    require("mosquitto", Mosquitto.available(), "apt-get install mosquitto")
    r = bridge_outage.measure(outage_args(case="cut", kill9=True, qos=2, protocol=protocol), tmp_path)
    assert r["acked_locally"] > 400, r
    assert (r["lost"], r["duplicates"], r["faults"]) == (0, 0, 0), r


def test_a_silent_upstream_never_holds_a_publisher_back(
    tmp_path: Path, link: LinkProxy, mosquitto: Mosquitto, clients: list[Paho]
) -> None:
    # The link stalls (open, silent: a hung upstream). The bridge's session
    # stays online with its queue far past the high-water mark that slows
    # the publishers of an online subscriber (max_queued_messages / 2 =
    # 150): every PUBACK comes while the upstream is still silent.
    cloud_sub = paho(mosquitto.port, clients, "consumer", clean=False)
    cloud_sub.subscribe("edge1/#", 1)
    with edge(tmp_path, [link.port], stall_timeout=1.0, keepalive=60) as siskin:
        watch = paho(siskin.port, clients, "watch")
        watch.subscribe("$SYS/broker/bridge/cloud/state", 0)
        link.stall()
        pub = Paho.fast_publisher(siskin.port, "dev")
        clients.append(pub)
        n = 400
        infos = [pub.client.publish("up/s", b"%d" % i, 1) for i in range(n)]
        for info in infos:
            info.wait_for_publish(30)
        assert all(info.is_published() for info in infos)  # all acknowledged ...
        assert link.mode == "stall"  # ... with the upstream silent
        # Seen: "stalled" ($SYS), connected still.
        wait_until(lambda: watch.get(10).payload == b"stalled" or None, 20, "state stalled")
        assert "stalled: no answer for" in siskin.log_text()
        link.up()
        got = received(cloud_sub, n)
        assert set(got) == set(range(n))


def test_firmware_link_resets_nothing_lost(
    tmp_path: Path, link: LinkProxy, mosquitto: Mosquitto, clients: list[Paho]
) -> None:
    # The same runner on the board (firmware/bridge.py's runtime).
    from tests.host.upy_broker_proc import BRIDGE_HEAP, UpyBrokerProcess

    bridge = board_bridge(link.port)
    cloud_sub = paho(mosquitto.port, clients, "consumer", clean=False)
    cloud_sub.subscribe("edge1/#", 2)
    with UpyBrokerProcess(tmp_path / "board", heap=BRIDGE_HEAP, device={"bridge": [bridge]}) as board:
        board.wait_log("bridge cloud: connected to", 15)
        dev = paho(board.port, clients, "dev")
        n = 0
        for k in range(1, 4):
            for qos in (1, 2, 1, 2):
                dev.publish("up/r", b"%d" % n, qos, timeout=30)
                n += 1
            link.reset()
            wait_until(lambda k=k: connections(board.log_text()) > k or None, 30, lambda: board.log_text()[-2000:])
        got = received(cloud_sub, n)
        assert set(got) == set(range(n))
        assert board.stop() == 0
        log = board.log_text()
        assert "Traceback" not in log and "fault in" not in log, log

"""The bridge (docs/bridge.md) against a real Mosquitto upstream on loopback.

Siskin (the edge) runs with a [[bridge]] to a Mosquitto started here
(tools/bench/brokers.py's, on a free port); paho clients publish and
subscribe on both sides. The outage is Mosquitto stopped (SIGSTOP): its
sockets stay open and silent, so the bridge must find out by keep-alive,
and every attempt meanwhile times out waiting for CONNACK; SIGCONT brings
it back.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require, tool_path
from tests.host.bridge_edge import RULES, drain, edge, paho, retried_with_back_off
from tests.host.broker_proc import BrokerProcess, Paho, wait_until
from tests.host.test_server_tls import Pki, pki
from tools.bench.brokers import Mosquitto, free_port

pytestmark = pytest.mark.interop
__all__ = ["pki"]  # the fixture, from test_server_tls


@pytest.fixture
def mosquitto(tmp_path: Path) -> Iterator[Mosquitto]:
    require("mosquitto", Mosquitto.available(), "apt-get install mosquitto")
    m = Mosquitto(tmp_path)
    m.start()
    yield m
    if m.proc is not None and m.proc.poll() is None:
        os.kill(m.pid, signal.SIGCONT)
    m.stop()


# [MQTT-7.0.0-1] the bridge is Siskin as a client of another server: a stock Mosquitto
def test_both_ways_with_remapped_prefixes(tmp_path: Path, mosquitto: Mosquitto, clients: list[Paho]) -> None:
    cloud_sub = paho(mosquitto.port, clients, "consumer")
    cloud_sub.subscribe("edge1/#", 2)
    with edge(tmp_path, [mosquitto.port]) as siskin:
        dev_sub = paho(siskin.port, clients, "dev-sub")
        dev_sub.subscribe("down/#", 2)
        dev = paho(siskin.port, clients, "dev")
        for qos in (0, 1, 2):
            dev.publish(f"up/t/{qos}", b"q%d" % qos, qos)
            m = cloud_sub.get()
            assert (m.topic, m.payload, m.qos) == (f"edge1/t/{qos}", b"q%d" % qos, qos)
        cmd = paho(mosquitto.port, clients, "cmd")
        for qos in (0, 1, 2):
            cmd.publish(f"cmd/edge1/x/{qos}", b"c%d" % qos, qos)
            m = dev_sub.get()
            assert (m.topic, m.payload, m.qos) == (f"down/x/{qos}", b"c%d" % qos, qos)
        dev.publish("elsewhere", b"not bridged", 1)
        cloud_sub.get_nothing()


def test_no_loop_with_the_bridge_bit(tmp_path: Path, mosquitto: Mosquitto, clients: list[Paho]) -> None:
    # Both ways on one prefix: Mosquitto sends nothing back to a bridge (the
    # bridge bit, 3.1.1) and the edge nothing back up (No Local locally).
    rules = [{"pattern": "#", "direction": "both", "local_prefix": "x/", "remote_prefix": "x/", "qos": 1}]
    cloud_sub = paho(mosquitto.port, clients, "consumer")
    cloud_sub.subscribe("x/#", 1)
    with edge(tmp_path, [mosquitto.port], topic=rules) as siskin:
        dev_sub = paho(siskin.port, clients, "dev-sub")
        dev_sub.subscribe("x/#", 1)
        paho(siskin.port, clients, "dev").publish("x/up", b"up", 1)
        assert cloud_sub.get().payload == b"up"
        assert dev_sub.get().payload == b"up"  # the local subscriber, once
        paho(mosquitto.port, clients, "cmd").publish("x/down", b"down", 1)
        assert dev_sub.get().payload == b"down"
        assert cloud_sub.get().payload == b"down"  # Mosquitto's own delivery, once
        cloud_sub.get_nothing(1.0)
        dev_sub.get_nothing(0.5)


def test_upstream_stopped_then_back_nothing_lost(tmp_path: Path, mosquitto: Mosquitto, clients: list[Paho]) -> None:
    cloud_sub = paho(mosquitto.port, clients, "consumer")
    cloud_sub.subscribe("edge1/#", 1)
    with edge(tmp_path, [mosquitto.port]) as siskin:
        dev = paho(siskin.port, clients, "dev")
        dev.publish("up/n", b"before", 1)
        assert cloud_sub.get().payload == b"before"
        os.kill(mosquitto.pid, signal.SIGSTOP)
        siskin.wait_log(r"bridge cloud: connection to \S+ lost", 10)
        n = 200
        for i in range(n):
            dev.publish("up/n", b"%d" % i, 1)  # every one acked by the edge
        siskin.wait_log(r"bridge cloud: cannot connect", 10)  # attempts meanwhile time out
        os.kill(mosquitto.pid, signal.SIGCONT)
        # "before" may come again: stopped between forwarding it and its
        # PUBACK reaching the bridge, Mosquitto gets it once more (QoS 1).
        got = drain(cloud_sub, n, earlier=(b"before",))
        assert got == [b"%d" % i for i in range(n)]  # in order, none lost


# The PyPy leg too: the broker on CPython and on PyPy (tests/host/conftest.py).
@pytest.mark.usefixtures("broker_runtime")
def test_kill_9_during_the_outage(tmp_path: Path, mosquitto: Mosquitto, clients: list[Paho]) -> None:
    cloud_sub = paho(mosquitto.port, clients, "consumer")
    cloud_sub.subscribe("edge1/#", 1)
    with edge(tmp_path, [mosquitto.port]) as siskin:
        dev = paho(siskin.port, clients, "dev")
        os.kill(mosquitto.pid, signal.SIGSTOP)
        n = 100
        for i in range(n):
            dev.publish("up/k", b"%d" % i, 1)
        siskin.kill()  # SIGKILL: no shutdown, no final sync
        dev.close()
        clients.remove(dev)
        siskin.start()  # same data directory
        os.kill(mosquitto.pid, signal.SIGCONT)
        got = drain(cloud_sub, n)
        assert got == [b"%d" % i for i in range(n)]


def test_sys_topics_of_the_bridge(tmp_path: Path, mosquitto: Mosquitto, clients: list[Paho]) -> None:
    with edge(tmp_path, [mosquitto.port]) as siskin:
        watch = paho(siskin.port, clients, "watch")
        watch.subscribe("$SYS/broker/bridge/cloud/#", 0)
        values: dict[str, bytes] = {}
        keys = {
            "state",
            "address",
            "queued",
            "queued_bytes",
            "sent",
            "received",
            "dead_lettered",
            "dropped",
            "last_error",
        }
        while not keys <= set(values):
            m = watch.get()
            values[m.topic.rsplit("/", 1)[1]] = m.payload
        assert values["state"] == b"connected"
        assert values["address"] == f"127.0.0.1:{mosquitto.port}".encode()
        assert values["last_error"] == b"-"
        cloud_sub = paho(mosquitto.port, clients, "consumer")
        cloud_sub.subscribe("edge1/#", 1)
        dev = paho(siskin.port, clients, "dev")
        dev.publish("up/x", b"x", 1)
        # Upstream, and its QoS 2 exchange over (counted in `sent`), before
        # Mosquitto stops: the edge's PUBACK alone does not say so, nor does
        # the cloud's copy of x; the copy of y, sent behind x's PUBREL, does.
        assert cloud_sub.get(10).topic == "edge1/x"
        dev.publish("up/y", b"y", 1)
        assert cloud_sub.get(10).topic == "edge1/y"
        os.kill(mosquitto.pid, signal.SIGSTOP)  # the bridge finds it dead: a state change
        while values["state"] != b"disconnected" or values["last_error"] == b"-":
            m = watch.get()
            values[m.topic.rsplit("/", 1)[1]] = m.payload
        assert int(values["sent"]) >= 1
        assert b"keep-alive" in values["last_error"]


def test_prometheus_metrics_of_the_bridge(tmp_path: Path, mosquitto: Mosquitto, clients: list[Paho]) -> None:
    from tests.host.test_web import scrape

    def value(samples: dict[tuple[str, Any], float], name: str) -> float:
        return samples[(name, (("bridge", "cloud"),))]

    cloud_sub = paho(mosquitto.port, clients, "consumer")
    cloud_sub.subscribe("edge1/#", 1)
    with edge(tmp_path, [mosquitto.port], http={"port": 0}) as siskin:
        url = siskin.http_url()
        dev = paho(siskin.port, clients, "dev")
        dev.publish("up/a", b"a", 1)
        dev.publish("up/b", b"b", 1)
        assert [cloud_sub.get().payload for _ in range(2)] == [b"a", b"b"]

        # (the upstream's PUBACKs may come after the consumer's copies)
        def acked() -> dict[tuple[str, Any], float] | None:
            m = scrape(url)
            return m if value(m, "siskin_bridge_sent_total") == 2 else None

        m = wait_until(acked, 5, "siskin_bridge_sent_total 2")
        assert value(m, "siskin_bridge_connected") == 1
        assert value(m, "siskin_bridge_dead_lettered_total") == 0
        os.kill(mosquitto.pid, signal.SIGSTOP)  # away: what is published now waits here
        siskin.wait_log(r"bridge cloud: connection to \S+ lost", 10)
        for i in range(3):
            dev.publish("up/q", b"%d" % i, 1)
        m = scrape(url)
        assert value(m, "siskin_bridge_connected") == 0
        assert value(m, "siskin_bridge_queued_messages") == 3
        assert value(m, "siskin_bridge_queued_bytes") == 3 * len("up/q0")


def test_firmware_bridge_both_ways(tmp_path: Path, mosquitto: Mosquitto, clients: list[Paho]) -> None:
    # The same bridge in the MicroPython firmware (unix port): the core's
    # client and bridge, firmware/bridge.py's streams. The heap is a Pico W's
    # with its code frozen, as docs/boards.md asks for once the store and a
    # bridge run (400 KB + the ~195 KB of 64-bit code kept out of it): from
    # .mpy the margin is ~3 % and the store's writes can find no block.
    from tests.host.upy_broker_proc import BRIDGE_HEAP, UpyBrokerProcess

    bridge = {
        "name": "cloud",
        "addresses": [f"127.0.0.1:{mosquitto.port}"],
        "client_id": "edge-upy",
        "keepalive": 1,
        "connect_timeout": 1.0,
        "backoff_min": 0.2,
        "backoff_max": 1.0,
        "topic": RULES,
    }
    cloud_sub = paho(mosquitto.port, clients, "consumer")
    cloud_sub.subscribe("edge1/#", 1)
    with UpyBrokerProcess(tmp_path, heap=BRIDGE_HEAP, device={"bridge": [bridge]}) as board:
        board.wait_log("bridge cloud: connected to", 15)
        dev_sub = paho(board.port, clients, "dev-sub")
        dev_sub.subscribe("down/#", 1)
        dev = paho(board.port, clients, "dev")
        for qos in (0, 1, 2):
            dev.publish(f"up/b/{qos}", b"b%d" % qos, qos)
            m = cloud_sub.get()
            assert (m.topic, m.payload) == (f"edge1/b/{qos}", b"b%d" % qos)
        paho(mosquitto.port, clients, "cmd").publish("cmd/edge1/x", b"down", 1)
        m = dev_sub.get()
        assert (m.topic, m.payload) == ("down/x", b"down")
        os.kill(mosquitto.pid, signal.SIGSTOP)  # away: the board keeps accepting
        board.wait_log(r"bridge cloud: connection to \S+ lost", 10)
        n = 30
        for i in range(n):
            dev.publish("up/n", b"%d" % i, 1)
        os.kill(mosquitto.pid, signal.SIGCONT)
        # (b1, b2 may come again: sent before the stop, their acks perhaps not back)
        assert drain(cloud_sub, n, earlier=(b"b1", b"b2")) == [b"%d" % i for i in range(n)]
        assert board.stop() == 0
        assert "Traceback" not in board.log_text(), board.log_text()


class Secured:
    """A Mosquitto with, besides its plain listener (`port`, for the test's
    clients), a mutual TLS one (`tls_port`: require_certificate, `pki`'s
    CA) and one for user edge1 with a password (`password_port`)."""

    PASSWORD = "right"

    def __init__(self, workdir: Path, pki: Pki) -> None:
        self.tls_port = free_port()
        self.password_port = free_port()
        passwd = workdir / "passwd"
        tool = tool_path("mosquitto_passwd")
        require("mosquitto_passwd", tool, "apt-get install mosquitto")
        assert tool is not None
        subprocess.run([tool, "-b", "-c", str(passwd), "edge1", self.PASSWORD], check=True, capture_output=True)
        certfile, keyfile = pki.server
        self.mosquitto = Mosquitto(
            workdir,
            [
                f"listener {self.tls_port} 127.0.0.1",
                f"cafile {pki.ca_file}",
                f"certfile {certfile}",
                f"keyfile {keyfile}",
                "require_certificate true",
                "allow_anonymous true",
                f"listener {self.password_port} 127.0.0.1",
                f"password_file {passwd}",
                "allow_anonymous false",
                "log_type notice",  # a line per refused client: attempts counted from both ends
                # As root, Mosquitto reads the files as user mosquitto, which
                # cannot enter pytest's private tmp: stay who we are.
                *(["user root"] if os.geteuid() == 0 else []),
            ],
        )


@pytest.fixture
def secured(tmp_path: Path, pki: Pki) -> Iterator[Secured]:
    require("mosquitto", Mosquitto.available(), "apt-get install mosquitto")
    s = Secured(tmp_path, pki)
    s.mosquitto.start()
    yield s
    s.mosquitto.stop()


# The PyPy leg too: the broker on CPython and on PyPy (tests/host/conftest.py).
@pytest.mark.usefixtures("broker_runtime")
def test_tls_upstream_with_a_client_certificate(
    tmp_path: Path, secured: Secured, pki: Pki, clients: list[Paho]
) -> None:
    port = secured.mosquitto.port
    cloud_sub = paho(port, clients, "consumer")
    cloud_sub.subscribe("edge1/#", 2)
    certfile, keyfile = pki.alice
    with edge(tmp_path, [secured.tls_port], cafile=pki.ca_file, certfile=certfile, keyfile=keyfile) as siskin:
        dev_sub = paho(siskin.port, clients, "dev-sub")
        dev_sub.subscribe("down/#", 2)
        dev = paho(siskin.port, clients, "dev")
        for qos in (1, 2):
            dev.publish(f"up/tls/{qos}", b"t%d" % qos, qos)
            m = cloud_sub.get()
            assert (m.topic, m.payload, m.qos) == (f"edge1/tls/{qos}", b"t%d" % qos, qos)
        cmd = paho(port, clients, "cmd")
        cmd.publish("cmd/edge1/tls", b"down", 2)
        m = dev_sub.get()
        assert (m.topic, m.payload, m.qos) == ("down/tls", b"down", 2)


def sys_values(siskin: BrokerProcess, clients: list[Paho], done: re.Pattern[str]) -> dict[str, str]:
    """$SYS/broker/bridge/cloud/... once `done` matches "state last_error"."""
    watch = paho(siskin.port, clients, "watch")
    watch.subscribe("$SYS/broker/bridge/cloud/#", 0)
    values: dict[str, str] = {}
    while not done.search(f"{values.get('state')} {values.get('last_error')}"):
        m = watch.get(10)
        values[m.topic.rsplit("/", 1)[1]] = m.payload.decode()
    return values


@pytest.mark.parametrize("case", ["wrong CA", "no client certificate", "wrong password"])
def test_a_refused_upstream_is_logged_once_per_attempt_with_back_off(
    tmp_path: Path, secured: Secured, pki: Pki, clients: list[Paho], case: str
) -> None:
    certfile, keyfile = pki.alice
    if case == "wrong CA":  # the upstream's certificate does not chain to the bridge's cafile
        port = secured.tls_port
        over = {"cafile": pki.other_ca_file, "certfile": certfile, "keyfile": keyfile}
        why = "certificate verify failed"
    elif case == "no client certificate":  # require_certificate: Mosquitto ends the handshake
        port = secured.tls_port
        over = {"cafile": pki.ca_file}
        # (TLS 1.3: the alert, or the reset when our CONNECT crossed it)
        why = "certificate required|Connection reset by peer"
    else:
        port = secured.password_port
        over = {"username": "edge1", "password": "wrong"}
        why = re.escape("CONNACK 0x05 (not authorized)")
    mosquitto = secured.mosquitto
    attempt = re.compile(rf"bridge cloud: cannot connect to 127\.0\.0\.1:{port}: (.*)")
    arrived = re.compile(rf"New connection from \S+ on port {port}\.")  # Mosquitto's line per connection
    with edge(tmp_path, [port], connected=False, **over) as siskin:
        values = sys_values(siskin, clients, re.compile(f"^disconnected .*({why})"))
        assert values["address"] == "-"
        retried_with_back_off(lambda: len(attempt.findall(siskin.log_text())))
        lines = attempt.findall(siskin.log_text())
        assert all(re.search(why, line) for line in lines), lines
        assert "bridge cloud: connected" not in siskin.log_text()
        # One line per attempt: Mosquitto saw as many connections as the
        # bridge logged refusals (give or take the attempt under way).
        n = len(attempt.findall(siskin.log_text()))

        def connections() -> int | None:
            c = len(arrived.findall(mosquitto.log_tail(100_000)))
            return c if c >= n else None

        assert wait_until(connections, 5, mosquitto.log_tail) <= n + 1

"""What NATS's MQTT listener does, pinned: the facts the bridge's "nats" profile relies on.

Against a real 3-node nats-server cluster (JetStream and MQTT on every node,
tests/host/nats_cluster.py), with paho and hand-made bytes. Each test states
what was observed with nats-server 2.9.10 (Debian 12); docs/nats.md cites
them. If a newer nats-server changes one of these, the test fails and the
profile (and docs/nats.md) must be revisited.
"""

from __future__ import annotations

import itertools
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.host.broker_proc import REPO_ROOT, Paho, RawClient, mqtt_str, publish_packet, subscribe_packet, vbi
from tests.host.nats_cluster import NatsCluster, nats_cluster, nats_server, nats_single

pytestmark = pytest.mark.interop

__all__ = ["nats_cluster", "nats_server", "nats_single"]  # fixtures, imported for pytest

CONNECT_TIMEOUT = 15.0  # a client's first CONNECT makes NATS create its session in JetStream
NATS_ACK_WAIT = 30.0  # nats-server's mqtt ack_wait default: an undelivered QoS 1 message comes again after it


@pytest.fixture
def clients() -> Iterator[list[Paho]]:
    """Paho clients a test opens; all stopped at its end, whatever happened."""
    opened: list[Paho] = []
    yield opened
    for c in opened:
        c.client.disconnect()
        c.client.loop_stop()


def paho(clients: list[Paho], port: int, client_id: str, clean: bool = True) -> Paho:
    c = Paho(port, client_id, clean=clean)
    clients.append(c)
    return c.connect(timeout=CONNECT_TIMEOUT)


def raw_connect(port: int, level: int) -> RawClient:
    """A CONNECT with protocol name "MQTT" and protocol level `level` (a v5
    CONNECT carries an empty property block), clean session, keep-alive 60.
    The client id differs per port: a clean-session CONNECT on node B just
    after the same id left node A was once closed without CONNACK ("unable
    to delete session record"), the previous session not yet gone."""
    props = b"\x00" if level == 5 else b""
    body = mqtt_str("MQTT") + bytes([level, 0x02]) + (60).to_bytes(2, "big") + props + mqtt_str(f"level-{level}-{port}")
    c = RawClient(port, timeout=CONNECT_TIMEOUT)
    c.send(b"\x10" + vbi(len(body)) + body)
    return c


def test_mqtt_needs_server_name_and_jetstream(nats_server: str, tmp_path: Path) -> None:
    # Without server_name, or (standalone) without JetStream, nats-server
    # refuses to start at all: exit status 1 and one line saying why.
    mqtt = "mqtt { listen: 127.0.0.1:-1 }\nlisten: 127.0.0.1:-1\n"
    cases = {
        "no-name.conf": (f'jetstream {{ store_dir: "{tmp_path}/js" }}\n' + mqtt, "mqtt requires server name"),
        "no-js.conf": ("server_name: x\n" + mqtt, "mqtt requires JetStream to be enabled"),
    }
    for name, (text, error) in cases.items():
        (tmp_path / name).write_text(text)
        proc = subprocess.run([nats_server, "-c", str(tmp_path / name)], capture_output=True, text=True, timeout=20)
        assert proc.returncode == 1, (name, proc.returncode, proc.stderr)
        assert error in proc.stderr, (name, proc.stderr)


def test_mqtt_311_connack_on_every_node(nats_cluster: NatsCluster) -> None:
    # Plain 3.1.1 (level 4): CONNACK 0x00, session present 0, connection kept.
    for port in nats_cluster.mqtt_ports:
        c = raw_connect(port, 4)
        try:
            assert c.read_packet(timeout=CONNECT_TIMEOUT) == (0x20, b"\x00\x00")
            assert not c.closed_within(0.5)
        finally:
            c.close()


@pytest.mark.parametrize("level", [5, 0x84], ids=["v5", "bridge-bit"])
def test_v5_and_bridge_bit_refused(nats_cluster: NatsCluster, level: int) -> None:
    # MQTT 5 (level 5) and the bridge bit (0x80 | 4, Mosquitto's bridges) are
    # both answered with a 3.1.1-form CONNACK 0x01 "unacceptable protocol
    # version" (2 bytes, no v5 reason code or properties even for a v5
    # CONNECT), then the connection is closed. Log: "unacceptable protocol
    # version of 5" / "of 132". A bridge must connect as plain level 4.
    c = raw_connect(nats_cluster.mqtt_ports[0], level)
    try:
        assert c.read_packet(timeout=CONNECT_TIMEOUT) == (0x20, b"\x00\x01")
        assert c.closed_within(5)
    finally:
        c.close()


def test_qos1_across_nodes(nats_cluster: NatsCluster, clients: list[Paho]) -> None:
    # Published with QoS 1 on node 1, received with QoS 1 on nodes 2 and 3, in order.
    port_a, port_b, port_c = nats_cluster.mqtt_ports
    subs = [paho(clients, port, f"q1-sub-{i}") for i, port in enumerate((port_b, port_c))]
    for sub in subs:
        assert [r.value for r in sub.subscribe("across/#", 1)] == [1]
    pub = paho(clients, port_a, "q1-pub")
    # A SUBACK on node 2 or 3 may come before the cluster's routes carry the
    # new subscription to node 1; a message published in between would come
    # only when NATS redelivers it (ack_wait, 30 s), out of order. Wait for
    # that state instead of for a time: a probe published on node 1 has
    # reached both subscribers (at the latest by redelivery).
    pub.publish("across/probe", b"probe", qos=1)
    for sub in subs:
        assert [m.topic for m in receive(sub, 1, NATS_ACK_WAIT + CONNECT_TIMEOUT, nats_cluster)] == ["across/probe"]
    for i in range(5):
        pub.publish(f"across/{i}", f"m{i}".encode(), qos=1)
    sent_at = time.monotonic()
    expected = [(f"across/{i}", f"m{i}".encode(), 1) for i in range(5)]
    for sub in subs:
        # In order, unless NATS missed a first delivery and sent it again
        # after its ack_wait (under stress-ng a test-repeat run got m0, m2,
        # m3, m4 and then nothing for 30 s): a message that comes later than
        # that may come out of order and twice (QoS 1), and none is lost.
        got = []
        while len({m.topic for m in got}) < 5:
            try:
                got += receive(sub, 1, 2 * NATS_ACK_WAIT + CONNECT_TIMEOUT, nats_cluster)
            except AssertionError as e:
                raise AssertionError(f"after {[(m.topic, m.payload) for m in got]}: {e}") from None
        items = [(m.topic, m.payload, m.qos) for m in got]
        if time.monotonic() - sent_at < NATS_ACK_WAIT:
            assert items == expected
        else:
            assert sorted(set(items)) == expected, items


def receive(sub: Paho, count: int, timeout: float, cluster: NatsCluster) -> list[Any]:
    """`count` messages, each within `timeout`; a shortfall names what did come and each node's log tail."""
    got: list[Any] = []
    try:
        for _ in range(count):
            got.append(sub.get(timeout=timeout))
    except AssertionError:
        logs = "\n".join(f"--- {node.name}:\n{node.log_tail(1500)}" for node in cluster.nodes)
        raise AssertionError(f"{len(got)} of {count} arrived: {[(m.topic, m.payload) for m in got]}\n{logs}") from None
    return got


def test_retained_across_nodes(nats_cluster: NatsCluster, clients: list[Paho]) -> None:
    # A retained message published on node 1 is replayed, with the retain
    # flag, to a later subscriber on node 3.
    port_a, _, port_c = nats_cluster.mqtt_ports
    paho(clients, port_a, "ret-pub").publish("ret/x", b"kept", qos=1, retain=True)  # (PUBACK: stored on node 1)
    # Node 3 learns the retained message from the cluster after the PUBACK (a
    # make test-repeat run once subscribed before it had), and replays it only
    # to a new subscription: subscribe anew until one gets it.
    deadline = time.monotonic() + NATS_ACK_WAIT + CONNECT_TIMEOUT
    for attempt in itertools.count():
        sub = paho(clients, port_c, f"ret-sub-{attempt}")
        sub.subscribe("ret/#", 1)
        try:
            msg = sub.get(timeout=2)
            break
        except AssertionError:
            assert time.monotonic() < deadline, "node 3 never replayed the retained message"
    assert (msg.topic, msg.payload, msg.retain) == ("ret/x", b"kept", True)


def test_qos2_subscription_granted_qos1(nats_cluster: NatsCluster) -> None:
    # SUBSCRIBE with QoS 2: SUBACK grants QoS 1 (a downgrade, not a refusal).
    c = RawClient(nats_cluster.mqtt_ports[0], timeout=CONNECT_TIMEOUT)
    try:
        assert c.connect("q2-sub") == b"\x00\x00"
        assert c.subscribe("q2/t", 2) == 1
    finally:
        c.close()


def test_qos2_publish_kills_connection(nats_cluster: NatsCluster, clients: list[Paho]) -> None:
    # PUBLISH with QoS 2: no PUBREC; the connection is closed (log: "publish
    # QoS=2 not supported") and the message goes nowhere. So the bridge must
    # downgrade QoS 2 to 1 itself.
    port_a, port_b, _ = nats_cluster.mqtt_ports
    sub = paho(clients, port_b, "q2-watch")
    sub.subscribe("q2p/#", 1)
    c = RawClient(port_a, timeout=CONNECT_TIMEOUT)
    try:
        assert c.connect("q2-pub") == b"\x00\x00"
        c.send(publish_packet("q2p/t", b"exactly once?", 2, 7))
        assert c.read_packet(timeout=5) is None  # closed, nothing sent before
    finally:
        c.close()
    sub.get_nothing(1.0)


def test_own_messages_come_back(nats_cluster: NatsCluster, clients: list[Paho]) -> None:
    # A client subscribed to a topic gets its own messages on it back, once
    # each (3.1.1 has no No Local, and NATS refuses the bridge bit). So the
    # nats profile refuses rules that would send up into the bridge's own
    # "in" filters: every such message would come back down.
    c = paho(clients, nats_cluster.mqtt_ports[0], "echo")
    c.subscribe("echo/#", 1)
    for i in range(3):
        c.publish(f"echo/{i}", b"mine %d" % i, qos=1)
    got = [c.get(timeout=10) for _ in range(3)]
    assert [(m.topic, m.payload) for m in got] == [(f"echo/{i}", b"mine %d" % i) for i in range(3)]
    c.get_nothing(0.5)


@pytest.mark.parametrize("topic", ["dot.ted/t", "spa ce/t"], ids=["dot", "space"])
@pytest.mark.parametrize("qos", [0, 1])
def test_topic_with_dot_or_space(nats_cluster: NatsCluster, topic: str, qos: int) -> None:
    # PUBLISH to a topic containing "." or " " (at QoS 0 and 1): no PUBACK,
    # the connection is closed (log: "characters ' ' and '.' not supported
    # for MQTT topics"). Everything behind it on that connection is lost with
    # it, so the bridge must dead-letter such a message, never send it.
    # SUBSCRIBE to such a filter instead: SUBACK 0x80 (failure), the
    # connection stays open.
    port = nats_cluster.mqtt_ports[1]
    c = RawClient(port, timeout=CONNECT_TIMEOUT)
    try:
        assert c.connect(f"bad-pub-{qos}") == b"\x00\x00"
        c.send(publish_packet(topic, b"x", qos, 3 if qos else 0))
        assert c.read_packet(timeout=5) is None
    finally:
        c.close()
    c = RawClient(port, timeout=CONNECT_TIMEOUT)
    try:
        assert c.connect(f"bad-sub-{qos}") == b"\x00\x00"
        c.send(subscribe_packet(1, topic, qos))
        assert c.read_packet() == (0x90, b"\x00\x01\x80")
        assert not c.closed_within(0.5)
    finally:
        c.close()


def test_persistent_session_moves_to_another_node_after_kill9(nats_cluster: NatsCluster, clients: list[Paho]) -> None:
    # A persistent session (3.1.1 clean session 0) on node 1, subscribed at
    # QoS 1; node 1 is killed with SIGKILL. Messages published meanwhile on
    # node 3 (each PUBACKed) are held by JetStream; the client reconnects to
    # node 2 with the same client id: CONNACK session present 1, its
    # subscription still in place, every queued message delivered, in order.
    # Node 1, restarted on its store, rejoins and routes to the session.
    port_a, port_b, port_c = nats_cluster.mqtt_ports
    first = paho(clients, port_a, "persist", clean=False)
    first.subscribe("held/#", 1)
    try:
        nats_cluster.kill(0)
        first.disconnected.wait(10)
        first.client.loop_stop()
        pub = paho(clients, port_c, "held-pub")
        for i in range(10):
            pub.publish(f"held/{i}", f"q{i}".encode(), qos=1, timeout=CONNECT_TIMEOUT)
        second = paho(clients, port_b, "persist", clean=False)
        assert second.session_present is True
        got = [second.get(timeout=CONNECT_TIMEOUT) for _ in range(10)]
        assert [(m.topic, m.payload, m.qos) for m in got] == [(f"held/{i}", f"q{i}".encode(), 1) for i in range(10)]
    finally:
        nats_cluster.restart(0)
    pub_a = paho(clients, port_a, "held-pub-a")
    pub_a.publish("held/after", b"back", qos=1, timeout=CONNECT_TIMEOUT)
    msg = second.get(timeout=CONNECT_TIMEOUT)
    assert (msg.topic, msg.payload) == ("held/after", b"back")


def test_single_node_session_survives_kill9(nats_single: NatsCluster, clients: list[Paho]) -> None:
    # One node (`python -m tools.nats_cluster --nodes 1`): QoS 1 messages
    # PUBACKed for an offline persistent session survive kill -9 of the
    # node (JetStream's file store) and arrive after its restart, in order.
    (port,) = nats_single.mqtt_ports
    sub = paho(clients, port, "single-persist", clean=False)
    sub.subscribe("one/#", 1)
    sub.client.disconnect()
    sub.disconnected.wait(5)
    pub = paho(clients, port, "single-pub")
    for i in range(5):
        pub.publish(f"one/{i}", f"s{i}".encode(), qos=1)
    nats_single.kill(0)
    nats_single.restart(0)
    again = paho(clients, port, "single-persist", clean=False)
    assert again.session_present is True
    got = [again.get(timeout=CONNECT_TIMEOUT) for _ in range(5)]
    assert [(m.topic, m.payload) for m in got] == [(f"one/{i}", f"s{i}".encode()) for i in range(5)]


def test_cli_starts_and_stops_a_cluster(nats_server: str) -> None:
    # `python -m tools.nats_cluster --nodes 1` prints the MQTT address once
    # the node gives a CONNACK, serves it, and on SIGTERM stops the node and
    # removes its temporary directory.
    proc = subprocess.Popen(
        [sys.executable, "-m", "tools.nats_cluster", "--nodes", "1", "--nats-server", nats_server],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines: list[str] = []
        while not (lines and lines[-1].startswith("Ctrl-C")):
            line = proc.stdout.readline()
            assert line, f"exited early: {''.join(lines)}{proc.stderr.read() if proc.stderr else ''}"
            lines.append(line)
        text = "".join(lines)
        m = re.search(r"mqtt 127\.0\.0\.1:(\d+)", text)
        workdir = re.search(r"configs, stores, logs: (\S+)", text)
        assert m and workdir, text
        c = RawClient(int(m.group(1)), timeout=CONNECT_TIMEOUT)
        assert c.connect("cli-probe") == b"\x00\x00"
        c.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
        assert not Path(workdir.group(1)).exists()
    finally:
        proc.kill()
        proc.wait(10)

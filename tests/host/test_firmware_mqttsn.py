"""MQTT-SN on a board: the firmware (firmware/main.py under the MicroPython
unix port, Pico W board settings) with the device config's "mqttsn" object
serves MQTT-SN v1.2 over real UDP on loopback (firmware/sn.py feeding the
core's gateway), next to its MQTT over TCP. Driven by the PyPI client
``mqtt-sn-12`` and by the hand-made datagrams of tests/host/test_mqttsn_udp.py;
paho-mqtt on the TCP side. Each test names the v1.2 section (§6.x) it drives.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mqttsn12.client.MqttSnClient import MqttSnClient

from tests.host.test_mqttsn_udp import (
    GWINFO,
    PUBACK,
    PUBLISH,
    QOS,
    REGACK,
    REGISTER,
    SEARCHGW,
    SnRaw,
    paho,
    publish_fields,
    sleep_then_flush,
    u16,
)
from tests.host.test_mqttsn_udp_keys import CLEAN, CONNECT, SUBACK, SUBSCRIBE, SealedSn
from tests.host.upy_broker_proc import PICOW_HEAP, UpyBrokerProcess

pytestmark = pytest.mark.interop


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def board(work: Path, **more: Any) -> UpyBrokerProcess:
    """The firmware with Pico W settings and an "mqttsn" object (`more` in it), started; its SN port in `sn_port`."""
    sn = {"port": free_udp_port(), "predefined": {"7": "plant/alarm"}, "max_clients": 4, **more}
    device = {"mqttsn": sn, "allow_anonymous": True}
    b = UpyBrokerProcess(work, board="rp2040_picow", heap=PICOW_HEAP, limits={"sys_interval": 1}, device=device)
    b.start()
    b.sn_port = sn["port"]
    b.wait_log(rf"MQTT-SN \(UDP\) on 127\.0\.0\.1:{sn['port']}")
    return b


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[UpyBrokerProcess]:
    # (One board per test: each SN client holds one of the board's max_connections, 4 on a Pico W.)
    b = board(tmp_path)
    try:
        yield b
        assert b.alive(), b.log_text()[-3000:]
        assert "Traceback" not in b.log_text(), b.log_text()[-3000:]
    finally:
        b.kill()


def raw(b: UpyBrokerProcess, clients: list[Any]) -> SnRaw:
    c = SnRaw(b.sn_port)
    clients.append(c)
    return c


def test_sn_publish_reaches_a_tcp_subscriber(broker: UpyBrokerProcess, clients: list[Any]) -> None:
    # §6.2 CONNECT/CONNACK, §6.5 REGISTER/REGACK, §6.6 PUBLISH QoS 1 (PUBACK): the
    # independent client's flows, to a paho subscriber of the same board
    sub = paho(broker, clients, "fw-watch", "sensors/#")
    c = MqttSnClient()
    c.set_client_id("fw-sn-pub")
    c.set_keep_alive(60)
    c.set_timeout(5)
    c.open("127.0.0.1", broker.sn_port)
    clients.append(c)
    c.send_connect()
    c.send_publish("sensors/t", b"q1", 1)
    msg = sub.get()
    assert (msg.topic, msg.payload, msg.qos) == ("sensors/t", b"q1", 1)
    # the same by hand: REGISTER, REGACK, PUBLISH QoS 1, PUBACK
    r = raw(broker, clients)
    assert r.connect("fw-sn-raw") == 0
    r.send(REGISTER, u16(0) + u16(1) + b"sensors/h")
    body = r.expect(REGACK)
    topic_id = int.from_bytes(body[0:2], "big")
    assert body[2:5] == u16(1) + b"\x00" and topic_id not in (0, 0xFFFF)
    r.publish(topic_id, b"by hand", 1, msg_id=2)
    assert r.expect(PUBACK) == u16(topic_id) + u16(2) + b"\x00"
    msg = sub.get()
    assert (msg.topic, msg.payload) == ("sensors/h", b"by hand")


def test_tcp_publish_reaches_an_sn_wildcard_subscriber(broker: UpyBrokerProcess, clients: list[Any]) -> None:
    # §6.9 SUBSCRIBE to a wildcard (SUBACK topic id 0), §6.10 the gateway's REGISTER before
    # the first PUBLISH on a topic the client has no id for (Duration 0: no keep-alive)
    r = raw(broker, clients)
    assert r.connect("fw-sn-sub", duration=0) == 0
    assert r.subscribe("w/+", 1, 1) == (0, 0)
    paho(broker, clients, "fw-pub").publish("w/a", b"one", 1)
    reg = r.expect(REGISTER)
    topic_id, msg_id, name = int.from_bytes(reg[0:2], "big"), reg[2:4], reg[4:]
    assert name == b"w/a"
    r.send(REGACK, u16(topic_id) + msg_id + b"\x00")
    flags, tid, mid, data = publish_fields(r.expect(PUBLISH))
    assert (flags & 0x60, tid, data) == (QOS[1], topic_id, b"one")
    r.send(PUBACK, u16(tid) + u16(mid) + b"\x00")


def test_sleeping_client_flushed_on_pingreq(broker: UpyBrokerProcess, clients: list[Any]) -> None:
    sleep_then_flush(raw(broker, clients), paho(broker, clients, "fw-pub2"), "fw-sleeper")


def test_malformed_datagram_counted_and_the_board_serves_on(broker: UpyBrokerProcess, clients: list[Any]) -> None:
    # §5.2 the message header: a datagram whose length octet disagrees is dropped, counted
    # in $SYS and logged; the board answers the next datagram (§6.1 SEARCHGW) and its TCP side
    watch = paho(broker, clients, "fw-sys", "$SYS/broker/mqtt-sn/refused/malformed")
    r = raw(broker, clients)
    r.sock.send(b"\x05\x04\x04")  # truncated: the length says 5
    r.send(SEARCHGW, b"\x01")
    assert r.expect(GWINFO)[0] == 1
    while watch.get(timeout=10).payload != b"1":  # published every sys_interval
        pass
    assert "MQTT-SN datagram from 127.0.0.1:" in broker.log_text()
    paho(broker, clients, "fw-after", "a/b")


def test_mqttsn_off_loopback_without_allow_remote_stops_the_start(tmp_path: Path) -> None:
    # MQTT-SN v1.2 has no authentication: on a board's Wi-Fi address the start stops and says
    # why unless the device config allows it, as the host's listener rule
    device = {"host": "0.0.0.0", "mqttsn": {"port": free_udp_port()}}
    proc = UpyBrokerProcess(tmp_path, board="rp2040_picow", heap=PICOW_HEAP, device=device)
    with pytest.raises(RuntimeError, match="allow_remote"):
        proc.start()


def test_keyed_board_seals_every_datagram(tmp_path: Path, clients: list[Any]) -> None:
    # "keys" on the board: the envelope (docs/mqtt-sn.md, Security) with cryptolib's AES under
    # the core's AES-GCM, opened and sealed by the host test's client on `cryptography`
    key = os.urandom(16).hex()
    broker = board(tmp_path, keys={"fw-s1": key})
    try:
        broker.wait_log(r"MQTT-SN \(UDP\) on 127\.0\.0\.1:\d+; 1 client keys: every datagram sealed")
        sub = paho(broker, clients, "fw-watch", "sensors/#")
        unsealed = paho(broker, clients, "fw-sys", "$SYS/broker/mqtt-sn/refused/unsealed")
        c = SealedSn(broker.sn_port, "fw-s1", key)
        clients.append(c)
        c.join()
        c.send(REGISTER, u16(0) + u16(1) + b"sensors/k")
        tid = int.from_bytes(c.expect(REGACK)[0:2], "big")
        c.send(PUBLISH, bytes([QOS[1]]) + u16(tid) + u16(2) + b"sealed")
        assert c.expect(PUBACK) == u16(tid) + u16(2) + b"\x00"
        msg = sub.get()
        assert (msg.topic, msg.payload) == ("sensors/k", b"sealed")
        c.send(SUBSCRIBE, bytes([QOS[1]]) + u16(3) + b"sensors/k")
        assert c.expect(SUBACK)[5] == 0
        sub.publish("sensors/k", b"back", 1)
        assert c.expect(PUBLISH)[5:] == b"back"  # opened with the gateway->client key
        c.sock.send(bytes([6, CONNECT, CLEAN, 0x01]) + u16(60))  # plain: refused, counted
        while unsealed.get(timeout=10).payload != b"1":  # published every sys_interval
            pass
        assert "Traceback" not in broker.log_text(), broker.log_text()[-3000:]
    finally:
        broker.kill()


def test_graceful_stop_with_an_sn_client_connected(tmp_path: Path, clients: list[Any]) -> None:
    # the board's stop ends the SN client's broker connection with the TCP ones (the gateway
    # pumps on during the shutdown), then closes the UDP socket
    broker = board(tmp_path)
    try:
        r = raw(broker, clients)
        assert r.connect("fw-sn-stop") == 0
        assert broker.stop() == 0, broker.log_text()
    finally:
        broker.kill()
    log = broker.log_text()
    assert ": 1 connection(s)" in log, log  # (shutting down)
    assert "did not close in time" not in log, log  # its connection ended, not aborted
    assert "shutdown complete" in log and "Traceback" not in log, log

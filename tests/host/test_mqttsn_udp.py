"""MQTT-SN v1.2 over real UDP: the host broker with a `protocol = "mqtt-sn"`
listener (cpython_host/transports/mqttsn_udp.py) on loopback, driven by the
PyPI client ``mqtt-sn-12`` where it has the feature and by hand-made
datagrams (written from the v1.2 spec's §5.4 layouts, not with our codec)
where it has not; paho-mqtt on the MQTT side. Each test names the v1.2
section (§6.x) of the flow it drives.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mqttsn12.client.MqttSnClient import MqttSnClient

from tests.host.broker_proc import BrokerProcess, Paho, run_cli, wait_until, write_config

pytestmark = pytest.mark.interop

# v1.2 §5.2.2 message types
SEARCHGW, GWINFO, CONNECT, CONNACK = 0x01, 0x02, 0x04, 0x05
WILLTOPICREQ, WILLTOPIC, WILLMSGREQ, WILLMSG = 0x06, 0x07, 0x08, 0x09
REGISTER, REGACK, PUBLISH, PUBACK = 0x0A, 0x0B, 0x0C, 0x0D
PUBCOMP, PUBREC, PUBREL, SUBSCRIBE, SUBACK = 0x0E, 0x0F, 0x10, 0x12, 0x13
UNSUBSCRIBE, UNSUBACK = 0x14, 0x15
PINGREQ, PINGRESP, DISCONNECT = 0x16, 0x17, 0x18
WILLTOPICUPD, WILLTOPICRESP, WILLMSGUPD, WILLMSGRESP = 0x1A, 0x1B, 0x1C, 0x1D
# §5.3.4 flags
QOS = {-1: 0x60, 0: 0x00, 1: 0x20, 2: 0x40}
RETAIN, CLEAN = 0x10, 0x04
NORMAL, PREDEFINED, SHORT = 0, 1, 2

SN_LISTENER = {"protocol": "mqtt-sn", "port": 0, "predefined": {"7": "plant/alarm"}}


def u16(n: int) -> bytes:
    return n.to_bytes(2, "big")


class SnRaw:
    """A UDP socket speaking hand-made MQTT-SN v1.2 datagrams."""

    def __init__(self, port: int) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.settimeout(5.0)
        self.sock.connect(("127.0.0.1", port))

    def send(self, mtype: int, body: bytes = b"") -> None:
        self.sock.send(bytes([len(body) + 2, mtype]) + body)

    def recv(self) -> tuple[int, bytes]:
        """(type, body) of the next datagram (either length form, §5.2.1)."""
        data = self.sock.recv(65536)
        if data[0] == 0x01:
            assert int.from_bytes(data[1:3], "big") == len(data)
            return data[3], data[4:]
        assert data[0] == len(data)
        return data[1], data[2:]

    def expect(self, mtype: int) -> bytes:
        got, body = self.recv()
        assert got == mtype, f"wanted type 0x{mtype:02x}, got 0x{got:02x} {body!r}"
        return body

    def connect(self, client_id: str, duration: int = 60, clean: bool = True) -> int:
        """§6.2 CONNECT; the CONNACK's return code."""
        self.send(CONNECT, bytes([CLEAN if clean else 0, 0x01]) + u16(duration) + client_id.encode())
        return self.expect(CONNACK)[0]

    def subscribe(self, topic: str | int, qos: int, msg_id: int, kind: int = NORMAL) -> tuple[int, int]:
        """§6.9 SUBSCRIBE; the SUBACK's (topic id, return code)."""
        name = topic.encode() if isinstance(topic, str) else u16(topic)
        self.send(SUBSCRIBE, bytes([QOS[qos] | kind]) + u16(msg_id) + name)
        body = self.expect(SUBACK)
        assert body[3:5] == u16(msg_id)
        return int.from_bytes(body[1:3], "big"), body[5]

    def publish(self, topic_id: int, data: bytes, qos: int, msg_id: int = 0, kind: int = NORMAL) -> None:
        self.send(PUBLISH, bytes([QOS[qos] | kind]) + u16(topic_id) + u16(msg_id) + data)

    def close(self) -> None:
        self.sock.close()


def publish_fields(body: bytes) -> tuple[int, int, int, bytes]:
    """A PUBLISH's (flags, topic id, msg id, data), §5.4.12."""
    return body[0], int.from_bytes(body[1:3], "big"), int.from_bytes(body[3:5], "big"), body[5:]


def start(tmp_path: Path, **args: Any) -> BrokerProcess:
    listeners = [{"port": 0}, {**SN_LISTENER, **args.pop("sn", {})}]
    b = BrokerProcess(tmp_path, listeners=listeners, **args).start()
    b.wait_log(r"listening on [0-9.:]+: MQTT-SN v1.2 over UDP")
    return b


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = start(tmp_path, limits={"sys_interval": 1})
    try:
        yield b
        assert b.alive(), b.log_text()
        assert "Traceback" not in b.log_text(), b.log_text()
    finally:
        b.kill()


def sn_port(b: BrokerProcess) -> int:
    return b.ports()[1]


def raw(b: BrokerProcess, clients: list[Any]) -> SnRaw:
    c = SnRaw(sn_port(b))
    clients.append(c)
    return c


def paho(b: BrokerProcess, clients: list[Any], client_id: str, *filters: str) -> Paho:
    c = Paho(b.port, client_id)
    clients.append(c)
    c.connect()
    for f in filters:
        c.subscribe(f, 2)
    return c


def sn12(b: BrokerProcess, clients: list[Any], client_id: str, keep_alive: int = 60) -> MqttSnClient:
    c = MqttSnClient()
    c.set_client_id(client_id)
    c.set_keep_alive(keep_alive)
    c.set_timeout(5)
    c.open("127.0.0.1", sn_port(b))
    clients.append(c)
    return c


def test_publish_qos_0_1_2_to_an_mqtt_subscriber(broker: BrokerProcess, clients: list[Any]) -> None:
    # §6.2 CONNECT/CONNACK, §6.5 REGISTER/REGACK, §6.6 PUBLISH QoS 0, QoS 1 (PUBACK),
    # QoS 2 (PUBREC, PUBREL, PUBCOMP): the independent client's flows, to a paho subscriber
    sub = paho(broker, clients, "watch", "sensors/#")
    c = sn12(broker, clients, "sn-pub")
    c.send_connect()
    for qos in (0, 1, 2):
        c.send_publish("sensors/t", b"q%d" % qos, qos)
    got = [sub.get() for _ in range(3)]
    assert [(m.topic, m.payload, m.qos) for m in got] == [("sensors/t", b"q%d" % q, q) for q in (0, 1, 2)]


def test_wildcard_subscription_register_before_publish(broker: BrokerProcess, clients: list[Any]) -> None:
    # §6.9 SUBSCRIBE to a wildcard (SUBACK topic id 0), §6.10 the gateway's REGISTER before
    # the first PUBLISH on a topic the client has no id for; QoS 1 both ways
    c = raw(broker, clients)
    assert c.connect("sn-sub") == 0
    assert c.subscribe("w/+", 1, 1) == (0, 0)
    pub = paho(broker, clients, "pub")
    pub.publish("w/a", b"one", 1)
    pub.publish("w/a", b"two", 1)
    reg = c.expect(REGISTER)  # first, before any PUBLISH
    topic_id, msg_id, name = int.from_bytes(reg[0:2], "big"), reg[2:4], reg[4:]
    assert name == b"w/a" and topic_id not in (0, 0xFFFF)
    c.send(REGACK, u16(topic_id) + msg_id + b"\x00")
    for payload in (b"one", b"two"):
        flags, tid, mid, data = publish_fields(c.expect(PUBLISH))
        assert (flags & 0x60, tid, data) == (QOS[1], topic_id, payload)
        c.send(PUBACK, u16(tid) + u16(mid) + b"\x00")
    # the independent client does the same flow (its REGACK from its own REGISTER handling)
    got: list[Any] = []

    class Listener:
        def message_arrived(self, msg: Any) -> None:
            got.append((msg.get_topic_name(), msg.get_payload()))

    c2 = sn12(broker, clients, "sn-sub2")
    c2.send_connect()
    c2.send_subscribe("x/+", 1, Listener())
    pub.publish("x/b", b"three", 1)
    wait_until(lambda: c2.polling() or got, 10, "no PUBLISH reached the mqtt-sn-12 client")
    assert got == [("x/b", b"three")]


def test_delivery_to_a_client_comes_when_the_broker_writes(broker: BrokerProcess, clients: list[Any]) -> None:
    # §6.10 with Duration 0 (no keep-alive, so the gateway has no timer running): a message
    # from the broker reaches the SN client only because the gateway wakes the listener
    r = raw(broker, clients)
    assert r.connect("sn-idle", duration=0) == 0
    ab = int.from_bytes(b"ab", "big")
    assert r.subscribe(ab, 0, 1, SHORT) == (ab, 0)
    paho(broker, clients, "pub").publish("ab", b"now", 1)
    assert publish_fields(r.expect(PUBLISH))[3] == b"now"


def test_predefined_and_short_topic_ids(broker: BrokerProcess, clients: list[Any]) -> None:
    # §6.7 predefined topic ids (the listener's predefined table) and short topic names
    sub = paho(broker, clients, "watch", "#")
    c = sn12(broker, clients, "sn-ids")
    c.send_connect()
    c.send_publish_predefined(7, b"fire", 1)
    c.send_publish("ab", b"short", 1)  # a two-character name: a short topic id
    assert [(m.topic, m.payload) for m in (sub.get(), sub.get())] == [("plant/alarm", b"fire"), ("ab", b"short")]
    # and to the SN client: a predefined subscription needs no REGISTER
    r = raw(broker, clients)
    assert r.connect("sn-ids2") == 0
    assert r.subscribe(7, 1, 1, PREDEFINED) == (7, 0)
    paho(broker, clients, "pub").publish("plant/alarm", b"again", 1)
    flags, tid, _mid, data = publish_fields(r.expect(PUBLISH))
    assert (flags & 0x03, tid, data) == (PREDEFINED, 7, b"again")


def test_qos_2_to_the_client_unsubscribe_ping_will_update_disconnect(broker: BrokerProcess, clients: list[Any]) -> None:
    # §6.10 QoS 2 to the SN client (PUBLISH, PUBREC, PUBREL, PUBCOMP), §6.11 PINGREQ/PINGRESP,
    # §6.9 UNSUBSCRIBE/UNSUBACK, §6.4 WILLTOPICUPD/WILLMSGUPD accepted (0x00), §6.12 DISCONNECT
    r = raw(broker, clients)
    assert r.connect("sn-q2") == 0
    r.send(PINGREQ)
    r.expect(PINGRESP)
    ab = int.from_bytes(b"ab", "big")
    assert r.subscribe(ab, 2, 1, SHORT) == (ab, 0)
    paho(broker, clients, "pub").publish("ab", b"twice?", 2)
    flags, tid, mid, data = publish_fields(r.expect(PUBLISH))
    assert (flags & 0x60, flags & 0x03, tid, data) == (QOS[2], SHORT, ab, b"twice?")
    r.send(PUBREC, u16(mid))
    assert r.expect(PUBREL) == u16(mid)
    r.send(PUBCOMP, u16(mid))
    r.send(UNSUBSCRIBE, bytes([SHORT]) + u16(2) + u16(ab))
    assert r.expect(UNSUBACK) == u16(2)
    r.send(WILLTOPICUPD, b"\x20w/new")
    assert r.expect(WILLTOPICRESP) == b"\x00"
    r.send(WILLMSGUPD, b"bye")
    assert r.expect(WILLMSGRESP) == b"\x00"
    r.send(DISCONNECT)
    r.expect(DISCONNECT)
    broker.wait_log(r"sn-q2 disconnected")
    r.send(PINGREQ)
    r.expect(DISCONNECT)  # forgotten: CONNECT first


def test_qos_minus_one_without_a_connection(broker: BrokerProcess, clients: list[Any]) -> None:
    # §6.8 PUBLISH QoS -1: no CONNECT, a predefined id or a short name
    sub = paho(broker, clients, "watch", "#")
    r = raw(broker, clients)
    r.publish(7, b"m1", -1, kind=PREDEFINED)
    r.publish(int.from_bytes(b"ab", "big"), b"m2", -1, kind=SHORT)
    assert [(m.topic, m.payload) for m in (sub.get(), sub.get())] == [("plant/alarm", b"m1"), ("ab", b"m2")]


def test_will_published_when_keep_alive_is_lost(broker: BrokerProcess, clients: list[Any]) -> None:
    # §6.2 the will handshake (WILLTOPICREQ, WILLTOPIC, WILLMSGREQ, WILLMSG);
    # §6.11 keep-alive: a client silent for 1.5 x its CONNECT Duration is lost, its will published
    sub = paho(broker, clients, "watch", "wills/#")
    c = sn12(broker, clients, "sn-will", keep_alive=1)
    c.set_will("wills/sn-will", "gone", 1, False)
    c.send_connect()
    msg = sub.get(timeout=10)  # the client sends nothing more
    assert (msg.topic, msg.payload) == ("wills/sn-will", b"gone")
    broker.wait_log(r"MQTT-SN client sn-will silent for 1 s: lost")


def test_retained_message_on_subscribe(broker: BrokerProcess, clients: list[Any]) -> None:
    # §6.9 SUBSCRIBE to a topic name: SUBACK with its topic id, then the retained message
    paho(broker, clients, "pub").publish("r/x", b"kept", 1, retain=True)
    r = raw(broker, clients)
    assert r.connect("sn-ret") == 0
    topic_id, rc = r.subscribe("r/x", 1, 1)
    assert rc == 0 and topic_id
    flags, tid, _mid, data = publish_fields(r.expect(PUBLISH))
    assert (flags & RETAIN, tid, data) == (RETAIN, topic_id, b"kept")


def test_acl_applies_to_an_sn_client(tmp_path: Path, clients: list[Any]) -> None:
    # an SN client is an anonymous session like any other: the ACL's pattern with %c
    # decides; a refused SUBSCRIBE gets SUBACK 0x03, a refused PUBLISH PUBACK 0x03 (§5.3.10)
    acl = [{"pattern": "sn/%c/#", "access": "readwrite"}, {"topic": "sn/#", "access": "read"}]
    b = start(tmp_path, security={"acl": acl})
    try:
        sub = paho(b, clients, "watch", "sn/#")
        r = raw(b, clients)
        assert r.connect("s1") == 0
        assert r.subscribe("other/#", 1, 1)[1] == 0x03
        r.send(REGISTER, u16(0) + u16(2) + b"sn/s2/t")
        denied = int.from_bytes(r.expect(REGACK)[0:2], "big")
        r.publish(denied, b"no", 1, msg_id=3)
        assert r.expect(PUBACK)[4] == 0x03
        r.send(REGISTER, u16(0) + u16(4) + b"sn/s1/t")
        allowed = int.from_bytes(r.expect(REGACK)[0:2], "big")
        r.publish(allowed, b"yes", 1, msg_id=5)
        assert r.expect(PUBACK)[4] == 0x00
        msg = sub.get()
        assert (msg.topic, msg.payload) == ("sn/s1/t", b"yes")  # (not the refused one before it)
        assert "Traceback" not in b.log_text()
    finally:
        b.kill()


def wake_and_collect(r: SnRaw, client_id: str, n: int) -> list[bytes]:
    """§6.14 PINGREQ with the client id: the buffered messages (REGISTER first
    where needed), each PUBACKed; then PINGRESP, which must come last."""
    r.send(PINGREQ, client_id.encode())
    got: list[bytes] = []
    while True:
        mtype, body = r.recv()
        if mtype == REGISTER:
            r.send(REGACK, body[0:2] + body[2:4] + b"\x00")
        elif mtype == PUBLISH:
            _flags, tid, mid, data = publish_fields(body)
            got.append(data)
            r.send(PUBACK, u16(tid) + u16(mid) + b"\x00")
        else:
            assert mtype == PINGRESP, f"type 0x{mtype:02x}"
            assert len(got) == n, got  # PINGRESP last: after every buffered message
            return got


def sleep_then_flush(r: SnRaw, pub: Paho, client_id: str) -> None:
    """§6.14 DISCONNECT with a Duration: asleep; what comes (3 QoS 1 from
    `pub`) is buffered in its session; PINGREQ with the client id: the
    messages, then PINGRESP last (the host's and the board's test)."""
    assert r.connect(client_id, clean=False) == 0
    assert r.subscribe("s/+", 1, 1) == (0, 0)
    r.send(DISCONNECT, u16(60))
    r.expect(DISCONNECT)
    for i in range(3):
        pub.publish("s/t", b"m%d" % i, 1)  # PUBACK: queued in the sleeping client's session
    assert wake_and_collect(r, client_id, 3) == [b"m0", b"m1", b"m2"]


def test_sleeping_client_buffered_then_flushed_on_pingreq(broker: BrokerProcess, clients: list[Any]) -> None:
    # ... and asleep again after it
    pub, r = paho(broker, clients, "pub"), raw(broker, clients)
    sleep_then_flush(r, pub, "sleeper")
    pub.publish("s/t", b"later", 1)
    assert wake_and_collect(r, "sleeper", 1) == [b"later"]


def test_will_updated_while_asleep_is_published_when_the_sleep_runs_out(
    broker: BrokerProcess, clients: list[Any]
) -> None:
    # §6.14 + §6.4: an asleep client's WILLTOPICUPD / WILLMSGUPD are answered
    # (0x00) and it stays asleep; silent past 1.5 x its sleep Duration it is
    # lost, and the broker publishes the NEW will (the old one never). A
    # PUBLISH meanwhile is refused 0x01 (PINGREQ or CONNECT first), counted.
    # A try tells only if its updates were answered within the Duration (a
    # machine stalled past 1.5 x Duration lets the sleep run out first): if
    # not, another client tries with a Duration four times longer.
    sub = paho(broker, clients, "watch", "wills/#", "$SYS/broker/mqtt-sn/refused/wrong_state")
    for duration in (3, 12, 48):
        name = f"sn-sleepy-{duration}"
        r = raw(broker, clients)
        r.send(CONNECT, bytes([0x08 | CLEAN, 0x01]) + u16(60) + name.encode())  # the Will flag
        r.expect(WILLTOPICREQ)
        r.send(WILLTOPIC, b"\x20wills/%d/old" % duration)
        r.expect(WILLMSGREQ)
        r.send(WILLMSG, b"old")
        assert r.expect(CONNACK) == b"\x00"
        started = time.monotonic()
        r.send(DISCONNECT, u16(duration))  # asleep; lost 1.5 x Duration on unless it PINGREQs
        try:
            r.expect(DISCONNECT)
            r.send(WILLTOPICUPD, b"\x20wills/%d/new" % duration)
            assert r.expect(WILLTOPICRESP) == b"\x00"
            r.send(WILLMSGUPD, b"new")
            assert r.expect(WILLMSGRESP) == b"\x00"
            r.publish(7, b"too soon", 1, msg_id=9, kind=PREDEFINED)
            assert r.expect(PUBACK) == u16(7) + u16(9) + b"\x01"
        except (AssertionError, OSError):
            if time.monotonic() - started < duration:
                raise  # answered in time, and wrongly
            continue
        if time.monotonic() - started < duration:
            break
    else:
        pytest.fail("no try was answered within its Duration (3, 12, 48 s)")
    will, counted = None, False
    while will is None or not counted:
        msg = sub.get(timeout=15 + duration)
        if msg.topic.startswith("$SYS"):
            counted = int(msg.payload) >= 1
        elif msg.topic.startswith(f"wills/{duration}/"):  # (an earlier try's will is its own)
            assert will is None, (will.topic, msg.topic)
            will = msg
    assert (will.topic, will.payload, will.qos) == (f"wills/{duration}/new", b"new", 1)
    broker.wait_log(rf"MQTT-SN client {name} asleep past its Duration: lost")
    broker.wait_log(rf"MQTT-SN client {name}: message type 0x0c refused: asleep")


def test_listener_limits_max_buffered_and_max_packet_size(tmp_path: Path, clients: list[Any]) -> None:
    # §6.14 a sleeping client's buffer is bounded by max_buffered (then queue_full decides);
    # a datagram over max_packet_size is dropped either way, counted in $SYS
    b = start(
        tmp_path, sn={"max_buffered": 2, "max_packet_size": 64}, limits={"queue_full": "drop_newest", "sys_interval": 1}
    )
    try:
        watch = paho(b, clients, "watch", "$SYS/broker/mqtt-sn/refused/too_large")
        r = raw(b, clients)
        assert r.connect("small") == 0
        assert r.subscribe("ab", 1, 1, SHORT) == (int.from_bytes(b"ab", "big"), 0)
        r.publish(int.from_bytes(b"ab", "big"), bytes(60), 1, msg_id=2, kind=SHORT)  # 67 octets: dropped
        pub = paho(b, clients, "pub")
        pub.publish("ab", bytes(58), 1)  # 65 octets as an SN PUBLISH: dropped
        pub.publish("ab", b"fits", 1)
        _flags, _tid, mid, data = publish_fields(r.expect(PUBLISH))  # (the first thing it hears)
        assert data == b"fits"
        r.send(PUBACK, b"ab" + u16(mid) + b"\x00")
        r.send(DISCONNECT, u16(60))
        r.expect(DISCONNECT)
        for i in range(3):
            pub.publish("ab", b"m%d" % i, 1)
        assert wake_and_collect(r, "small", 2) == [b"m0", b"m1"]  # the third over max_buffered
        seen = [watch.get(timeout=10).payload]
        while seen[-1] != b"2":
            seen.append(watch.get(timeout=10).payload)
    finally:
        b.kill()


def test_unacknowledged_publish_resent_with_dup_then_lost(tmp_path: Path, clients: list[Any]) -> None:
    # §6.13: the gateway's PUBLISH is sent again after retry_interval with DUP set, max_retries
    # times; then the client is lost, counted in $SYS. Duration 0: no keep-alive timer runs, so
    # the resend timer is started by the delivery itself
    b = start(tmp_path, sn={"retry_interval": 1, "max_retries": 2}, limits={"sys_interval": 1})
    try:
        watch = paho(b, clients, "watch", "$SYS/broker/mqtt-sn/refused/retries")
        r = raw(b, clients)
        assert r.connect("deaf", duration=0) == 0
        ab = int.from_bytes(b"ab", "big")
        assert r.subscribe(ab, 1, 1, SHORT) == (ab, 0)
        paho(b, clients, "pub").publish("ab", b"hear me", 1)
        flags, _tid, mid, data = publish_fields(r.expect(PUBLISH))
        assert (flags & 0x80, data) == (0, b"hear me")
        for _ in range(2):
            flags, _tid, again, data = publish_fields(r.expect(PUBLISH))
            assert (flags & 0x80, again, data) == (0x80, mid, b"hear me")
        b.wait_log(r"deaf: no ack after 2 resends: lost")
        while watch.get(timeout=10).payload != b"1":
            pass
        r.send(PINGREQ)
        r.expect(DISCONNECT)  # forgotten: CONNECT first
    finally:
        b.kill()


def test_advertise_every_interval(tmp_path: Path) -> None:
    # §6.1: ADVERTISE (gateway id, Duration) from the SN port every advertise_interval s to advertise_to
    # (a loopback socket here; a broadcast address in use: the listener sets SO_BROADCAST)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as listen:
        listen.bind(("127.0.0.1", 0))
        listen.settimeout(5.0)
        to = f"127.0.0.1:{listen.getsockname()[1]}"
        b = start(tmp_path, sn={"gw_id": 9, "advertise_interval": 1, "advertise_to": to})
        try:
            for _ in range(2):
                data, sender = listen.recvfrom(64)
                assert (data, sender[1]) == (bytes([5, 0x00, 9]) + u16(1), sn_port(b))
        finally:
            b.kill()


def test_kill_9_while_a_client_sleeps_loses_nothing(tmp_path: Path, clients: list[Any]) -> None:
    # §6.14 and §6.3 (clean flag off): the buffer of a sleeping client is its persistent session's queue: after
    # kill -9 and a restart on the same store, the client (forgotten by the gateway: its
    # PINGREQ gets DISCONNECT) CONNECTs with clean off and gets every message: 0 lost
    n = 50
    b = start(tmp_path)
    try:
        r = raw(b, clients)
        assert r.connect("sleeper", duration=600, clean=False) == 0
        assert r.subscribe("k/+", 1, 1) == (0, 0)
        r.send(DISCONNECT, u16(600))
        r.expect(DISCONNECT)
        pub = paho(b, clients, "pub")
        for i in range(n):
            pub.publish("k/t", b"%d" % i, 1)  # acknowledged: durable (store_sync = always)
        pub.close()
        clients.remove(pub)
        b.kill()  # SIGKILL: no shutdown, no final sync
        b.start()
        b.wait_log(r"listening on [0-9.:]+: MQTT-SN v1.2 over UDP")
        assert f"restored 1 sessions, 1 subscriptions, {n} queued messages" in b.log_text()
        r2 = raw(b, clients)  # the same client, a new port after the restart (its address changed)
        r2.send(PINGREQ, b"sleeper")
        r2.expect(DISCONNECT)  # the gateway has forgotten it: CONNECT again
        r2.send(CONNECT, bytes([0, 0x01]) + u16(600) + b"sleeper")
        assert r2.expect(CONNACK)[0] == 0
        got: list[bytes] = []
        while len(got) < n:
            mtype, body = r2.recv()
            if mtype == REGISTER:
                r2.send(REGACK, body[0:4] + b"\x00")
            else:
                assert mtype == PUBLISH, f"type 0x{mtype:02x}"
                _flags, tid, mid, data = publish_fields(body)
                got.append(data)
                r2.send(PUBACK, u16(tid) + u16(mid) + b"\x00")
        assert got == [b"%d" % i for i in range(n)]  # 0 lost, in order
        assert "Traceback" not in b.log_text()
    finally:
        b.kill()


def test_malformed_datagrams_refused_and_counted(broker: BrokerProcess, clients: list[Any]) -> None:
    # §5.2 the message header: a datagram whose length octets disagree with it, that is
    # cut short, of an unknown type, or a 3-octet length form below 4: dropped, counted
    # in $SYS, the listener serves on
    watch = paho(broker, clients, "watch", "$SYS/broker/mqtt-sn/refused/malformed")
    r = raw(broker, clients)
    for bad in (
        b"\x05\x04\x04",  # truncated: the length says 5
        b"\x03\x16\x00\x00",  # wrong length byte: 3 for 4 octets
        b"\x02\x20",  # an unknown (reserved) message type
        b"\x01\x00\x03\x16",  # the 3-octet form, its length below 4
        b"\x01\x00",  # the 3-octet form cut short
    ):
        r.sock.send(bad)
    r.sock.send(b"\x01\x00\x04\x16")  # a well-formed PINGREQ in the 3-octet form: answered
    assert r.recv()[0] == DISCONNECT  # (no connection from this address: CONNECT first)
    r.send(SEARCHGW, b"\x01")  # §6.1
    assert r.expect(GWINFO)[0] == 1

    seen = [watch.get(timeout=10).payload]
    while seen[-1] != b"5":  # published every sys_interval: until it shows all five
        seen.append(watch.get(timeout=10).payload)
    assert broker.log_text().count("MQTT-SN datagram from 127.0.0.1:") >= 5


def test_sn_listener_off_loopback_is_refused(tmp_path: Path) -> None:
    # v1.2 has no authentication: an SN listener off loopback needs allow_remote = true
    path = write_config(tmp_path / "sn.toml", listeners=[{**SN_LISTENER, "host": "0.0.0.0"}])
    done = run_cli("--config", str(path))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "no authentication" in lines[0] and "allow_remote = true" in lines[0], lines
    from cpython_host.config import load_config

    write_config(path, listeners=[{**SN_LISTENER, "host": "0.0.0.0", "allow_remote": True}])
    assert load_config(str(path)).listeners()[0].allow_remote  # (not bound here: loopback only in tests)


@pytest.mark.parametrize(
    ("table", "error"),
    [
        ({"host": "::1"}, None),
        ({"host": "localhost"}, None),
        ({"host": "192.0.2.7"}, "allow_remote = true"),
        ({"certfile": "server.crt", "keyfile": "server.key"}, "UDP without TLS"),
        ({"predefined": {"0": "a"}}, "wants 1..65534"),
        ({"predefined": {"1": "a/+"}}, "without wildcards"),
        ({"protocol": "mqtt", "max_clients": 4}, 'protocol is not "mqtt-sn"'),
    ],
)
def test_sn_listener_config_rules(tmp_path: Path, table: dict[str, Any], error: str | None) -> None:
    from cpython_host.config import ConfigError, load_config

    path = write_config(tmp_path / "sn.toml", listeners=[{**SN_LISTENER, **table}])
    if error is None:
        assert load_config(str(path)).listeners()[0].mqttsn
    else:
        with pytest.raises(ConfigError, match=error):
            load_config(str(path))


def test_a_gateway_fault_is_contained(caplog: pytest.LogCaptureFixture) -> None:
    # a fault of the core on one datagram or tick must not close the listener's socket
    # (asyncio closes the transport of a protocol whose callback raised) nor stop its timers
    import asyncio
    import types

    from cpython_host.transports.mqttsn_udp import SnEndpoint

    class Faulty:
        def datagram_received(self, addr: Any, data: bytes) -> None:
            raise RuntimeError("core bug")

        def pump(self) -> None:
            raise RuntimeError("core bug")

        def tick(self) -> int:
            raise RuntimeError("core bug")

        def take_datagrams(self) -> list[Any]:
            return []

    async def run() -> SnEndpoint:
        events = types.SimpleNamespace(is_stopping=lambda: False, flush_soon=lambda: None)
        listening = types.SimpleNamespace(name="127.0.0.1:1")
        ep = SnEndpoint(events, listening)  # type: ignore[arg-type]
        ep.gateway = Faulty()  # type: ignore[assignment]
        ep.datagram_received(b"\x02\x16", ("127.0.0.1", 9))  # (a pump and a tick follow it)
        assert ep.timer is not None  # re-armed after the faulty tick
        ep.close()
        return ep

    asyncio.run(run())
    faults = [r.getMessage() for r in caplog.records if "a fault of the gateway" in r.getMessage()]
    assert len(faults) == 3, faults

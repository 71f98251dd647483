"""The real host server against paho-mqtt's MQTTv5 client and raw v5 sockets."""

from __future__ import annotations

import queue
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions

from common.mqtt import consts as C
from common.mqtt.codec import FrameReader
from common.mqtt.packets import Connect, Disconnect, decode_packet, encode_packet
from tests.host.broker_proc import BrokerProcess

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("v5"), limits={"sys_interval": 0, "topic_alias_maximum": 4}) as b:
        yield b
        assert b.alive(), b.log_text()
        assert "Traceback" not in b.log_text(), b.log_text()


class V5:
    """A paho MQTTv5 client whose callbacks feed queues."""

    def __init__(self, port: int, client_id: str, clean: bool = True, props: Properties | None = None) -> None:
        self.messages: queue.Queue = queue.Queue()
        self.acks: queue.Queue = queue.Queue()
        self.disconnects: queue.Queue = queue.Queue()
        self.connack: queue.Queue = queue.Queue()
        c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5)
        c.on_connect = lambda cl, u, flags, rc, p: self.connack.put((flags, rc, p))
        c.on_message = lambda cl, u, msg: self.messages.put(msg)
        c.on_subscribe = lambda cl, u, mid, rcs, p: self.acks.put(rcs)
        c.on_disconnect = lambda cl, u, flags, rc, p: self.disconnects.put(rc)
        c.connect("127.0.0.1", port, keepalive=60, clean_start=clean, properties=props)
        c.loop_start()
        self.client = c
        self.flags, self.rc, self.props = self.connack.get(timeout=5)

    def subscribe(self, flt: str, qos: int = 0, props: Properties | None = None, **opts: bool) -> list:
        self.client.subscribe(flt, options=SubscribeOptions(qos=qos, **opts), properties=props)
        return self.acks.get(timeout=5)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


@pytest.fixture
def clients() -> Iterator[list[V5]]:
    made: list[V5] = []
    yield made
    for c in made:
        c.close()


def v5(broker: BrokerProcess, clients: list[V5], cid: str, clean: bool = True, **props: int) -> V5:
    p = Properties(PacketTypes.CONNECT)
    for name, value in props.items():
        setattr(p, name, value)
    c = V5(broker.port, cid, clean, p if props else None)
    clients.append(c)
    return c


# [MQTT-3.1.4-5] CONNACK 0x00 over TCP [MQTT-4.2-1]
def test_connack_properties(broker: BrokerProcess, clients: list[V5]) -> None:
    c = v5(broker, clients, "props")
    assert c.rc == 0
    assert c.props.TopicAliasMaximum == 4
    assert c.props.ReceiveMaximum > 0
    assert c.props.MaximumPacketSize > 0


# [MQTT-3.3.2-15] [MQTT-3.3.2-16] [MQTT-3.3.2-17] [MQTT-3.3.2-18] [MQTT-3.3.2-20]
def test_user_properties_and_request_response_pass_through(broker: BrokerProcess, clients: list[V5]) -> None:
    sub = v5(broker, clients, "rr-sub")
    sub.subscribe("req/+", 1)
    pub = v5(broker, clients, "rr-pub")
    p = Properties(PacketTypes.PUBLISH)
    p.UserProperty = [("a", "1"), ("b", "2"), ("a", "3")]
    p.ResponseTopic = "resp/x"
    p.CorrelationData = b"\x01\x02"
    p.ContentType = "text/plain"
    p.PayloadFormatIndicator = 1
    pub.client.publish("req/x", b"ping", qos=1, properties=p).wait_for_publish(5)
    msg = sub.messages.get(timeout=5)
    assert msg.payload == b"ping"
    assert msg.properties.UserProperty == [("a", "1"), ("b", "2"), ("a", "3")]
    assert msg.properties.ResponseTopic == "resp/x"
    assert msg.properties.CorrelationData == b"\x01\x02"
    assert msg.properties.ContentType == "text/plain"


# [MQTT-3.3.4-3] [MQTT-3.8.3-3]
def test_subscription_identifier_and_no_local(broker: BrokerProcess, clients: list[V5]) -> None:
    c = v5(broker, clients, "subid")
    sp = Properties(PacketTypes.SUBSCRIBE)
    sp.SubscriptionIdentifier = 42
    c.subscribe("sid/#", 0, sp)
    c.subscribe("own", 0, noLocal=True)
    c.client.publish("own", b"mine")
    # Routed after "own" on the same connection: a copy of "own" would arrive first.
    c.client.publish("sid/mark", b"after own")
    assert c.messages.get(timeout=5).topic == "sid/mark"  # No Local kept "own" away
    other = v5(broker, clients, "subid-other")
    other.client.publish("sid/a", b"x")
    msg = c.messages.get(timeout=5)
    assert msg.topic == "sid/a"
    assert msg.properties.SubscriptionIdentifier == [42]
    assert c.messages.empty()


def test_shared_subscription_spreads_messages(broker: BrokerProcess, clients: list[V5]) -> None:
    a = v5(broker, clients, "share-a")
    b = v5(broker, clients, "share-b")
    a.subscribe("$share/g/jobs", 1)
    b.subscribe("$share/g/jobs", 1)
    pub = v5(broker, clients, "share-pub")
    for i in range(10):
        pub.client.publish("jobs", bytes([i]), qos=1).wait_for_publish(5)
    per_member: dict[str, list[int]] = {"a": [], "b": []}
    deadline = time.time() + 5
    while sum(len(v) for v in per_member.values()) < 10 and time.time() < deadline:
        for name, c in (("a", a), ("b", b)):
            try:
                per_member[name].append(c.messages.get(timeout=0.1).payload[0])
            except queue.Empty:
                pass
    assert sorted(per_member["a"] + per_member["b"]) == list(range(10))  # each message once
    assert per_member["a"] and per_member["b"]  # both members got work


# [MQTT-3.1.2-23] [MQTT-3.1.2-5] [MQTT-3.2.2-3]
def test_session_expiry_and_resume(broker: BrokerProcess, clients: list[V5]) -> None:
    c = V5(broker.port, "expiring", True, _connect_props(SessionExpiryInterval=60))
    c.subscribe("exp/t", 1)
    c.client.loop_stop()
    c.client.socket().close()  # drop without DISCONNECT
    pub = v5(broker, clients, "exp-pub")
    pub.client.publish("exp/t", b"while away", qos=1).wait_for_publish(5)
    again = v5(broker, clients, "expiring", clean=False, SessionExpiryInterval=60)
    assert again.flags.session_present
    assert again.messages.get(timeout=5).payload == b"while away"


def _connect_props(**values: int) -> Properties:
    p = Properties(PacketTypes.CONNECT)
    for name, value in values.items():
        setattr(p, name, value)
    return p


# [MQTT-3.1.4-3]
def test_takeover_disconnect_reaches_old_client(broker: BrokerProcess, clients: list[V5]) -> None:
    first = v5(broker, clients, "twin")
    v5(broker, clients, "twin")
    rc = first.disconnects.get(timeout=5)
    assert rc == 0x8E  # Session taken over


def _raw_v5(port: int, client_id: str) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(encode_packet(Connect(level=5, clean_start=True, client_id=client_id), 5))
    return s


def _read_packets(s: socket.socket, seconds: float = 5.0) -> list:
    reader = FrameReader(1 << 20)
    got = []
    end = time.time() + seconds
    while time.time() < end:
        try:
            data = s.recv(65536)
        except (TimeoutError, ConnectionResetError):
            break
        if not data:
            break
        reader.feed(data)
        while (frame := reader.maybe_read_frame()) is not None:
            got.append(decode_packet(frame[0], reader.buf, frame[1], frame[2], 5))
    return got


# [MQTT-4.13.1-1] [MQTT-3.14.4-1]
def test_disconnect_reaches_client_despite_unread_input(broker: BrokerProcess) -> None:
    # The server half-closes and drains, so the DISCONNECT is not destroyed by
    # a reset even though the client keeps sending after the bad packet.
    s = _raw_v5(broker.port, "raw-bad")
    s.sendall(b"\x30\x03\x00\x05a" + b"\x00" * 200000)
    got = _read_packets(s)
    s.close()
    types = [p.ptype for p in got]
    assert types[0] == C.CONNACK
    assert got[-1].ptype == C.DISCONNECT
    assert got[-1].reason == C.RC_MALFORMED_PACKET


# [MQTT-3.2.2-15]
def test_packet_too_large_0x95(broker: BrokerProcess, tmp_path: Path) -> None:
    with BrokerProcess(tmp_path, limits={"sys_interval": 0, "max_packet_size": 1000}) as small:
        s = _raw_v5(small.port, "big")
        s.sendall(b"\x30\x80\x80\x80\x01")  # announces 2 MiB
        got = _read_packets(s)
        s.close()
        assert got[-1].ptype == C.DISCONNECT
        assert got[-1].reason == C.RC_PACKET_TOO_LARGE


# [MQTT-3.1.2-8] DISCONNECT 0x04 keeps the will
def test_clean_disconnect_with_will_message(broker: BrokerProcess, clients: list[V5]) -> None:
    watcher = v5(broker, clients, "will-watch")
    watcher.subscribe("wills/#")
    s = socket.create_connection(("127.0.0.1", broker.port), timeout=5)
    s.sendall(
        encode_packet(
            Connect(level=5, clean_start=True, client_id="willer", will_topic="wills/w", will_payload=b"bye"), 5
        )
    )
    _ = s.recv(100)
    s.sendall(encode_packet(Disconnect(C.RC_DISCONNECT_WITH_WILL, None), 5))
    assert watcher.messages.get(timeout=5).payload == b"bye"
    s.close()


def test_retained_budget_is_the_clients_and_a_refusal_is_told(tmp_path: Path) -> None:
    # The broker's own $SYS topics (about twenty, retained) stay out of
    # max_retained; a v5 QoS 1 publisher whose retained message would not be
    # kept hears PUBACK 0x97 Quota exceeded instead of a silent success.
    with BrokerProcess(tmp_path, limits={"sys_interval": 1, "max_retained": 2}) as b:
        made: list[V5] = []
        try:
            pub = v5(b, made, "retainer")
            acks: queue.Queue = queue.Queue()
            pub.client.on_publish = lambda cl, u, mid, rc, p: acks.put(rc)
            codes = []
            for i in range(3):
                pub.client.publish(f"r/{i}", b"x", qos=1, retain=True)
                codes.append(acks.get(timeout=5).value)
            # Nobody subscribes yet: kept, and 0x10 No matching subscribers.
            assert codes == [C.RC_NO_MATCHING_SUBSCRIBERS, C.RC_NO_MATCHING_SUBSCRIBERS, C.RC_QUOTA_EXCEEDED]
            late = v5(b, made, "late")
            late.subscribe("#")
            got = set()
            deadline = time.monotonic() + 5
            while len(got) < 2 and time.monotonic() < deadline:
                try:
                    got.add(late.messages.get(timeout=0.5).topic)
                except queue.Empty:
                    pass
            assert got == {"r/0", "r/1"}  # `#` does not match $SYS [MQTT-4.7.2-1]
        finally:
            for c in made:
                c.close()

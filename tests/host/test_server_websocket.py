"""MQTT over WebSockets (protocol = "websockets" listeners), over real sockets.

Clients: MQTT.js (npm `mqtt` 5.x) from Node over ws:// and wss://, and a
raw client framed by wsproto's client side, for
what the others never do (a packet split across messages, several packets
in one message, text frames, oversized messages, garbage, stalled upgrades).
A real browser is in tests/host/test_websocket_browser.py. Certificates are
made here by trustme. (paho's websockets transport is not used: it calls
str() on a bytearray, which `python -bb` makes an error.)
"""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Event,
    Ping,
    Pong,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)

from cpython_host.config import LISTENER
from tests.conftest import node_with
from tests.host.broker_proc import (
    DISCONNECT,
    REPO_ROOT,
    BrokerProcess,
    Paho,
    RawClient,
    connect_packet,
    mqtt_str,
    publish_packet,
    run_cli,
    subscribe_packet,
    toml_value,
    vbi,
    wait_until,
)
from tests.host.conftest import RUNTIMES, runtime_args

pytestmark = pytest.mark.interop

CONNECT_TIMEOUT = 2  # s
MAX_PACKET = 4096  # a message may be this + 64 KiB (cpython_host/transports/websocket.py MESSAGE_HEADROOM)
ORIGIN = "https://dash.example"
# Listener order in the module's broker.
TCP, WS, WSS, WS_ANY = range(4)


class Certs:
    def __init__(self, root: Path) -> None:
        self.ca = trustme.CA()
        self.ca_file = root / "ca.crt"
        self.ca_file.write_bytes(self.ca.cert_pem.bytes())
        leaf = self.ca.issue_cert("localhost", "127.0.0.1")
        self.cert = root / "server.crt"
        self.key = root / "server.key"
        self.cert.write_bytes(leaf.cert_chain_pems[0].bytes())
        self.key.write_bytes(leaf.private_key_pem.bytes())

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return Certs(tmp_path_factory.mktemp("ws-pki"))


def ws_listeners(certs: Certs) -> list[dict[str, Any]]:
    return [
        {"port": 0},
        {"port": 0, "protocol": "websockets"},
        {"port": 0, "protocol": "websockets", "certfile": str(certs.cert), "keyfile": str(certs.key)},
        {"port": 0, "protocol": "websockets", "path": "", "origins": [ORIGIN]},
    ]


@pytest.fixture(scope="module", params=RUNTIMES)
def broker(request: pytest.FixtureRequest, certs: Certs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One broker: plain TCP; ws:// on /mqtt; wss:// on /mqtt; ws:// on any path with an Origin list.
    On CPython's two event loops and on PyPy."""
    b = BrokerProcess(
        tmp_path_factory.mktemp(f"ws-{request.param}"),
        limits={"connect_timeout": CONNECT_TIMEOUT, "sys_interval": 0, "max_packet_size": MAX_PACKET},
        listeners=ws_listeners(certs),
        **runtime_args(request.param),
    )
    with b:
        wait_until(lambda: len(b.ports()) == 4, 5, b.log_text)
        yield b
        assert "Traceback" not in b.log_text()


class WsClient(RawClient):
    """MQTT over a WebSocket, framed by wsproto's client side: RawClient's
    send/read_packet/connect, on binary messages. What else comes (close
    frames, pongs, text) is kept in `events`, in order."""

    def __init__(
        self,
        port: int,
        path: str = "/mqtt",
        subprotocols: tuple[str, ...] = ("mqtt",),
        headers: tuple[tuple[bytes, bytes], ...] = (),
        ctx: ssl.SSLContext | None = None,
        timeout: float = 5.0,
    ) -> None:
        sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock = ctx.wrap_socket(sock, server_hostname="localhost") if ctx is not None else sock
        self.buf = b""
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.events: list[Event] = []
        self.kinds: set[str] = set()  # the kinds of data frames received
        self.answer: AcceptConnection | RejectConnection | None = None
        self.body = b""  # a refusal's text
        self.eof = False
        request = Request(host="localhost", target=path, subprotocols=list(subprotocols), extra_headers=list(headers))
        self.sock.sendall(self.ws.send(request))
        while self.answer is None and self.pump():
            pass

    def pump(self, timeout: float = 5.0) -> bool:
        """Read once and take in what came; False at the end of the stream."""
        self.sock.settimeout(timeout)
        try:
            chunk = self.sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            chunk = b""
        if not chunk:
            self.eof = True
            return False
        self.ws.receive_data(chunk)
        for event in self.ws.events():
            if isinstance(event, (AcceptConnection, RejectConnection)):
                self.answer = event
            elif isinstance(event, RejectData):
                self.body += event.data
            elif isinstance(event, BytesMessage):
                self.kinds.add("binary")
                self.buf += event.data
            elif isinstance(event, TextMessage):
                self.kinds.add("text")
            else:
                self.events.append(event)
        return True

    @property
    def accepted(self) -> bool:
        return isinstance(self.answer, AcceptConnection)

    def send(self, data: bytes) -> None:
        self.sock.sendall(self.ws.send(BytesMessage(data=data)))

    def send_event(self, event: Event) -> None:
        self.sock.sendall(self.ws.send(event))

    def read_packet(self, timeout: float = 5.0) -> tuple[int, bytes] | None:
        while True:
            parsed = self._parse()
            if parsed is not None:
                return parsed
            if self.eof or not self.pump(timeout):
                return None

    def closed_within(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while not self.eof:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            try:
                self.pump(left)
            except TimeoutError:
                return False
        return True

    def close_codes(self) -> list[int]:
        return [e.code for e in self.events if isinstance(e, CloseConnection)]


def connect5(client_id: str) -> bytes:
    """A v5 CONNECT, clean start, no properties."""
    body = mqtt_str("MQTT") + bytes([5, 0x02]) + b"\x00\x00" + b"\x00" + mqtt_str(client_id)
    return b"\x10" + vbi(len(body)) + body


def subscribe_at(level: int, packet_id: int, topic: str, qos: int) -> bytes:
    """SUBSCRIBE at protocol level 4 or 5 (v5: an empty property list)."""
    body = packet_id.to_bytes(2, "big") + (b"\x00" if level == 5 else b"") + mqtt_str(topic) + bytes([qos])
    return b"\x82" + vbi(len(body)) + body


def publish_at(level: int, topic: str, payload: bytes, qos: int = 0, packet_id: int = 0) -> bytes:
    """PUBLISH at protocol level 4 or 5 (v5: an empty property list)."""
    body = mqtt_str(topic) + (packet_id.to_bytes(2, "big") if qos else b"") + (b"\x00" if level == 5 else b"")
    return bytes([0x30 | qos << 1]) + vbi(len(body + payload)) + body + payload


def connected(c: WsClient, level: int, client_id: str) -> None:
    """CONNECT at `level`; CONNACK 0 (3.1.1) / reason 0 (v5) expected."""
    c.send(connect_packet(client_id) if level == 4 else connect5(client_id))
    pkt = c.read_packet()
    assert pkt is not None and pkt[0] == 0x20 and pkt[1][:2] == b"\x00\x00", pkt


def http_exchange(port: int, request: bytes, timeout: float = 5.0) -> bytes:
    """Send raw bytes, read until the server closes: its whole answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(request)
        out = b""
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            out += chunk
    return out


# ----------------------------------------------------------------- MQTT.js


# [MQTT-6.0.0-1] (3.1.1) [MQTT-6.0.0-4] (3.1.1)
# 5.0 [MQTT-6.0.0-1] 5.0 [MQTT-6.0.0-4]
# (MQTT.js's `ws` fails the handshake unless the server selects "mqtt", the
# subprotocol it offers, and reads only binary frames as MQTT.)
@pytest.mark.parametrize("version", [4, 5])
@pytest.mark.parametrize("scheme", ["ws", "wss"])
def test_mqtt_js_publishes_and_subscribes_at_every_qos(
    broker: BrokerProcess, certs: Certs, scheme: str, version: int
) -> None:
    node = node_with("mqtt")  # MQTT.js
    port = broker.ports()[WS if scheme == "ws" else WSS]
    host = "127.0.0.1" if scheme == "ws" else "localhost"
    env = dict(os.environ, NODE_EXTRA_CA_CERTS=str(certs.ca_file))
    proc = subprocess.run(
        [node, str(REPO_ROOT / "tests/host/mqttjs_ws.js"), f"{scheme}://{host}:{port}/mqtt", str(version)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr + broker.log_text()[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["granted"] == [2]
    got = sorted(result["got"], key=lambda m: m["qos"])
    assert got == [
        {"topic": f"js/{qos}", "payload": f"message at QoS {qos} over MQTT {version}", "qos": qos} for qos in (0, 1, 2)
    ]
    broker.wait_log(f"js-pub-{version} disconnected \\(DISCONNECT")


# -------------------------------------------------------------- raw frames


# [MQTT-6.0.0-4] (3.1.1) 5.0 [MQTT-6.0.0-4] the server selects "mqtt";
# [MQTT-6.0.0-1] (3.1.1) 5.0 [MQTT-6.0.0-1] and answers in binary frames only.
@pytest.mark.parametrize("level", [4, 5])
def test_upgrade_selects_mqtt_and_answers_in_binary_frames(broker: BrokerProcess, certs: Certs, level: int) -> None:
    for port, ctx in ((broker.ports()[WS], None), (broker.ports()[WSS], certs.client_context())):
        c = WsClient(port, subprotocols=("mqttv3.1", "mqtt"), ctx=ctx)
        assert isinstance(c.answer, AcceptConnection) and c.answer.subprotocol == "mqtt"
        connected(c, level, "raw-binary")
        c.send(subscribe_at(level, 1, "bin/t", 1))
        assert c.read_packet() is not None
        c.send(publish_at(level, "bin/t", b"x", qos=1, packet_id=2))
        kinds = {c.read_packet()[0] & 0xF0, c.read_packet()[0] & 0xF0}  # type: ignore[index]
        assert kinds == {0x30, 0x40}  # the PUBLISH to itself and the PUBACK
        assert c.kinds == {"binary"}
        c.close()


# [MQTT-6.0.0-2] (3.1.1) 5.0 [MQTT-6.0.0-2] packets are not aligned with messages or frames.
@pytest.mark.parametrize("level", [4, 5])
def test_packets_split_across_messages_and_several_in_one(broker: BrokerProcess, level: int) -> None:
    c = WsClient(broker.ports()[WS])
    connect = connect_packet(f"split-{level}") if level == 4 else connect5(f"split-{level}")
    # CONNECT in three messages, the first a single byte.
    for part in (connect[:1], connect[1:5], connect[5:]):
        c.send(part)
    pkt = c.read_packet()
    assert pkt is not None and pkt[0] == 0x20 and pkt[1][:2] == b"\x00\x00"
    # SUBSCRIBE, a PUBLISH to it and PINGREQ in one message.
    pub = publish_at(level, "split/t", b"one")
    c.send(subscribe_at(level, 1, "split/t", 0) + pub + b"\xc0\x00")
    got = [c.read_packet() for _ in range(3)]
    assert [p[0] for p in got if p] == [0x90, 0x30, 0xD0]
    # A PUBLISH fragmented over three frames of one message, the rest of a
    # PINGREQ behind it in the next message.
    pub2 = pub.replace(b"one", b"two")
    for i, part in enumerate((pub2[:3], pub2[3:7], pub2[7:] + b"\xc0")):
        c.send_event(BytesMessage(data=part, message_finished=i == 2))
    c.send(b"\x00")
    first, body = c.read_packet()  # type: ignore[misc]
    assert first == 0x30 and body.endswith(b"two")
    assert c.read_packet() == (0xD0, b"")
    c.close()


def masked_frame(payload: bytes, opcode: int = 0x2) -> bytes:
    """One final client frame (masked, as RFC 6455 requires), payload under 126 bytes."""
    key = b"\x11\x22\x33\x44"
    masked = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
    return bytes([0x80 | opcode, 0x80 | len(payload)]) + key + masked


def test_an_upgrade_request_in_pieces_with_a_frame_right_behind_it(broker: BrokerProcess) -> None:
    """The request head read in pieces (a byte at a time at first); bytes after
    it in the same read are frames, not lost with the HTTP parser."""
    request = (
        b"GET /mqtt HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
        b"Sec-WebSocket-Protocol: mqtt\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", broker.ports()[WS]), timeout=5) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(20):
            s.sendall(request[i : i + 1])
            time.sleep(0.002)
        s.sendall(request[20:] + masked_frame(connect_packet("pipelined")))
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.endswith(b"\x20\x02\x00\x00"):
            chunk = s.recv(4096)
            assert chunk, answer
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 101 ") and b"Sec-WebSocket-Protocol: mqtt" in answer
    assert answer.endswith(b"\x82\x04\x20\x02\x00\x00")  # CONNACK in a binary frame


def test_ping_gets_a_pong(broker: BrokerProcess) -> None:
    c = WsClient(broker.ports()[WS])
    c.send(connect_packet("pinger"))
    assert c.read_packet() == (0x20, b"\x00\x00")
    c.send_event(Ping(payload=b"are you there"))
    wait_until(lambda: c.pump() and any(isinstance(e, Pong) for e in c.events), 5, "no pong")
    assert [e.payload for e in c.events if isinstance(e, Pong)] == [b"are you there"]
    c.close()


def test_a_close_frame_from_the_client_is_answered_and_publishes_the_will(broker: BrokerProcess) -> None:
    watcher = Paho(broker.ports()[TCP], "will-watcher").connect()
    watcher.subscribe("will/ws", 0)
    c = WsClient(broker.ports()[WS])
    c.send(connect_packet("leaver", will=("will/ws", b"gone", 0, False)))
    assert c.read_packet() == (0x20, b"\x00\x00")
    c.send_event(CloseConnection(code=1001, reason="tab closed"))
    assert c.closed_within(5)
    assert c.close_codes()[0] == 1001  # echoed
    assert watcher.get().payload == b"gone"  # no DISCONNECT: the network connection was lost
    watcher.close()


def test_a_broker_side_close_sends_its_mqtt_output_then_a_close_frame(broker: BrokerProcess) -> None:
    c = WsClient(broker.ports()[WS])
    connected(c, 5, "twice")
    c.send(connect5("twice"))  # a second CONNECT: protocol error, DISCONNECT 0x82
    pkt = c.read_packet()
    assert pkt is not None and pkt[0] == 0xE0 and pkt[1][0] == 0x82
    assert c.closed_within(5)
    assert c.close_codes()[0] == 1000


def test_a_clean_disconnect_ends_with_a_close_frame(broker: BrokerProcess) -> None:
    c = WsClient(broker.ports()[WS])
    c.send(connect_packet("polite"))
    assert c.read_packet() == (0x20, b"\x00\x00")
    c.send(DISCONNECT)
    assert c.closed_within(5)
    assert c.close_codes()[0] == 1000


# ---------------------------------------------------------------- bad input


# [MQTT-6.0.0-1] (3.1.1) 5.0 [MQTT-6.0.0-1] another kind of data frame closes the connection.
@pytest.mark.parametrize("level", [4, 5])
def test_a_text_frame_closes_the_connection(broker: BrokerProcess, level: int) -> None:
    c = WsClient(broker.ports()[WS])
    connected(c, level, f"texter-{level}")
    c.send_event(TextMessage(data="\x10\x00 hello"))
    assert c.closed_within(5)
    assert c.close_codes()[0] == 1003
    broker.wait_log(r"a text frame \(MQTT travels in binary frames\); closed \(WebSocket close 1003\)")


def test_a_message_beyond_max_packet_size_and_headroom_is_refused(broker: BrokerProcess) -> None:
    c = WsClient(broker.ports()[WS])
    c.send(connect_packet("big-talker"))
    assert c.read_packet() == (0x20, b"\x00\x00")
    # Valid packets, each under max_packet_size, 72 KB in one message: more
    # than max_packet_size + 64 KiB.
    packet = publish_packet("void", b"v" * 3990)
    c.sock.settimeout(5)
    try:
        c.send(packet * 18)
    except (ConnectionResetError, BrokenPipeError):
        pass
    assert c.closed_within(5)
    assert 1009 in c.close_codes()
    broker.wait_log(rf"a WebSocket message of more than {MAX_PACKET + 65536} bytes")


def test_garbage_after_the_upgrade_closes_with_a_protocol_error(broker: BrokerProcess) -> None:
    c = WsClient(broker.ports()[WS])
    c.sock.sendall(connect_packet("unframed"))  # MQTT bytes without a frame
    assert c.closed_within(5)
    assert c.close_codes()[0] == 1002
    d = WsClient(broker.ports()[WS])
    frame = b"\x82" + bytes([len(b"\xc0\x00")]) + b"\xc0\x00"  # unmasked: clients must mask
    d.sock.sendall(frame)
    assert d.closed_within(5)
    assert d.close_codes()[0] == 1002
    broker.wait_log(r"WebSocket protocol error: .*; closed \(WebSocket close 1002\)")


def test_requests_that_are_not_websocket_upgrades_get_an_http_error(broker: BrokerProcess) -> None:
    port = broker.ports()[WS]
    answer = http_exchange(port, b"GET /mqtt HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n") and b"Connection: Upgrade" in answer
    answer = http_exchange(port, b"POST /mqtt HTTP/1.1\r\nHost: localhost\r\nContent-Length: 2\r\n\r\nhi")
    assert answer.startswith(b"HTTP/1.1 400 ")
    answer = http_exchange(port, connect_packet("lost"))
    assert answer.startswith(b"HTTP/1.1 400 ") and b"plain MQTT sent to a WebSocket listener?" in answer
    answer = http_exchange(port, b"GET /mqtt HTTP/1.1\r\nHost: localhost\r\nX-Pad: " + b"p" * 17000 + b"\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 431 ")
    broker.wait_log(r"WebSocket upgrade refused: not an HTTP request \(an MQTT CONNECT")


def test_a_wrong_path_is_answered_with_the_url_to_use(broker: BrokerProcess) -> None:
    """A browser's address bar (a plain GET) or an MQTT.js URL without /mqtt: the 404's
    body names the URL that serves MQTT, as the client reached the listener."""
    port = broker.ports()[WS]
    plain = http_exchange(port, f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    upgrade = http_exchange(
        port,
        f"GET /ws?x=1 HTTP/1.1\r\nHost: localhost:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
        "Sec-WebSocket-Protocol: mqtt\r\n\r\n".encode(),
    )
    for answer, host, path in ((plain, "127.0.0.1", "/"), (upgrade, "localhost", "/ws")):
        head, body = answer.split(b"\r\n\r\n", 1)
        assert head.startswith(b"HTTP/1.1 404 Not Found\r\n"), answer
        assert f"path '{path}': this listener serves '/mqtt'".encode() in body
        assert f"MQTT clients connect to ws://{host}:{port}/mqtt\n".encode() in body
    # A Host that is not a plain name and port is not echoed: the listener's address instead.
    odd = http_exchange(port, b"GET / HTTP/1.1\r\nHost: <script>\r\n\r\n")
    assert b"<script>" not in odd and f"ws://127.0.0.1:{port}/mqtt".encode() in odd


def test_the_upgrade_checks_path_subprotocol_and_origin(broker: BrokerProcess) -> None:
    def answer(port: int, **kw: Any) -> int:
        c = WsClient(broker.ports()[port], **kw)
        c.close()
        assert c.answer is not None
        return 101 if isinstance(c.answer, AcceptConnection) else c.answer.status_code

    assert answer(WS, path="/") == 404
    assert answer(WS, path="/mqtt?x=1") == 101
    assert answer(WS, subprotocols=()) == 400
    assert answer(WS, subprotocols=("mqttv3.1",)) == 400
    assert answer(WS, subprotocols=("MQTT",)) == 400
    # The listener with origins (and any path): browsers must come from ORIGIN.
    assert answer(WS_ANY, path="/ws", headers=((b"Origin", ORIGIN.encode()),)) == 101
    assert answer(WS_ANY, path="/", headers=((b"Origin", b"https://evil.example"),)) == 403
    assert answer(WS_ANY, path="/") == 101  # not a browser: no Origin
    # WS, without origins, does not check it.
    assert answer(WS, headers=((b"Origin", b"https://evil.example"),)) == 101
    broker.wait_log(r"WebSocket upgrade refused: the WebSocket subprotocol \"mqtt\" was not offered \(offered: MQTT\)")


def test_the_connect_timeout_covers_the_upgrade(broker: BrokerProcess, certs: Certs) -> None:
    # A request head that never ends.
    with socket.create_connection(("127.0.0.1", broker.ports()[WS]), timeout=10) as s:
        s.sendall(b"GET /mqtt HTTP/1.1\r\nHost: localhost\r\n")
        started = time.monotonic()
        assert s.recv(1024) == b""
        waited = time.monotonic() - started
    assert CONNECT_TIMEOUT - 0.5 < waited < CONNECT_TIMEOUT + 2
    broker.wait_log(r"closed before its WebSocket upgrade")
    # Upgraded, then no CONNECT: a close frame.
    c = WsClient(broker.ports()[WSS], ctx=certs.client_context())
    assert c.accepted
    assert c.closed_within(CONNECT_TIMEOUT + 2)
    assert c.close_codes()[0] == 1000


# ------------------------------------------------------- shutdown, memory


def test_refusals_are_counted_in_sys_and_metrics(tmp_path: Path) -> None:
    listeners = [{"port": 0}, {"port": 0, "protocol": "websockets"}]
    with BrokerProcess(tmp_path, listeners=listeners, limits={"sys_interval": 1}, http={"port": 0}) as b:
        wait_until(lambda: len(b.ports()) == 2, 5, b.log_text)
        monitor = Paho(b.ports()[0], "monitor").connect()
        monitor.subscribe("$SYS/broker/clients/websocket_refused", 0)
        assert monitor.get().payload == b"0"
        answer = http_exchange(b.ports()[1], b"GET /mqtt HTTP/1.1\r\nHost: localhost\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 400")
        c = WsClient(b.ports()[1])
        c.send_event(TextMessage(data="hello"))
        assert c.closed_within(5)
        wait_until(lambda: monitor.get().payload == b"2", 5, "websocket_refused never reached 2")
        monitor.close()
        with urllib.request.urlopen(b.http_url() + "/metrics", timeout=5) as r:
            assert "\nsiskin_websocket_refused_total 2.0\n" in r.read().decode()


def test_shutdown_says_disconnect_then_going_away(tmp_path: Path, certs: Certs) -> None:
    with BrokerProcess(tmp_path, listeners=ws_listeners(certs)[:2], limits={"sys_interval": 0}) as b:
        wait_until(lambda: len(b.ports()) == 2, 5, b.log_text)
        c = WsClient(b.ports()[WS])
        connected(c, 5, "stayer")
        b.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        pkt = c.read_packet()
        assert pkt is not None and pkt[0] == 0xE0 and pkt[1][0] == 0x8B  # DISCONNECT: server shutting down
        assert c.closed_within(5)
        assert c.close_codes()[0] == 1001
        assert b.proc.wait(10) == 0  # type: ignore[union-attr]


SNDBUF = 65536  # the flooder's send buffer below (the kernel doubles it)


def flood_beyond_every_buffer(out_buffer: int) -> int:
    """Bytes of QoS 1 PUBLISHes that a publisher which never reads its
    PUBACKs cannot get rid of unless the broker goes on reading it, on this
    kernel: the broker's receive buffer (autotuned up to tcp_rmem's maximum,
    32 MB on some kernels; how far it grows depends on timing, so a fixed
    8 MB once went through whole under load), the flooder's (2 x SNDBUF),
    and what the broker reads before it stops: PUBLISHes whose PUBACKs (4 B
    for 13 B in, counted as 4 x) fill max_out_buffer and its own send
    buffer (up to tcp_wmem's maximum)."""
    rmem_max = int(Path("/proc/sys/net/ipv4/tcp_rmem").read_text().split()[2])
    wmem_max = int(Path("/proc/sys/net/ipv4/tcp_wmem").read_text().split()[2])
    return rmem_max + 2 * SNDBUF + 4 * (wmem_max + out_buffer) + (1 << 20)


@pytest.mark.slow
def test_a_websocket_subscriber_that_never_reads_costs_bounded_memory(tmp_path: Path) -> None:
    """The write-buffer marks and pause_reading work through the adapter: a
    ws subscriber that stops reading has its QoS 0 dropped (counted), the
    broker's memory stays bounded, and a ws publisher that sends QoS 1
    without reading its PUBACKs is no longer read (its sends block)."""
    out_buffer = 262144
    limits = {"sys_interval": 1, "max_out_buffer": out_buffer, "max_packet_size": 1 << 20}
    listeners = [{"port": 0}, {"port": 0, "protocol": "websockets"}]
    with BrokerProcess(tmp_path, limits=limits, listeners=listeners, log_level="info") as b:
        wait_until(lambda: len(b.ports()) == 2, 5, b.log_text)
        slow = WsClient(b.ports()[1])
        slow.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
        slow.send(connect_packet("ws-slow"))
        assert slow.read_packet() == (0x20, b"\x00\x00")
        slow.send(subscribe_packet(1, "fire/#", 0))
        assert slow.read_packet() is not None
        monitor = Paho(b.ports()[0], "monitor").connect()
        monitor.subscribe("$SYS/broker/messages/dropped/qos0", 0)
        time.sleep(0.3)
        baseline = b.rss()
        pub = RawClient(b.ports()[0])
        pub.connect("firehose")
        packet = publish_packet("fire/hose", b"f" * 65000)
        for _ in range(25):
            pub.send(packet * 10)  # 16 MB
        pub.send(publish_packet("fire/end", b"", qos=1, packet_id=1))
        assert pub.read_packet(timeout=60) == (0x40, b"\x00\x01")
        growth = b.rss() - baseline
        assert growth < out_buffer + 65536 + 24 * 1024 * 1024, f"RSS grew by {growth / 1e6:.1f} MB"
        drops = 0
        deadline = time.monotonic() + 5
        while drops < 120 and time.monotonic() < deadline:
            drops = int(monitor.get(timeout=3).payload)
        assert drops >= 120, f"only {drops} QoS 0 drops counted"

        # A publisher that never reads: its PUBACKs fill the broker's write
        # buffer, and then the broker stops reading it.
        flooder = WsClient(b.ports()[1])
        flooder.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        flooder.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SNDBUF)  # fixed: not autotuned
        flooder.send(connect_packet("ws-flooder"))
        assert flooder.read_packet() == (0x20, b"\x00\x00")
        flooder.sock.settimeout(1)
        chunk = publish_packet("flood/t", b"", qos=1, packet_id=7) * 100  # 13 B in for each 4 B PUBACK out
        with pytest.raises(TimeoutError):
            for _ in range(flood_beyond_every_buffer(out_buffer) // len(chunk) + 1):
                flooder.send(chunk)
        assert b.alive() and "closing ws-slow" not in b.log_text()
        monitor.close()


# ------------------------------------------------------------ configuration


def test_bad_websocket_listener_settings_stop_the_start(tmp_path: Path) -> None:
    cases = [
        ({"port": 1, "path": "/mqtt"}, 'path is set but protocol is not "websockets"'),
        ({"port": 1, "origins": ["https://a.example"]}, 'origins is set but protocol is not "websockets"'),
        ({"port": 1, "protocol": "ws"}, "one of mqtt, websockets"),
        ({"port": 1, "protocol": "websockets", "path": "mqtt"}, 'wants a URL path such as "/mqtt"'),
        ({"port": 1, "protocol": "websockets", "origins": "https://a.example"}, "a list of strings"),
    ]
    for table, words in cases:
        cfg = tmp_path / "bad.toml"
        cfg.write_text("[[listener]]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in table.items()))
        proc = run_cli("--config", str(cfg))
        assert proc.returncode == 2 and words in proc.stderr, (table, proc.stderr)


def test_help_teaches_websocket_listeners() -> None:
    out = run_cli("--help").stdout
    for word in ('protocol = "websockets"', "wss://", 'path = "/mqtt"', "origins"):
        assert word in out, word


def test_linux_toml_documents_every_listener_key() -> None:
    text = (REPO_ROOT / "boards" / "linux.toml").read_text()
    shown = ("\n# {} = ", "\n{} = ", "\n# [listener.{}]")  # a key, or a table (security)
    missing = [e[0] for e in LISTENER if not any(form.format(e[0]) in text for form in shown)]
    assert not missing, f"boards/linux.toml does not show {missing} in a [[listener]] example"


def test_the_commented_websocket_listener_of_linux_toml_works(tmp_path: Path) -> None:
    """boards/linux.toml's WebSocket example, uncommented (on a free port), serves MQTT.js's default URL path."""
    text = (REPO_ROOT / "boards" / "linux.toml").read_text()
    start = text.index('# [[listener]]\n# protocol = "websockets"')
    block = text[start : text.index("\n\n", start)]
    lines = [line[2:] for line in block.splitlines() if not line.startswith("# #")]
    ours = {"port": "port = 0", "host": 'host = "127.0.0.1"'}
    lines = [ours.get(line.split(" =")[0], line) for line in lines]
    b = BrokerProcess(tmp_path)
    b.config_path.write_text(text[:start] + "\n".join(lines) + "\n" + text[start + len(block) :])
    with b:
        wait_until(lambda: len(b.ports()) == 2, 5, b.log_text)
        b.wait_log(r"also listening on 127\.0\.0\.1:\d+: MQTT over WebSocket at ws://127\.0\.0\.1:\d+/mqtt")
        c = WsClient(b.ports()[1])
        c.send(connect_packet("example"))
        assert c.read_packet() == (0x20, b"\x00\x00")
        c.close()
        assert b.stop() == 0

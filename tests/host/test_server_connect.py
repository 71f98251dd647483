"""The real host server over raw sockets: the first byte, a bad v5 CONNECT's
CONNACK, and refusals whose log line and Reason String name their limit.

The CONNECTs are tests/core/test_connect_checks.py's BAD_CONNECTS (the same
cases through the core harness).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from common.mqtt import consts as C
from common.mqtt.codec import FrameReader
from common.mqtt.packets import Connect, decode_packet, encode_packet, prop_get
from tests.core.test_connect_checks import BAD_CONNECTS
from tests.host.broker_proc import BrokerProcess, RawClient, publish_packet, vbi

pytestmark = pytest.mark.interop

# A connect timeout far beyond every wait here: a close seen is the check's.
LIMITS = {
    "connect_timeout": 30,
    "sys_interval": 0,
    "max_packet_size": 4096,
    "max_client_id_length": 8,
    "max_keepalive": 60,
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("connect"), limits=LIMITS) as b:
        yield b
        assert b.alive(), b.log_text()
        assert "Traceback" not in b.log_text(), b.log_text()


def decode5(pkt: tuple[int, bytes]) -> Any:
    first, body = pkt
    reader = FrameReader()
    reader.feed(bytes([first]) + vbi(len(body)) + body)
    frame = reader.maybe_read_frame()
    assert frame is not None
    return decode_packet(frame[0], reader.buf, frame[1], frame[2], 5)


@pytest.mark.parametrize("request_line", [b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"GET / HTTP/1.1\r\n"])
def test_http_get_closed_on_its_first_byte(broker: BrokerProcess, request_line: bytes) -> None:
    # 3.1.1 [MQTT-3.1.0-1] 5.0 [MQTT-3.1.0-1] "GET " announces 69 bytes of body: closed at once, with
    # no CONNACK, not after the 30 s connect timeout
    c = RawClient(broker.port)
    c.send(request_line)
    started = time.monotonic()
    assert c.read_packet(timeout=5) is None
    assert time.monotonic() - started < 2
    broker.wait_log(r"first byte 0x47 is not a CONNECT's \(0x10\); closed without CONNACK")
    assert RawClient(broker.port).connect("after", keep_alive=30) == b"\x00\x00"


@pytest.mark.parametrize("name,raw,reason", [(n, r, rc) for n, r, rc, _ in BAD_CONNECTS], ids=[c[0] for c in BAD_CONNECTS])
def test_bad_v5_connect_gets_connack(broker: BrokerProcess, name: str, raw: bytes, reason: int) -> None:
    # 5.0 [MQTT-3.1.4-1] 5.0 [MQTT-4.13.1-1] CONNACK 0x81/0x82/0x84 with a
    # Reason String, then closed (5.0 [MQTT-3.2.2-7]); no session present
    # with a refusal (5.0 [MQTT-3.2.2-6])
    c = RawClient(broker.port)
    c.send(raw)
    pkt = c.read_packet()
    assert pkt is not None and pkt[0] == 0x20, f"{name}: {pkt!r}"
    ack = decode5(pkt)
    assert (ack.reason, ack.session_present) == (reason, False), name
    assert prop_get(ack.props, C.PROP_REASON_STRING), name
    assert c.read_packet() is None
    broker.wait_log(rf"closing #\d+: .*; sent CONNACK reason 0x{reason:02x}")


@pytest.mark.parametrize("name,raw", [(n, r) for n, _, _, r in BAD_CONNECTS if r is not None], ids=[c[0] for c in BAD_CONNECTS if c[3] is not None])
def test_bad_v311_connect_closed_without_connack(broker: BrokerProcess, name: str, raw: bytes) -> None:
    # 3.1.1 [MQTT-3.1.4-1] 3.1.1 [MQTT-3.2.2-6] 3.1.1: closed, no CONNACK
    c = RawClient(broker.port)
    c.send(raw)
    assert c.read_packet() is None, name


def test_packet_too_large_names_the_limit(broker: BrokerProcess) -> None:
    # Refused from the fixed header: the DISCONNECT's Reason String and the
    # log line name max_packet_size and its value
    c = RawClient(broker.port)
    c.send(encode_packet(Connect(level=5, clean_start=True, keep_alive=30, client_id="big5"), 5))
    assert c.read_packet() is not None
    c.send(b"\x30\x9e\x80\x80\x05")  # 5 bytes of header announcing 10485790: 10485795 in all
    pkt = c.read_packet()
    assert pkt is not None and pkt[0] == 0xE0
    d = decode5(pkt)
    assert d.reason == C.RC_PACKET_TOO_LARGE
    text = "packet of 10485795 bytes over max_packet_size 4096"
    assert prop_get(d.props, C.PROP_REASON_STRING) == text
    broker.wait_log(re.escape("closing big5: " + text + "; sent DISCONNECT reason 0x95"))
    c = RawClient(broker.port)
    assert c.connect("big4", keep_alive=30) == b"\x00\x00"
    big = publish_packet("t", b"x" * 5000)
    c.send(big)
    assert c.read_packet() is None
    broker.wait_log(re.escape(f"closing big4: packet of {len(big)} bytes over max_packet_size 4096; sent no code"))


def test_refusals_log_the_code_the_client_received(broker: BrokerProcess) -> None:
    # 3.1.1 [MQTT-3.1.3-9] 3.1.1 [MQTT-3.2.2-5] a 3.1.1 refusal is logged
    # with its return code (0x02), not the v5 reason (0x85), and the limit
    # with its value; 5.0 [MQTT-3.1.3-8] v5: CONNACK 0x85
    c = RawClient(broker.port)
    assert c.connect("much-too-long") == b"\x00\x02"
    broker.wait_log(re.escape("client id of 13 characters over max_client_id_length 8; sent CONNACK return code 0x02"))
    c = RawClient(broker.port)
    assert c.connect("ka", keep_alive=120) == b"\x00\x02"
    broker.wait_log(re.escape("keep-alive 120 s outside max_keepalive 60 s (0 = none); sent CONNACK return code 0x02"))
    # v5: reason 0x85 with the same words as its Reason String
    c = RawClient(broker.port)
    c.send(encode_packet(Connect(level=5, clean_start=True, client_id="much-too-long"), 5))
    pkt = c.read_packet()
    assert pkt is not None
    ack = decode5(pkt)
    why = "client id of 13 characters over max_client_id_length 8"
    assert (ack.reason, prop_get(ack.props, C.PROP_REASON_STRING)) == (C.RC_CLIENT_IDENTIFIER_NOT_VALID, why)
    broker.wait_log(re.escape(why + "; sent CONNACK reason 0x85"))

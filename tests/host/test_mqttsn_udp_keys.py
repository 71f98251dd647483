"""A keyed MQTT-SN listener over real UDP (docs/mqtt-sn.md, Security): the
host broker with `keys` on its `protocol = "mqtt-sn"` listener, a client side
written here from the envelope's wire format on `cryptography` alone
(AESGCM, and HKDF from cryptography.hazmat: not the core's), datagrams
made by hand from the v1.2 spec's §5.4 layouts; paho-mqtt on the MQTT side.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from tests.host.broker_proc import BrokerProcess, Paho, write_config
from tests.host.test_mqttsn_udp import paho

pytestmark = pytest.mark.interop

# v1.2 §5.2.2 message types
SEARCHGW, GWINFO, CONNECT, CONNACK = 0x01, 0x02, 0x04, 0x05
REGISTER, REGACK, PUBLISH, PUBACK = 0x0A, 0x0B, 0x0C, 0x0D
SUBSCRIBE, SUBACK, PINGREQ, PINGRESP, DISCONNECT = 0x12, 0x13, 0x16, 0x17, 0x18
CLEAN, QOS1 = 0x04, 0x20

KEYS = {"s1": os.urandom(16).hex(), "s2": os.urandom(32).hex()}


def u16(n: int) -> bytes:
    return n.to_bytes(2, "big")


def direction_key(key: bytes, info: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=len(key), salt=b"siskin-sn-envelope-v1", info=info).derive(key)


class SealedSn:
    """A keyed SN client over UDP: envelopes as docs/mqtt-sn.md writes them."""

    def __init__(self, port: int, client_id: str, key_hex: str) -> None:
        key = bytes.fromhex(key_hex)
        self.kid = client_id.encode()
        self.up = AESGCM(direction_key(key, b"client->gateway"))
        self.down = AESGCM(direction_key(key, b"gateway->client"))
        self.challenge = bytes(8)  # none yet
        self.ctr = 0
        self.down_ctr = 0
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.reopen(port)

    def reopen(self, port: int) -> None:
        """A new socket to `port` (a restarted broker); the envelope's state is kept."""
        self.sock.close()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.settimeout(5.0)
        self.sock.connect(("127.0.0.1", port))

    def header(self) -> bytes:
        return b"\x00\x01" + bytes([len(self.kid)]) + self.kid + self.challenge + self.ctr.to_bytes(4, "big")

    def ask(self) -> None:
        """A challenge request: the header alone, C = 0, nothing sealed."""
        self.sock.send(b"\x00\x01" + bytes([len(self.kid)]) + self.kid + bytes(12))

    def seal(self, mtype: int, body: bytes = b"") -> bytes:
        self.ctr += 1
        h = self.header()
        return h + self.up.encrypt(h[-12:], bytes([len(body) + 2, mtype]) + body, h)

    def send(self, mtype: int, body: bytes = b"") -> bytes:
        """Seal and send one message; the datagram (to replay it)."""
        data = self.seal(mtype, body)
        self.sock.send(data)
        return data

    def recv(self) -> tuple[int, bytes] | None:
        """(type, body) of the next sealed message; None for a challenge (taken)."""
        data = self.sock.recv(65536)
        if data[:2] == b"\x00\x02":
            n = data[2]
            assert data[3 : 3 + n] == self.kid
            self.challenge, self.ctr, self.down_ctr = data[3 + n : 3 + n + 8], 0, 0
            assert len(data) == 3 + n + 8
            return None
        assert data[:2] == b"\x00\x03", data[:2]
        assert data[2:10] == self.challenge, "not under our challenge"
        ctr = int.from_bytes(data[10:14], "big")
        assert ctr > self.down_ctr, "the gateway's counter went back"
        self.down_ctr = ctr
        msg = self.down.decrypt(data[2:14], data[14:], data[:14])
        assert msg[0] == len(msg)
        return msg[1], msg[2:]

    def expect(self, mtype: int) -> bytes:
        got = self.recv()
        assert got is not None and got[0] == mtype, f"wanted 0x{mtype:02x}, got {got!r}"
        return got[1]

    def join(self) -> None:
        """A challenge, then CONNECT -> CONNACK accepted."""
        self.ask()
        assert self.recv() is None
        self.send(CONNECT, bytes([CLEAN, 0x01]) + u16(60) + self.kid)
        assert self.expect(CONNACK) == b"\x00"

    def close(self) -> None:
        self.sock.close()


def start(tmp_path: Path) -> BrokerProcess:
    sn = {"protocol": "mqtt-sn", "port": 0, "keys": KEYS}
    b = BrokerProcess(tmp_path, listeners=[{"port": 0}, sn], limits={"sys_interval": 1}).start()
    b.wait_log(r"listening on [0-9.:]+: MQTT-SN v1.2 over UDP .*2 client keys: every datagram sealed")
    return b


def sealed(b: BrokerProcess, clients: list[Any], client_id: str) -> SealedSn:
    c = SealedSn(b.ports()[1], client_id, KEYS[client_id])
    clients.append(c)
    return c


def counted(watch: Paho, value: bytes) -> None:
    """Until the $SYS topic `watch` follows shows `value` (published every sys_interval)."""
    seen = [watch.get(timeout=10).payload]
    while seen[-1] != value:
        seen.append(watch.get(timeout=10).payload)


def test_sealed_publish_delivery_replay_and_a_restart(tmp_path: Path, clients: list[Any]) -> None:
    b = start(tmp_path)
    try:
        sub = paho(b, clients, "watch", "plant/#")
        c = sealed(b, clients, "s1")
        c.join()
        # QoS 1 from the SN client reaches the MQTT subscriber
        c.send(REGISTER, u16(0) + u16(1) + b"plant/t")
        tid = int.from_bytes(c.expect(REGACK)[0:2], "big")
        c.send(PUBLISH, bytes([QOS1]) + u16(tid) + u16(2) + b"21.5")
        assert c.expect(PUBACK)[2:5] == u16(2) + b"\x00"
        msg = sub.get()
        assert (msg.topic, msg.payload) == ("plant/t", b"21.5")
        # a delivery back to it, opened here
        c.send(SUBSCRIBE, bytes([QOS1]) + u16(3) + b"cmd/s1")
        assert c.expect(SUBACK)[5] == 0
        sub.publish("cmd/s1", b"open", 1)
        body = c.expect(PUBLISH)
        assert body[5:] == b"open"
        c.sock.send(c.seal(PUBACK, body[1:3] + body[3:5] + b"\x00"))
        # a replayed datagram: refused, counted
        watch = paho(b, clients, "sys", "$SYS/broker/mqtt-sn/refused/replayed")
        ping = c.send(PINGREQ)
        c.expect(PINGRESP)
        c.sock.send(ping)
        counted(watch, b"1")
        c.send(PINGREQ)
        c.expect(PINGRESP)  # (the replay got no answer: this one is the next)
        # a plain datagram to a keyed listener: refused; plain SEARCHGW answered in plain (§6.1)
        c.sock.send(bytes([6, CONNECT, CLEAN, 0x01]) + u16(60))
        c.sock.send(bytes([3, SEARCHGW, 0]))
        assert c.sock.recv(100) == bytes([3, GWINFO, 1])
        assert "not sealed (this listener has keys)" in b.log_text()
        # a gateway restart: nothing persisted; the old challenge is refused with a new one
        b.kill()
        b.start()
        b.wait_log(r"listening on [0-9.:]+: MQTT-SN v1.2 over UDP")
        c.reopen(b.ports()[1])
        c.send(PINGREQ)
        assert c.recv() is None  # challenged
        c.send(PINGREQ)
        c.expect(DISCONNECT)  # opened: the new run does not know the client: CONNECT again
        c.send(CONNECT, bytes([CLEAN, 0x01]) + u16(60) + b"s1")
        assert c.expect(CONNACK) == b"\x00"
        c.sock.send(ping)  # recorded in the earlier run: never opens again
        assert c.recv() is None  # (challenged, so this client takes the new one)
        assert "Traceback" not in b.log_text()
    finally:
        b.kill()


def test_a_client_id_is_bound_to_its_key(tmp_path: Path, clients: list[Any]) -> None:
    b = start(tmp_path)
    try:
        watch = paho(b, clients, "sys", "$SYS/broker/mqtt-sn/refused/wrong_key")
        c = sealed(b, clients, "s2")
        c.ask()
        assert c.recv() is None
        c.send(CONNECT, bytes([CLEAN, 0x01]) + u16(60) + b"s1")  # s2's key, s1's name
        assert c.expect(CONNACK) == b"\x03"
        counted(watch, b"1")
        liar = SealedSn(b.ports()[1], "s1", KEYS["s2"])  # s1's key id, the wrong key
        clients.append(liar)
        liar.ask()
        assert liar.recv() is None
        liar.send(CONNECT, bytes([CLEAN, 0x01]) + u16(60) + b"s1")
        bad = paho(b, clients, "sys2", "$SYS/broker/mqtt-sn/refused/bad_seal")
        counted(bad, b"1")
        assert "tag does not match" in b.log_text()
    finally:
        b.kill()


def test_keys_allow_the_listener_off_loopback(tmp_path: Path) -> None:
    # keys seal every datagram: no allow_remote needed off loopback (not bound here: loopback only in tests)
    from cpython_host.config import ConfigError, load_config

    table = {"protocol": "mqtt-sn", "port": 0, "host": "0.0.0.0"}
    path = write_config(tmp_path / "sn.toml", listeners=[table])
    with pytest.raises(ConfigError, match="give its clients keys"):
        load_config(str(path))
    write_config(path, listeners=[{**table, "keys": {"s1": KEYS["s1"]}}])
    lst = load_config(str(path)).listeners()[0]
    assert lst.keys == {"s1": KEYS["s1"]} and not lst.allow_remote
    write_config(path, listeners=[{**table, "keys": {"s1": "00" * 15}}])
    with pytest.raises(ConfigError, match="keys: s1: wants 32 or 64 hex digits"):
        load_config(str(path))

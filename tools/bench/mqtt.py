"""Raw MQTT 3.1.1 bytes for the load generator: encoded once, sent many times.

Nothing here uses common/: the generator must not share a codec (or a bug)
with the broker it measures, and it must be cheap. Every peer broker speaks
3.1.1 (amqtt speaks nothing else), so the bench uses 3.1.1 throughout; with
it every ack is exactly 4 bytes, which lets the hot loops count bytes.
"""

from __future__ import annotations

import socket
import struct
import time

PUBACK, PUBREC, PUBREL, PUBCOMP = 0x40, 0x50, 0x62, 0x70
PINGREQ = b"\xc0\x00"
PINGRESP = b"\xd0\x00"
DISCONNECT = b"\xe0\x00"
PAYLOAD_SIZE = 64
_STAMP = struct.Struct(">Q")


def vbi(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n % 128
        n //= 128
        out.append(b | 0x80 if n else b)
        if not n:
            return bytes(out)


def mqtt_str(s: str | bytes) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    return len(b).to_bytes(2, "big") + b


def connect(client_id: str, keep_alive: int = 0, clean: bool = True) -> bytes:
    body = mqtt_str("MQTT") + bytes([4, 0x02 if clean else 0]) + keep_alive.to_bytes(2, "big") + mqtt_str(client_id)
    return b"\x10" + vbi(len(body)) + body


def publish(topic: str, payload: bytes, qos: int = 0, packet_id: int = 0, retain: bool = False) -> bytes:
    body = mqtt_str(topic) + (packet_id.to_bytes(2, "big") if qos else b"") + payload
    return bytes([0x30 | (qos << 1) | (1 if retain else 0)]) + vbi(len(body)) + body


def subscribe(packet_id: int, topic_filter: str, qos: int) -> bytes:
    body = packet_id.to_bytes(2, "big") + mqtt_str(topic_filter) + bytes([qos])
    return b"\x82" + vbi(len(body)) + body


def ack(kind: int, packet_id: int) -> bytes:
    return bytes([kind, 2]) + packet_id.to_bytes(2, "big")


def payload(seed: int = 0) -> bytes:
    """64 bytes; the first 8 are zero (room for a time stamp; zero = no stamp)."""
    return bytes(8) + bytes((seed + i) & 0xFF for i in range(8, PAYLOAD_SIZE))


def stamp_now() -> bytes:
    """8 bytes of CLOCK_MONOTONIC ns: comparable between processes of one machine."""
    return _STAMP.pack(time.monotonic_ns())


def read_stamp(buf: bytes | bytearray | memoryview, at: int) -> int:
    value: int = _STAMP.unpack_from(buf, at)[0]
    return value


def publish_batch(topic: str, qos: int, first_id: int, count: int, retain: bool = False) -> bytes:
    """`count` PUBLISHes with consecutive packet ids (wrapping in 1..65535)."""
    body = payload()
    out = []
    pid = first_id
    for _ in range(count):
        out.append(publish(topic, body, qos, pid if qos else 0, retain))
        pid = pid + 1 if pid < 65535 else 1
    return b"".join(out)


def ack_batch(kind: int, first_id: int, count: int) -> bytes:
    out = []
    pid = first_id
    for _ in range(count):
        out.append(ack(kind, pid))
        pid = pid + 1 if pid < 65535 else 1
    return b"".join(out)


# ---------------------------------------------------------------- sockets


def open_client(port: int, client_id: str, host: str = "127.0.0.1", timeout: float = 10.0) -> socket.socket:
    """A connected, CONNACKed 3.1.1 client socket (blocking, TCP_NODELAY)."""
    sock = socket.create_connection((host, port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(connect(client_id))
    connack = recv_exact(sock, 4)
    if connack[0] != 0x20 or connack[3] != 0:
        raise RuntimeError(f"CONNACK refused for {client_id}: {connack.hex()}")
    return sock


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        buf += chunk
    return bytes(buf)


def do_subscribe(sock: socket.socket, topic_filter: str, qos: int, packet_id: int = 1) -> None:
    sock.sendall(subscribe(packet_id, topic_filter, qos))
    suback = recv_exact(sock, 5)
    if suback[0] != 0x90 or suback[4] >= 0x80:
        raise RuntimeError(f"SUBACK refused for {topic_filter}: {suback.hex()}")


def parse(buf: bytearray, start: int, out: list[tuple[int, int, int]]) -> int:
    """Append (first byte, body start, body end) for each whole packet in buf[start:].

    Returns the offset of the first incomplete byte (the caller keeps
    buf[that:] for the next read).
    """
    n = len(buf)
    i = start
    while i + 2 <= n:
        first = buf[i]
        b = buf[i + 1]
        if b < 0x80:
            length = b
            j = i + 2
        else:
            length = b & 0x7F
            mult = 128
            j = i + 2
            while True:
                if j >= n:
                    return i
                b = buf[j]
                j += 1
                length += (b & 0x7F) * mult
                mult *= 128
                if b < 0x80:
                    break
        end = j + length
        if end > n:
            return i
        out.append((first, j, end))
        i = end
    return i

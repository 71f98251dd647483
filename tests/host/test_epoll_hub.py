"""The epoll hub's own behaviour (cpython_host/transports/epoll_hub.py), on real sockets.

Plain MQTT listeners are served by the host's own epoll instead of asyncio's
transports ([server] epoll_hub, on by default): what a transport did, the
hub does itself. Each test drives a real broker (on CPython and on PyPy)
with raw sockets into one of those paths: output the kernel does not take
at once, the peer's EOF behind its last input, a reset with and without
output waiting, connections beyond max_connections; and the switch back to
asyncio's transports.
"""

from __future__ import annotations

import os
import re
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.broker.broker import REFUSAL_SLOTS
from tests.host.broker_proc import (
    BrokerProcess,
    Paho,
    RawClient,
    connect_packet,
    connect_when_served,
    parse_publish,
    puback_packet,
    publish_packet,
    wait_until,
)
from tests.host.conftest import RUNTIMES, runtime_args

pytestmark = pytest.mark.interop

# Big messages for a reader that does not read: more in all than the
# kernel's send buffer can ever grow to (tcp_wmem's maximum) plus a margin
# for the reader's small receive buffer, so that some of it must wait in the
# hub's own buffer for EPOLLOUT.
PAYLOAD = 512 * 1024
# The reader's SO_RCVBUF: fixed (no autotuning), yet more than two of
# loopback's 64 KiB segments, or the window would reopen only on TCP's
# persist timer (~13 s per message).
SMALL_RCVBUF = 256 * 1024


def tcp_wmem_max() -> int:
    with open("/proc/sys/net/ipv4/tcp_wmem") as f:
        return int(f.read().split()[2])


BIG_MESSAGES = (tcp_wmem_max() + 2 * SMALL_RCVBUF + 2 * 1024 * 1024) // PAYLOAD + 1  # (Linux doubles SO_RCVBUF)
# Payload i: a run of 251 distinct bytes (a prime: no chunk size the kernel
# or the hub cuts at is a multiple of it) started at i, so that a piece lost,
# doubled or out of place anywhere in the stream changes what arrives.
_PATTERN = bytes(range(251)) * (PAYLOAD // 251 + 2)


def payload(i: int) -> bytes:
    return _PATTERN[i % 251 : i % 251 + PAYLOAD]


@pytest.fixture
def broker(tmp_path: Path, broker_runtime: str) -> Iterator[BrokerProcess]:
    limits = {"sys_interval": 0, "max_packet_size": 2 * PAYLOAD, "max_inflight": BIG_MESSAGES + 4}
    with BrokerProcess(tmp_path, limits=limits) as b:
        b.wait_log(r"listening on 127\.0\.0\.1:\d+ .*: plain MQTT \(epoll hub\); loopback only")
        yield b
        assert b.alive(), b.log_text()
        assert "Traceback" not in b.log_text(), b.log_text()


def publish_big(port: int, topic: str) -> None:
    """BIG_MESSAGES QoS 1 messages to `topic`, each acknowledged (so routed)."""
    pub = RawClient(port)
    assert pub.connect(f"big-{topic}") == b"\x00\x00"
    for i in range(BIG_MESSAGES):
        pub.send(publish_packet(topic, payload(i), 1, packet_id=i + 1))
    for i in range(BIG_MESSAGES):
        assert pub.read_packet() == (0x40, (i + 1).to_bytes(2, "big"))
    pub.close()


def served(port: int, name: str) -> None:
    """A new client connects and gets a QoS 1 round trip through the broker."""
    c = RawClient(port)
    assert c.connect(name) == b"\x00\x00"
    assert c.subscribe(f"check/{name}", 1) == 1
    c.send(publish_packet(f"check/{name}", b"ok", 1, packet_id=9))
    got = {c.read_packet(), c.read_packet()}  # its PUBACK and the delivery, in either order
    assert (0x40, b"\x00\x09") in got
    delivery = next(p for p in got if p is not None and p[0] & 0xF0 == 0x30)
    assert parse_publish(*delivery)[:2] == (f"check/{name}", b"ok")
    c.close()


def test_output_the_kernel_does_not_take_waits_for_the_reader_whole_and_in_order(broker: BrokerProcess) -> None:
    slow = RawClient(broker.port, rcvbuf=SMALL_RCVBUF)
    assert slow.connect("slow-reader") == b"\x00\x00"
    assert slow.subscribe("big/t", 1) == 1
    # ... and reads nothing while more than the kernel holds is routed to it.
    publish_big(broker.port, "big/t")
    # The rest waits in the hub; meanwhile everyone else is served.
    served(broker.port, "while-waiting")
    for i in range(BIG_MESSAGES):
        pkt = slow.read_packet(timeout=10)
        assert pkt is not None, f"closed after {i} of {BIG_MESSAGES} messages"
        topic, data, qos, _, _, pid = parse_publish(*pkt)
        assert (topic, qos) == ("big/t", 1)
        assert data == payload(i), f"message {i} arrived changed ({len(data)} bytes)"
        slow.send(puback_packet(pid))
    served(broker.port, "after")
    slow.close()


def test_input_before_the_peers_eof_is_served_then_the_socket_closes(broker: BrokerProcess) -> None:
    watcher = Paho(broker.port, "eof-watcher").connect()
    try:
        watcher.subscribe("eof/#", 1)
        c = RawClient(broker.port)
        c.send(
            connect_packet("eof-client", will=("eof/will", b"gone", 1, False))
            + publish_packet("eof/data", b"sent before the EOF", 1, packet_id=7)
        )
        c.sock.shutdown(socket.SHUT_WR)  # the EOF right behind its input
        assert c.read_packet() == (0x20, b"\x00\x00")
        assert c.read_packet() == (0x40, b"\x00\x07")
        assert c.read_packet() is None  # then the broker closes its side too
        c.close()
        got = [watcher.get(), watcher.get()]
        # Its message first; then, gone without DISCONNECT, its will [MQTT-3.1.2-8].
        assert [(m.topic, m.payload) for m in got] == [("eof/data", b"sent before the EOF"), ("eof/will", b"gone")]
    finally:
        watcher.close()
    served(broker.port, "after-eof")


@pytest.mark.parametrize("output_waiting", [False, True])
def test_a_peer_reset_is_a_lost_connection(broker: BrokerProcess, output_waiting: bool) -> None:
    watcher = Paho(broker.port, "reset-watcher").connect()
    try:
        watcher.subscribe("reset/will", 1)
        c = RawClient(broker.port, rcvbuf=SMALL_RCVBUF)
        assert c.connect("reset-client", will=("reset/will", b"reset", 1, False)) == b"\x00\x00"
        if output_waiting:  # a write of the hub's is what meets the reset
            assert c.subscribe("big/reset", 1) == 1
            publish_big(broker.port, "big/reset")
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        c.close()  # RST, not FIN
        m = watcher.get()
        assert (m.topic, m.payload) == ("reset/will", b"reset")  # lost without DISCONNECT [MQTT-3.1.2-8]
    finally:
        watcher.close()
    # The hub reported the loss with its reason (debug log), and serves on.
    broker.wait_log(r"connection #\d+ from 127\.0\.0\.1:\d+ closed \((\[Errno \d+\] )?(Connection reset|Broken pipe)")
    served(broker.port, "after-reset")


SOCKET = "socket:"
EPOLL = "anon_inode:[eventpoll]"


def open_fds(pid: int, kind: str) -> int:
    """How many file descriptors of process `pid` are of `kind` (a prefix of
    their /proc link: SOCKET, EPOLL)."""
    fds = f"/proc/{pid}/fd"
    n = 0
    for name in os.listdir(fds):
        try:
            n += os.readlink(f"{fds}/{name}").startswith(kind)
        except FileNotFoundError:  # closed meanwhile
            pass
    return n


def test_connections_beyond_max_connections_are_refused_and_their_sockets_closed(
    tmp_path: Path, broker_runtime: str
) -> None:
    over = 8
    with BrokerProcess(tmp_path, limits={"max_connections": 1, "sys_interval": 0}) as b:
        b.wait_log(r"plain MQTT \(epoll hub\)")
        idle = open_fds(b.pid, SOCKET)
        ok = RawClient(b.port)
        assert ok.connect("the-one") == b"\x00\x00"
        polite = [RawClient(b.port) for _ in range(REFUSAL_SLOTS)]
        for c in polite:
            c.send(connect_packet("one-too-many"))
            assert c.read_packet() == (0x20, b"\x00\x03")  # server unavailable [MQTT-3.2.2-6]
        refused = [RawClient(b.port) for _ in range(over)]
        for c in refused:
            assert c.closed_within(5)  # beyond the refusal slots: closed at once, no CONNACK
        wait_until(
            lambda: (
                len(re.findall(r"refused connection from 127\.0\.0\.1:\d+: too many connections", b.log_text())) == over
            ),
            10,
            lambda: b.log_text()[-3000:],
        )
        for c in [ok, *polite, *refused]:
            c.close()
        # Every socket of theirs is closed in the broker: none leaks.
        wait_until(
            lambda: open_fds(b.pid, SOCKET) == idle,
            10,
            lambda: f"{open_fds(b.pid, SOCKET)} sockets open, {idle} at start",
        )
        connect_when_served(b.port, "again").close()
        assert b.alive() and "Traceback" not in b.log_text(), b.log_text()


def test_epoll_hub_false_serves_plain_mqtt_on_asyncio_transports(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path, server={"epoll_hub": False}, limits={"sys_interval": 0}) as b:
        b.wait_log(r"listening on 127\.0\.0\.1:\d+ .*: plain MQTT; loopback only")
        assert "epoll hub" not in b.log_text()
        served(b.port, "on-asyncio")


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_on_asyncios_loop_the_hub_and_the_loop_share_one_epoll(tmp_path: Path, runtime: str) -> None:
    # asyncio's loop: one epoll_wait per loop turn, not the loop's and then
    # the hub's (SharedEpollSelector). uvloop keeps libuv's epoll and the hub's.
    with BrokerProcess(tmp_path, limits={"sys_interval": 0}, **runtime_args(runtime)) as b:
        b.wait_log(r"plain MQTT \(epoll hub\)")
        served(b.port, "one-epoll")
        assert open_fds(b.pid, EPOLL) == (2 if runtime == "uvloop" else 1)
        # The loop's own timers run beside the hub's sockets: a silent client
        # with a 1 s keep-alive is closed [MQTT-3.1.2-24].
        c = RawClient(b.port)
        assert c.connect("silent", keep_alive=1) == b"\x00\x00"
        assert c.closed_within(10)
        c.close()
        served(b.port, "after-keep-alive")
        assert b.alive() and "Traceback" not in b.log_text(), b.log_text()

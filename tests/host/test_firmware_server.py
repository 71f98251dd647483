"""The firmware's network shell under the real MicroPython unix port.

firmware/main.py runs in `.venv/bin/micropython` with the heap capped at
twice a board's (the unix port is 64-bit) and the Pico W board settings
(boards/rp2040_picow.json: 4 connection slots = 3 clients + 1 slot for a
polite refusal), and serves real CPython clients over loopback: paho-mqtt
and hand-made MQTT on raw sockets (tests/host/broker_proc.py).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.mqtt import consts as C
from common.mqtt.packets import Connect, Publish, encode_packet
from tests.host.broker_proc import (
    Paho,
    RawClient,
    connect_when_served,
    parse_publish,
    publish_packet,
    subscribe_packet,
    wait_until,
)
from tests.host.upy_broker_proc import ESP32_HEAP, PICOW_HEAP, UpyBrokerProcess

pytestmark = pytest.mark.interop


NO_RATE_LIMITS = {"rate_messages": 0, "rate_bytes": 0, "rate_subscribes": 0}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpyBrokerProcess]:
    work = tmp_path_factory.mktemp("fw")
    # (Rate limits off: the flood tests here measure the heap and the queues
    # under a publisher that is read as fast as it sends.)
    with UpyBrokerProcess(work, board="rp2040_picow", heap=PICOW_HEAP, heap_report=1, limits=NO_RATE_LIMITS) as b:
        yield b
        assert b.alive(), b.log_text()[-3000:]


def test_qos_0_1_2_both_ways(broker: UpyBrokerProcess) -> None:
    sub = Paho(broker.port, "fw-sub").connect()
    pub = Paho(broker.port, "fw-pub").connect()
    try:
        assert [r.value for r in sub.subscribe("fw/q/#", 2)] == [2]
        for qos in (0, 1, 2):
            pub.publish(f"fw/q/{qos}", b"payload-%d" % qos, qos)
            msg = sub.get()
            assert (msg.topic, msg.payload, msg.qos) == (f"fw/q/{qos}", b"payload-%d" % qos, qos)
        # And the other way: the subscriber publishes, the publisher receives.
        assert [r.value for r in pub.subscribe("fw/back", 1)] == [1]
        sub.publish("fw/back", b"hello", 2)
        msg = pub.get()
        assert (msg.payload, msg.qos) == (b"hello", 1)  # granted QoS 1 caps it
    finally:
        sub.close()
        pub.close()


def test_retained(broker: UpyBrokerProcess) -> None:
    pub = Paho(broker.port, "fw-ret-pub").connect()
    pub.publish("fw/ret/a", b"kept", 1, retain=True)
    pub.close()
    sub = Paho(broker.port, "fw-ret-sub").connect()
    try:
        sub.subscribe("fw/ret/+", 1)
        msg = sub.get()
        assert (msg.topic, msg.payload, msg.retain) == ("fw/ret/a", b"kept", True)
    finally:
        sub.close()


def test_will_on_abrupt_close_and_keepalive_expiry(broker: UpyBrokerProcess) -> None:
    sub = Paho(broker.port, "fw-will-sub").connect()
    try:
        sub.subscribe("fw/will/#", 1)
        # Abrupt close: the will goes out.
        a = RawClient(broker.port)
        assert a.connect("fw-dies", will=("fw/will/a", b"gone", 1, False)) == b"\x00\x00"
        a.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        a.close()  # RST, no DISCONNECT
        msg = sub.get()
        assert (msg.topic, msg.payload) == ("fw/will/a", b"gone")
        # Keep-alive 1 s and silence: closed after 1.5 s (+ the 1 s tick), will published.
        b = RawClient(broker.port)
        started = time.monotonic()
        assert b.connect("fw-silent", keep_alive=1, will=("fw/will/b", b"timeout", 0, False)) == b"\x00\x00"
        assert b.closed_within(6), "keep-alive did not expire"
        assert time.monotonic() - started >= 1.4
        msg = sub.get()
        assert (msg.topic, msg.payload) == ("fw/will/b", b"timeout")
        b.close()
    finally:
        sub.close()


def test_client_limit_refusal(broker: UpyBrokerProcess) -> None:
    """4 clients (the Pico W file); the 5th hears CONNACK 0x03 then close; a 6th is closed at once."""
    clients = [RawClient(broker.port) for _ in range(4)]
    try:
        for i, c in enumerate(clients):
            assert c.connect(f"fw-limit-{i}") == b"\x00\x00"
        fourth = RawClient(broker.port)
        assert fourth.connect("fw-limit-4") == b"\x00\x03"  # server unavailable [MQTT-3.2.2-*]
        # The 5th still holds the last slot (lingering): a 6th gets no answer at all.
        fifth = RawClient(broker.port)
        assert fifth.closed_within(3), "the connection beyond every slot was not closed at once"
        fifth.close()
        assert fourth.closed_within(5), "the refused connection was not closed"
        fourth.close()
        assert "refused a connection" in broker.log_text()
    finally:
        for c in clients:
            c.close()
    # The slots come back: a new client is served again.
    connect_when_served(broker.port, "fw-limit-again").close()


def test_slow_subscriber_does_not_exhaust_the_heap(broker: UpyBrokerProcess) -> None:
    """A subscriber that never reads while a publisher floods: the broker stays
    up, drops QoS 0 for it (counted), and the heap stays bounded."""
    base = broker.wait_heap_samples(1)[-1]
    raw = RawClient(broker.port, rcvbuf=4096)
    assert raw.connect("fw-slow") == b"\x00\x00"
    assert raw.subscribe("fw/flood/#", 0) == 0
    pub = RawClient(broker.port)
    assert pub.connect("fw-flooder") == b"\x00\x00"
    payload = b"x" * 1000
    packet = publish_packet("fw/flood/a", payload, 0) * 16
    deadline = time.monotonic() + 4
    sent = 0
    while time.monotonic() < deadline:
        pub.send(packet)
        sent += 16
    # Two heap lines after the flood (heap_report = 1 s): one whole report
    # period in which the broker worked off what the flood left in its sockets.
    after = len(broker.heap_samples())
    broker.wait_heap_samples(after + 2)
    samples = [s for s in broker.heap_samples() if s["t"] >= base["t"]]
    assert broker.alive(), broker.log_text()[-3000:]
    peak = max(s["alloc"] for s in samples)
    last = samples[-1]
    print(f"flood: {sent} x 1 KB QoS 0; heap alloc base {base['alloc']} peak {peak}; {last}")
    assert last["dropped_qos0"] > 0, "QoS 0 was never dropped for the slow reader"
    # Bounded: the slow reader costs its max_out_buffer (8 KB) and one output
    # chunk, twice that on 64 bits, plus per-packet garbage: far below the heap.
    assert peak - base["alloc"] < 60_000, samples
    # Everyone else carries on.
    check = Paho(broker.port, "fw-after-flood").connect()
    try:
        check.subscribe("fw/after", 1)
        check.publish("fw/after", b"ok", 1)
        assert check.get().payload == b"ok"
    finally:
        check.close()
    pub.close()
    raw.close()


def test_graceful_stop(tmp_path: Path) -> None:
    with UpyBrokerProcess(tmp_path, board="rp2040_picow", heap=PICOW_HEAP) as b:
        c = RawClient(b.port)
        assert c.connect("fw-stop") == b"\x00\x00"
        assert b.stop() == 0, b.log_text()
        assert c.closed_within(2)
        assert "shutdown complete" in b.log_text()


def test_out_of_memory_at_start_up_stops_instead_of_a_reset_loop(tmp_path: Path) -> None:
    """Pools the heap cannot hold (prealloc of 20,000 sessions at the Pico W's
    heap) fail the same way after every reset: the firmware stops with the
    figures and what to lower (exit 2 on the unix port, the REPL on a board),
    instead of "fatal at start-up ... restarting" forever."""
    b = UpyBrokerProcess(tmp_path, heap=PICOW_HEAP, limits={"max_sessions": 20000, "prealloc": True})
    with pytest.raises(RuntimeError):
        b.start(timeout=20)
    assert b.proc is not None and b.proc.wait(5) == 2
    log = b.log_text()
    assert "out of memory at start-up (MemoryError" in log, log
    assert "heap free now): lower the board file's limits" in log, log
    assert "restarting" not in log


def test_a_packet_the_heap_cannot_hold_closes_only_its_connection(tmp_path: Path) -> None:
    """A PUBLISH within max_packet_size for which the heap has no block (here:
    bigger than the whole heap) is not a broker bug: the v5 client gets
    DISCONNECT 0x97 Quota exceeded, the close is counted and logged, its
    message is not acknowledged, and the broker goes on serving others."""
    with UpyBrokerProcess(tmp_path, heap=PICOW_HEAP, limits={"max_packet_size": 4_000_000}) as b:
        big = RawClient(b.port)
        big.send(encode_packet(Connect(level=5, clean_start=True, keep_alive=0, client_id="too-big"), C.LEVEL_5))
        connack = big.read_packet()
        assert connack is not None and connack[0] == 0x20 and connack[1][:2] == b"\x00\x00", connack
        try:
            big.send(encode_packet(Publish("big/x", bytes(1_500_000), 1, False, False, 1, None), C.LEVEL_5))
        except OSError:
            pass  # (closed while sending: what it was told is read below)
        pkt = big.read_packet(timeout=20)
        assert pkt is not None and pkt[0] == 0xE0, pkt  # DISCONNECT, not a PUBACK
        assert pkt[1][0] == C.RC_QUOTA_EXCEEDED, pkt
        assert big.closed_within(5)
        other = RawClient(b.port)
        assert other.connect("after-it") == b"\x00\x00"
        assert other.subscribe("fw/after", 1) == 1
        log = b.log_text()
        assert "closing too-big: out of memory handling its packet (max_packet_size 4000000; closed_out_of_memory 1)" in log
        assert "core error" not in log
        assert b.stop() == 0, b.log_text()


def test_raw_publish_roundtrip_qos1(broker: UpyBrokerProcess) -> None:
    """Hand-made bytes: the PUBLISH arrives as written, with its packet id."""
    sub = RawClient(broker.port)
    assert sub.connect("fw-raw-sub") == b"\x00\x00"
    assert sub.subscribe("fw/raw", 1) == 1
    pub = RawClient(broker.port)
    assert pub.connect("fw-raw-pub") == b"\x00\x00"
    pub.send(publish_packet("fw/raw", b"\x00\x01bin", 1, packet_id=7))
    ack = pub.read_packet()
    assert ack == (0x40, b"\x00\x07")
    pkt = sub.read_packet()
    assert pkt is not None
    topic, payload, qos, _retain, _dup, _pid = parse_publish(*pkt)
    assert (topic, payload, qos) == ("fw/raw", b"\x00\x01bin", 1)
    sub.close()
    pub.close()


def test_esp32_settings_serve_at_twice_the_heap_plus_the_frozen_code(tmp_path: Path) -> None:
    """The ESP32 board file: 2 x 110 KB for the broker, plus the ~195 KB (64-bit,
    `ram_budget --port unix`) of code that a board keeps frozen in flash
    (docs/boards.md)."""
    heap = f"{int(ESP32_HEAP[:-1]) + 195}K"
    with UpyBrokerProcess(tmp_path, board="esp32", heap=heap) as b:
        assert "5 clients + 1 for refusals" in b.log_text()
        c = Paho(b.port, "fw-esp32").connect()
        try:
            c.subscribe("esp/t", 2)
            c.publish("esp/t", b"x" * 1500, 2)
            assert c.get().payload == b"x" * 1500
        finally:
            c.close()
        assert b.stop() == 0


def test_retained_replay_is_paced_on_the_board(tmp_path: Path) -> None:
    """Issue 12 on a board: SUBSCRIBEs to `#` over the retained store, in a
    burst, from a client that never reads. Unpaced, one read of them asked
    for ~1 MB of output on a ~200 KB heap; now the replay goes out as the
    socket takes it, the abuser is closed after replay_stall_timeout, the heap
    stays bounded, and a client that reads gets every retained message."""
    limits = {"max_out_buffer": 1024, "replay_stall_timeout": 2, **NO_RATE_LIMITS}
    with UpyBrokerProcess(tmp_path, board="rp2040_picow", heap=PICOW_HEAP, heap_report=1, limits=limits) as b:
        pub = RawClient(b.port)
        assert pub.connect("fw-retainer") == b"\x00\x00"
        body = b"r" * 200
        pub.send(b"".join(publish_packet(f"fw/r/{i}", body, retain=True) for i in range(30)))
        pub.send(publish_packet("fw/r/done", b"", 1, packet_id=1))
        assert pub.read_packet() == (0x40, b"\x00\x01")
        pub.close()
        base = b.wait_heap_samples(1)[-1]
        raw = RawClient(b.port, rcvbuf=4096)
        assert raw.connect("fw-abuser") == b"\x00\x00"
        # ~45,000 x 200 B asked: more than the kernel's socket buffers take (4 MB).
        raw.send(b"".join(subscribe_packet(i % 65535 + 1, "#", 0) for i in range(1500)))
        # ... and never reads. A client that reads gets all 30, then its PINGRESP.
        reader = RawClient(b.port)
        assert reader.connect("fw-reader") == b"\x00\x00"
        reader.send(subscribe_packet(1, "fw/r/#", 0) + b"\xc0\x00")
        got = []
        while True:
            pkt = reader.read_packet()
            assert pkt is not None
            if pkt[0] == 0xD0:
                break
            if pkt[0] == 0x31:  # retained QoS 0 PUBLISH [MQTT-3.3.1-8]
                got.append(parse_publish(*pkt)[0])
        assert sorted(got) == sorted(f"fw/r/{i}" for i in range(30))
        reader.close()
        b.wait_log(r"closing fw-abuser: retained replay stalled: .*\(replay_stall_timeout 2\)", 10)
        # Its slot is free again (the kernel may still hold what it never
        # read: a close here is a FIN after the socket's buffer, not a reset).
        wait_until(lambda: b.heap_samples()[-1]["open"] == 0, 10, "the abuser's slot was not freed")
        raw.close()
        after = len(b.heap_samples())
        samples = b.wait_heap_samples(after + 1)
        peak = max(s["alloc"] for s in samples if s["t"] >= base["t"])
        print(f"replay abuse: heap alloc base {base['alloc']} peak {peak}")
        assert peak - base["alloc"] < 60_000, samples
        assert b.alive(), b.log_text()[-3000:]
        connect_when_served(b.port, "fw-after-abuse").close()


@pytest.mark.parametrize("protocol", [4, 5], ids=["3.1.1", "v5"])
def test_paho_qos2_burst_beyond_the_board_window(broker: UpyBrokerProcess, protocol: int) -> None:
    # The board file caps inbound QoS 2 in flight at 8 (max_inflight_in);
    # paho keeps 20 in flight. A 3.1.1 client cannot be told: its PUBRECs
    # beyond the window wait for room, so it is slowed, not disconnected;
    # a v5 client is told the Receive Maximum in CONNACK and must keep to it
    # (0x93 beyond it: tests/core/test_broker_v5.py). paho does not apply a
    # server's Receive Maximum by itself: the application sets its window
    # to the value told (docs/boards.md).
    sub = Paho(broker.port, f"burst-sub-{protocol}").connect()
    pub = Paho(broker.port, f"burst-pub-{protocol}", protocol=protocol)
    if protocol == 5:
        pub.client.max_inflight_messages_set(8)  # (paho takes it before the connection only)
    pub.connect()
    try:
        if protocol == 5:
            assert pub.connack_props.ReceiveMaximum == 8  # told: the board file's max_inflight_in
        assert [r.value for r in sub.subscribe(f"burst/{protocol}", 2)] == [2]
        infos = [pub.client.publish(f"burst/{protocol}", b"m%03d" % i, 2) for i in range(40)]
        for info in infos:
            info.wait_for_publish(10)
            assert info.is_published()
        got = sorted(sub.get(10).payload for _ in range(40))
        assert got == [b"m%03d" % i for i in range(40)]
        sub.get_nothing()
        assert not pub.disconnected.is_set()
    finally:
        sub.close()
        pub.close()

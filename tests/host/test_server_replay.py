"""Retained replay under abuse, on the real host server.

10,000 retained messages of 1,000 bytes; one client sends 50 SUBSCRIBEs to
`#` in one burst and never reads. Before the replay was paced, every copy
was encoded into that client's output at once: the broker grew by about a
gigabyte and other clients waited seconds. Now the broker's RSS stays
within a few MB of its baseline, the abuser is disconnected after
replay_stall_timeout, and what it held comes back; a bystander's QoS 1
round trips go on meanwhile (their p99 is printed here; its bound is a
verdict of `make soak`: tests/soak/test_timing_bounds.py). A client
that reads gets every retained message.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from tests.host.broker_proc import BrokerProcess, Paho, RawClient, publish_packet, subscribe_packet, wait_until
from tools.abuse_retained import RssPeak, rss

pytestmark = [pytest.mark.interop, pytest.mark.slow]

RETAINED = 10000
PAYLOAD = 1000
SUBSCRIBES = 50
STALL = 3  # replay_stall_timeout of the abuse test (s)
# The abuser costs max_out_buffer (256 KiB) + the transport's buffer (64 KiB);
# allocator slack and Python's own growth on top. Unpaced, it was ~1 GiB.
RSS_BOUND = 24 * 1024 * 1024
P99_BOUND = 0.100  # s, a QoS 1 round trip of the bystander (make soak)


def store_retained(port: int) -> None:
    """RETAINED retained messages, then a QoS 1 PUBLISH whose PUBACK says all were read."""
    c = RawClient(port)
    c.connect("retainer")
    body = bytes(PAYLOAD)
    for start in range(0, RETAINED, 500):
        c.send(b"".join(publish_packet(f"r/{i // 100}/{i}", body, retain=True) for i in range(start, start + 500)))
    c.send(publish_packet("r/done", b"", qos=1, packet_id=1))
    assert c.read_packet(timeout=30) == (0x40, b"\x00\x01")
    c.close()


def bystander(port: int) -> Paho:
    by = Paho(port, "bystander").connect()
    # Nagle would hold its next PUBLISH for the broker's delayed ACK (40 ms).
    by.client.socket().setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # type: ignore[union-attr]
    by.subscribe("bystander/ping", 1)
    return by


def round_trips(by: Paho, seconds: float) -> list[float]:
    """QoS 1 PUBLISH -> the same message back, timed, for `seconds`."""
    samples = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.monotonic()
        by.client.publish("bystander/ping", b"p", 1)
        by.get(timeout=10)
        samples.append(time.monotonic() - started)
    return samples


def p99(samples: list[float]) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(0.99 * len(s)))]


def test_fifty_subscribes_that_never_read_cost_bounded_memory(tmp_path: Path) -> None:
    during, after = abuse(tmp_path)
    print(f"bystander QoS 1 p99: {p99(during) * 1000:.1f} ms during the abuse, {p99(after) * 1000:.1f} ms after")


def abuse(tmp_path: Path) -> tuple[list[float], list[float]]:
    """The abuse, checked but for the bystander's latency: its round trips
    (s) during the abuse and after the abuser left."""
    limits = {"replay_stall_timeout": STALL, "sys_interval": 1}
    with BrokerProcess(tmp_path, limits=limits, log_level="info") as b:
        store_retained(b.port)
        by = bystander(b.port)
        monitor = Paho(b.port, "monitor").connect()
        monitor.subscribe("$SYS/broker/clients/closed/replay_stalled", 0)
        sampler = RssPeak(b.pid)
        baseline = sampler.before
        try:
            abuser = RawClient(b.port, rcvbuf=16384)
            abuser.connect("abuser")
            abuser.send(b"".join(subscribe_packet(i + 1, "#", 0) for i in range(SUBSCRIBES)))
            # ... and never reads. Meanwhile the bystander's round trips.
            during = round_trips(by, 2.0)
            growth = sampler.peak - baseline
            assert growth < RSS_BOUND, f"broker RSS grew by {growth / 1e6:.1f} MB for a client that never reads"
            # Disconnected for its stalled replay, counted and logged with the limit.
            # (3.1.1 has no code for it: closed.)
            b.wait_log(r"closing abuser: retained replay stalled: .*\(replay_stall_timeout 3\); sent no code", STALL + 5)
            assert abuser.closed_within(10)
            abuser.close()
            counted = wait_until(lambda: monitor.get(timeout=3).payload == b"1", 10, "closed_replay_stalled not 1")
            assert counted
            # What it held comes back; the bystander still runs as before.
            sampler.stop()
            after_rss = rss(b.pid)
            assert after_rss - baseline < RSS_BOUND, f"RSS {after_rss / 1e6:.1f} MB after the abuser left"
            after = round_trips(by, 0.5)
        finally:
            sampler.stop()
            by.close()
            monitor.close()
    return during, after


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_a_client_that_reads_gets_every_retained_message(tmp_path: Path, loop: str) -> None:
    # The replay goes on as the socket takes it, one bound per loop turn: a
    # client that reads gets all of it, in the store's order, and its
    # next packet (PINGREQ) is answered after the last one [MQTT-3.3.1-8].
    with BrokerProcess(tmp_path, log_level="info", extra_args=("--event-loop", loop)) as b:
        b.wait_log(f"event loop: {loop}")
        store_retained(b.port)
        c = RawClient(b.port)
        c.connect("reader")
        started = time.monotonic()
        c.send(subscribe_packet(1, "r/#", 0) + b"\xc0\x00")
        first = c.read_packet(timeout=10)
        assert first is not None and first[0] == 0x90
        count = 0
        while True:
            pkt = c.read_packet(timeout=10)
            assert pkt is not None, f"closed after {count} retained messages"
            if pkt[0] == 0xD0:  # PINGRESP: after the whole replay
                break
            assert pkt[0] == 0x31, f"not a retained QoS 0 PUBLISH: {pkt[0]:#x}"
            count += 1
        elapsed = time.monotonic() - started
        assert count == RETAINED
        assert elapsed < 10, f"{RETAINED} retained messages took {elapsed:.1f} s"
        c.close()

"""Bridge egress pacing on the real host server (docs/bridge.md "Pacing"):
a local upstream stand-in that, like AWS IoT Core, disconnects a client
publishing more than 100 messages in any second. A backlog queued while
it was away drains at publish_rate 90 (the aws profile's) with no throttle
disconnect and nothing lost, in order; without pacing the same stand-in
throws the bridge out (so it can fail). The core's side:
tests/core/test_bridge_pacing.py.

The stand-in counts a message when it reads it, so a stall of its own
(the test process descheduled on a busy machine) bunches what the bridge
sent evenly: 0.1 s of stall at 90/s packs 9 more into the next second. A
ticker thread of the stand-in measures how late it wakes; a throttle
disconnect within a second after the stand-in itself stalled is told apart
(`stalled_disconnects`) and not held against the bridge. (Told apart once
the drain is over: after a stall the reading thread may run before the
ticker has written the stall down.)"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.bridge.profiles import profile_named
from tests.host.bridge_edge import edge, paho
from tests.host.broker_proc import BrokerProcess, Paho, RawClient, parse_publish, wait_until

LIMIT = 100  # publishes in any second, as AWS IoT Core allows per connection
# The backlog queued while the upstream refuses (make soak: the 24,000)
BACKLOG = int(os.environ.get("SISKIN_PACING_BACKLOG", "900"))
TICK = 0.01  # s: the stand-in's ticker
STALL = 0.05  # s late: a stall of the stand-in (at 90/s: 4.5 messages bunched)


class ThrottlingUpstream:
    """A minimal MQTT 3.1.1 server on loopback: CONNACK, SUBACK, PUBACK,
    PINGRESP; a client over LIMIT publishes in the last second is
    disconnected (counted). `accepting` False: connections are closed at once."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.accepting = False
        self.payloads: list[bytes] = []
        self.disconnects = 0
        self.disconnected_at: list[float] = []  # when each throttle disconnect happened
        self.stalls: deque[float] = deque()  # when the ticker woke STALL late or more
        self.max_in_a_second = 0
        self.lock = threading.Lock()
        self.stopped = False
        threading.Thread(target=self._accept, daemon=True).start()
        threading.Thread(target=self._tick, daemon=True).start()

    def _tick(self) -> None:
        due = time.monotonic() + TICK
        while not self.stopped:
            time.sleep(max(0.0, due - time.monotonic()))
            now = time.monotonic()
            if now - due >= STALL:
                with self.lock:
                    self.stalls.append(now)
            due = now + TICK

    def _accept(self) -> None:
        while not self.stopped:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            if not self.accepting:
                conn.close()
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        peer = RawClient.over(conn)
        arrivals: deque[float] = deque()
        try:
            while True:
                packet = peer.read_packet(60)
                if packet is None:
                    return
                first, body = packet
                kind = first >> 4
                if kind == 1:
                    conn.sendall(b"\x20\x02\x00\x00")
                elif kind == 8:
                    conn.sendall(b"\x90\x03" + body[:2] + b"\x01")
                elif kind == 12:
                    conn.sendall(b"\xd0\x00")
                elif kind == 14:
                    return
                elif kind == 3:
                    now = time.monotonic()
                    arrivals.append(now)
                    while arrivals and arrivals[0] <= now - 1.0:
                        arrivals.popleft()
                    with self.lock:
                        self.max_in_a_second = max(self.max_in_a_second, len(arrivals))
                        if len(arrivals) > LIMIT:
                            self.disconnects += 1
                            self.disconnected_at.append(now)
                            return  # throttled: the connection is dropped, that message unacknowledged
                    _topic, payload, qos, _retain, _dup, pid = parse_publish(first, body)
                    if qos:
                        conn.sendall(b"\x40\x02" + pid.to_bytes(2, "big"))
                    with self.lock:
                        self.payloads.append(payload)
        except OSError:
            return
        finally:
            conn.close()

    @property
    def stalled_disconnects(self) -> int:
        """Throttle disconnects within a second after a stall of the stand-in
        (its bunching; the ticker writes a stall down within a tick or so of
        the reader's first read after it)."""
        with self.lock:
            return sum(
                1 for d in self.disconnected_at if any(d - 1.0 - STALL <= t <= d + 10 * TICK for t in self.stalls)
            )

    def distinct(self) -> list[bytes]:
        with self.lock:
            return list(dict.fromkeys(self.payloads))

    def stop(self) -> None:
        self.stopped = True
        self.server.close()


@pytest.fixture
def upstream() -> Iterator[ThrottlingUpstream]:
    u = ThrottlingUpstream()
    yield u
    u.stop()


OUT = [{"pattern": "#", "direction": "out", "local_prefix": "up/", "remote_prefix": "edge1/", "qos": 1}]


def missing(upstream: ThrottlingUpstream, b: BrokerProcess) -> str:
    """What a failure says: the messages that did not arrive, the disconnects, the broker's log."""
    got = set(upstream.distinct())
    lost = [i for i in range(BACKLOG) if b"%d" % i not in got]
    return (
        f"{BACKLOG - len(lost)} of {BACKLOG} arrived; missing {lost[:20]}; {upstream.disconnects} throttle "
        f"disconnect(s), {upstream.stalled_disconnects} after a stall of the stand-in;\n{b.log_text()[-6000:]}"
    )


def queue_backlog(port: int, clients: list[Paho]) -> None:
    pub = paho(port, clients, "device")
    for i in range(BACKLOG):
        pub.publish("up/m", b"%d" % i, 1)


def test_a_backlog_drains_paced_without_throttle_disconnects(tmp_path: Path, upstream: ThrottlingUpstream) -> None:
    rate = profile_named("aws").publish_rate
    assert rate == 90
    clients: list[Paho] = []
    with edge(tmp_path, [upstream.port], connected=False, topic=OUT, publish_rate=rate) as b:
        queue_backlog(b.port, clients)  # acknowledged here while the upstream refuses
        upstream.accepting = True
        started = time.monotonic()
        patience = 60 + 2 * BACKLOG / rate  # (twice the paced time: the machine may be busy)
        wait_until(lambda: len(upstream.distinct()) >= BACKLOG, patience, lambda: missing(upstream, b))
        took = time.monotonic() - started
        assert upstream.disconnects == upstream.stalled_disconnects, missing(upstream, b)
        assert upstream.distinct() == [b"%d" % i for i in range(BACKLOG)]  # in order, none lost
        # (max_in_a_second is counted as the stand-in reads, so the machine's
        # scheduling adds to it: reported, and AWS's 10 % headroom is for that.)
        assert took >= (BACKLOG - rate) / rate, took  # it was paced, not sent at once
        print(
            f"paced drain: {BACKLOG} messages in {took:.1f} s, at most {upstream.max_in_a_second} in a second, "
            f"{upstream.stalled_disconnects} disconnect(s) after a stall of the stand-in"
        )
        for c in clients:
            c.close()


def test_without_pacing_the_stand_in_throws_the_bridge_out(tmp_path: Path, upstream: ThrottlingUpstream) -> None:
    clients: list[Paho] = []
    with edge(tmp_path, [upstream.port], connected=False, topic=OUT, publish_rate=0, max_inflight=200, window=400) as b:
        queue_backlog(b.port, clients)
        upstream.accepting = True
        wait_until(lambda: upstream.disconnects >= 1, 60, "a throttle disconnect")
        for c in clients:
            c.close()

"""Measure the bridge through an upstream outage (issue 14's closing figures).

    python -m tools.bridge_outage [--outage 60] [--rate 200] [--bad-every 0]

Starts the upstream — Mosquitto (tools/bench/brokers.py) or, with
--upstream nats, a 3-node NATS JetStream cluster (tools/nats_cluster.py) —
and Siskin (with a data directory, store_sync = always) bridged to it
(profile mqtt or nats), then:

1. a consumer on the upstream subscribes to the bridged prefix (QoS 1);
2. a steady publisher on the edge sends numbered QoS 1 messages at --rate
   per second for --before s, through --outage s with the upstream stopped
   (SIGSTOP of every node: sockets open and silent, as a cut link or a
   hung cluster), and --after s once it is back (SIGCONT);
3. it waits until the consumer has every acknowledged message or --settle
   s pass without one.

It prints: messages acknowledged by the edge, delivered upstream (distinct),
lost (acknowledged, never delivered: must be 0), duplicates (QoS 1: at
least once), out of order, dead-lettered (--bad-every N: every Nth message
goes to a topic with a "." in it — dead-lettered by the nats profile only,
so with Mosquitto it is delivered), the time from the upstream's return to
the first replayed message (keep-alive, back-off and reconnect) and the
replay throughput (the outage's backlog over the time it took to arrive).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from tests.host.broker_proc import BrokerProcess, Paho
from tools.bench.brokers import Mosquitto


class Consumer:
    """A paho client on the upstream recording (arrival time, number) per message."""

    def __init__(self, port: int) -> None:
        self.paho = Paho(port, "outage-consumer", clean=False)
        self.arrivals: list[tuple[float, int]] = []
        self.lock = threading.Lock()
        self.paho.client.on_message = self._on_message

    def _on_message(self, client: Any, userdata: Any, msg: Any) -> None:
        with self.lock:
            self.arrivals.append((time.monotonic(), int(msg.payload)))


class SteadyPublisher:
    """Numbered QoS 1 messages at a fixed rate; the numbers the edge acknowledged."""

    def __init__(self, port: int, rate: float, bad_every: int) -> None:
        self.paho = Paho(port, "outage-publisher")
        self.paho.client.max_inflight_messages_set(1000)
        self.paho.client.max_queued_messages_set(0)
        self.paho.client.on_publish = self._on_publish
        self.rate = rate
        self.bad_every = bad_every
        self.mids: dict[int, int] = {}  # paho's message id -> number (ids never wrap in one run: see main)
        self.acked_mids: list[int] = []  # paho's ids of the messages the edge acknowledged
        self.sent = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _on_publish(self, client: Any, userdata: Any, mid: int, rc: Any, props: Any) -> None:
        # paho's network thread, with paho's lock held: no lock of ours here
        # (publish() holds paho's lock too), list.append is atomic.
        if not getattr(rc, "is_failure", False):
            self.acked_mids.append(mid)

    def acked(self) -> set[int]:
        return {self.mids[mid] for mid in list(self.acked_mids) if mid in self.mids}

    def _run(self) -> None:
        start = time.monotonic()
        n = 0
        while not self.stop.is_set():
            due = start + n / self.rate
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            bad = self.bad_every and n % self.bad_every == self.bad_every - 1
            topic = "up/bad.topic" if bad else "up/steady"
            info = self.paho.client.publish(topic, b"%d" % n, 1)
            self.mids[info.mid] = n
            n += 1
            self.sent = n

    def bad(self, n: int) -> bool:
        return bool(self.bad_every) and n % self.bad_every == self.bad_every - 1


class Upstream:
    """The upstream under test: its MQTT ports, and the outage (every process stopped, then continued)."""

    def __init__(self, kind: str, workdir: Path) -> None:
        self.kind = kind
        self.pids: list[int] = []
        self.ports: list[int] = []
        self.mosquitto: Mosquitto | None = None
        self.cluster: Any = None
        if kind == "mosquitto":
            self.mosquitto = Mosquitto(workdir)
            self.mosquitto.start()
            self.pids = [self.mosquitto.pid]
            self.ports = [self.mosquitto.port]
        else:
            import importlib

            # tools/nats_cluster.py (branch nats): 3 nodes, JetStream, MQTT on each.
            nats_cluster = importlib.import_module("tools.nats_cluster")
            self.cluster = nats_cluster.NatsCluster(workdir / "nats", 3).start()
            self.pids = [n.proc.pid for n in self.cluster.nodes]
            self.ports = self.cluster.mqtt_ports

    def signal_all(self, sig: int) -> None:
        for pid in self.pids:
            os.kill(pid, sig)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.signal_all(signal.SIGCONT)
        if self.mosquitto is not None:
            self.mosquitto.stop()
        if self.cluster is not None:
            self.cluster.close()


def measure(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    upstream = Upstream(args.upstream, workdir)
    profile = "nats" if args.upstream == "nats" else "mqtt"
    bridge = {
        "name": "cloud",
        "addresses": [f"127.0.0.1:{port}" for port in upstream.ports],
        "client_id": "edge-outage",
        "profile": profile,
        "keepalive": args.keepalive,
        "backoff_min": 0.5,
        "backoff_max": args.backoff_max,
        "connect_timeout": 2.0,
        "topic": [{"pattern": "#", "direction": "out", "local_prefix": "up/", "remote_prefix": "edge/", "qos": 1}],
    }
    edge = BrokerProcess(workdir / "edge", limits={"sys_interval": 1}, bridges=[bridge], log_level="info")
    consumer = publisher = None
    try:
        edge.start()
        edge.wait_log("bridge cloud: connected to")
        consumer = Consumer(upstream.ports[0])
        consumer.paho.connect(15)
        consumer.paho.subscribe("edge/#", 1)
        publisher = SteadyPublisher(edge.port, args.rate, args.bad_every)
        publisher.paho.connect()
        publisher.thread.start()
        time.sleep(args.before)
        first_of_outage = publisher.sent
        upstream.signal_all(signal.SIGSTOP)
        time.sleep(args.outage)
        last_of_outage = publisher.sent
        upstream.signal_all(signal.SIGCONT)
        resumed = time.monotonic()
        time.sleep(args.after)
        publisher.stop.set()
        publisher.thread.join()
        # The last PUBACKs (an edge that fell behind is still working through its input).
        deadline = time.monotonic() + args.settle
        while len(publisher.acked_mids) < publisher.sent and time.monotonic() < deadline:
            time.sleep(0.2)
        acked = publisher.acked()
        expected = {n for n in acked if not (profile == "nats" and publisher.bad(n))}
        quiet_since = time.monotonic()
        seen = 0
        while time.monotonic() - quiet_since < args.settle:
            with consumer.lock:
                got = {n for _, n in consumer.arrivals}
                count = len(consumer.arrivals)
            if expected <= got:
                break
            if count != seen:
                seen = count
                quiet_since = time.monotonic()
            time.sleep(0.2)
        with consumer.lock:
            arrivals = list(consumer.arrivals)
        numbers = [n for _, n in arrivals]
        distinct = set(numbers)
        firsts: list[int] = []
        done: set[int] = set()
        for n in numbers:
            if n not in done:
                done.add(n)
                firsts.append(n)
        backlog = [n for n in range(first_of_outage, last_of_outage) if n in expected]
        backlog_set = set(backlog)
        replayed = [t for t, n in arrivals if n in backlog_set and t >= resumed]
        dead = _dead_lettered(edge.port)
        result = {
            "published": publisher.sent,
            "acked_locally": len(acked),
            "delivered_upstream": len(distinct & set(acked)),
            "lost": len(expected - distinct),
            "duplicates": len(numbers) - len(distinct),
            "out_of_order": sum(1 for a, b in zip(firsts, firsts[1:]) if b < a),
            "dead_lettered": dead,
            "backlog": len(backlog),
            "first_replayed_after_s": round(min(replayed) - resumed, 2) if replayed else None,
            "replay_msgs_per_s": round(len(replayed) / (max(replayed) - min(replayed)), 1)
            if len(replayed) > 1 and max(replayed) > min(replayed)
            else None,
        }
        return result
    finally:
        for c in (consumer, publisher):
            if c is not None:
                c.paho.close()
        edge.kill()
        upstream.close()


def _dead_lettered(port: int) -> int:
    """The edge's $SYS/broker/bridge/cloud/dead_lettered, once it is at least a second old."""
    time.sleep(1.5)  # sys_interval 1: a value published after the last message
    watch = Paho(port, "outage-watch")
    try:
        watch.connect()
        watch.subscribe("$SYS/broker/bridge/cloud/dead_lettered", 0)
        return int(watch.get().payload)
    finally:
        watch.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tools.bridge_outage",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        epilog="Needs /usr/sbin/mosquitto (or nats-server). The figures are in docs/bridge.md.",
    )
    p.add_argument("--outage", type=float, default=60.0, help="seconds the upstream is stopped (default 60)")
    p.add_argument("--rate", type=float, default=200.0, help="messages per second from the publisher (default 200)")
    p.add_argument("--before", type=float, default=5.0, help="seconds of traffic before the outage (default 5)")
    p.add_argument("--after", type=float, default=10.0, help="seconds of traffic after it (default 10)")
    p.add_argument("--settle", type=float, default=30.0, help="give up after this many quiet seconds (default 30)")
    p.add_argument("--keepalive", type=int, default=5, help="the bridge's keep-alive in s (default 5)")
    p.add_argument("--backoff-max", type=float, default=5.0, help="the bridge's longest retry delay in s (default 5)")
    p.add_argument("--bad-every", type=int, default=0, help="every Nth message to a topic with a '.' (default 0: none)")
    p.add_argument(
        "--upstream",
        choices=("mosquitto", "nats"),
        default="mosquitto",
        help="mosquitto (profile mqtt) or a 3-node NATS JetStream cluster (tools/nats_cluster.py, profile nats)",
    )
    args = p.parse_args(argv)
    if args.rate * (args.before + args.outage + args.after) >= 65000:
        p.error("rate x duration must stay below 65,000 messages (paho's message ids must not wrap)")
    if args.upstream == "mosquitto" and not Mosquitto.available():
        print("mosquitto is not installed (apt-get install mosquitto)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="bridge-outage-") as tmp:
        result = measure(args, Path(tmp))
    print(
        f"upstream {args.upstream}, outage {args.outage:g} s (SIGSTOP of every node), {args.rate:g} msg/s QoS 1, "
        f"keepalive {args.keepalive} s, backoff_max {args.backoff_max:g} s"
    )
    for key, value in result.items():
        print(f"  {key}: {value}")
    return 0 if result["lost"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

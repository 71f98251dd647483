"""Measure the bridge through an outage of its uplink (docs/bridge.md, "Measured").

    python -m tools.bridge_outage --case stop [--kill9] [--qos 2] [--outage 60] [--rate 200] [--runs 5]
    python -m tools.bridge_outage --upstream nats --case node-kill --kill9

Starts the upstream — Mosquitto (tools/bench/brokers.py) or, with
--upstream nats, a 3-node NATS JetStream cluster (tools/nats_cluster.py) —
and Siskin (a data directory, store_sync = always) bridged to it with the
documented defaults unless told otherwise (keepalive 60, backoff_max 10,
stall_timeout 5; printed with the figures). Then, per run:

1. a persistent consumer on the upstream subscribes to the bridged prefix
   at --qos, and counts sequence numbers;
2. a publisher on the edge sends numbered messages at --qos, --rate per
   second: --before s, then the outage for --outage s, then --after s;
3. the outage (--case):
     stop       the upstream SIGSTOPped (every node): sockets open, silent
     cut        the link through a proxy (tools/link_proxy.py) goes down:
                every connection reset, each new one too
     stall      the link through the proxy stalls: open, nothing moves
     node-kill  (nats) kill -9 of the node the bridge is connected to,
                started again at the end of the outage
   with --kill9, Siskin is killed (SIGKILL) in the middle of the outage and
   started again on its data directory (the publisher reconnects);
4. it waits until the consumer has every acknowledged message, or --settle
   s pass without a new one.

Per run it prints: acknowledged by the edge, delivered upstream (distinct),
lost (acknowledged, never delivered: must be 0), duplicates, out of order,
dead-lettered, the longest PUBACK wait of the publisher while the uplink
was away / draining its backlog (a message published while Siskin itself
was down for --kill9 is left out: no broker answers then), the time from
the upstream's return to the first replayed message, and the replay
throughput (the outage's backlog over the time it took to arrive). Exit
status 1 if any run lost a message (or, at QoS 2, duplicated one).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from tests.host.broker_proc import BrokerProcess, Paho
from tools.bench.brokers import SISKIN_LIMITS, Mosquitto
from tools.link_proxy import LinkProxy

CASES = ("stop", "cut", "stall", "node-kill")


class Consumer:
    """A persistent paho client on the upstream in a process of its own (so
    the replay it receives takes no time from the publisher's thread, whose
    PUBACK waits are measured), writing "arrival time, number" per message
    to a file: time.monotonic() is the machine's clock, the same in both."""

    def __init__(self, port: int, qos: int, workdir: Path) -> None:
        self.path = workdir / "arrivals.txt"
        self.path.write_text("")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tools.bridge_outage", "--consumer", f"{port}:{qos}:{self.path}"],
            cwd=Path(__file__).resolve().parent.parent,
            stdout=subprocess.PIPE,
        )
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != b"subscribed":
            raise RuntimeError("the consumer did not subscribe upstream")

    def arrivals(self) -> list[tuple[float, int]]:
        out = []
        for line in self.path.read_text().splitlines():
            t, _, n = line.partition(" ")
            if n:
                out.append((float(t), int(n)))
        return out

    def numbers(self) -> list[int]:
        return [n for _, n in self.arrivals()]

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def consume(spec: str) -> int:
    """The consumer's process (--consumer PORT:QOS:FILE): subscribe, write each arrival, until SIGTERM."""
    port, qos, path = spec.split(":", 2)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # (for sigwait, in every thread)
    with open(path, "a", buffering=1) as out:

        def arrived(client: Any, userdata: Any, msg: Any) -> None:
            out.write(f"{time.monotonic():.4f} {int(msg.payload)}\n")

        paho = Paho(int(port), "outage-consumer", clean=False)
        paho.client.on_message = arrived
        paho.client.reconnect_delay_set(1, 2)
        paho.connect(15)
        paho.subscribe("edge/#", int(qos))
        print("subscribed", flush=True)
        signal.sigwait({signal.SIGTERM})
        paho.close()
    return 0


class SteadyPublisher:
    """Numbered messages at a fixed rate to the edge; what it acknowledged, and when."""

    def __init__(self, port: int, rate: float, qos: int, bad_every: int) -> None:
        self.rate = rate
        self.qos = qos
        self.bad_every = bad_every
        self.sent_at: dict[tuple[int, int], tuple[int, float]] = {}  # (client generation, mid) -> (n, time)
        self.acks: list[tuple[int, int, float]] = []  # (client generation, mid, time) of each PUBACK / PUBCOMP
        self.sent = 0
        self.gen = 0
        self.stop = threading.Event()
        self.paused = threading.Event()
        self.paho = self._client(port)
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _client(self, port: int) -> Paho:
        p = Paho(port, "outage-publisher")
        # In flight: within the edge's max_inflight_in (64 QoS 2 awaiting
        # PUBREL: a 3.1.1 publisher beyond it is disconnected, and paho
        # then resends its QoS 2 as new messages: duplicates of its own).
        p.client.max_inflight_messages_set(32)
        p.client.max_queued_messages_set(0)
        gen = self.gen
        p.client.on_publish = lambda c, u, mid, rc, props: self._on_publish(gen, mid, rc)
        return p

    def _on_publish(self, gen: int, mid: int, rc: Any) -> None:
        # paho's network thread, with paho's lock held: no lock of ours here
        # (publish() takes paho's lock too); list.append is atomic.
        if not getattr(rc, "is_failure", False):
            self.acks.append((gen, mid, time.monotonic()))

    def acked(self) -> dict[int, tuple[float, float]]:
        """number -> (sent at, PUBACK wait in s) of each acknowledged message."""
        out = {}
        for gen, mid, at in list(self.acks):
            entry = self.sent_at.get((gen, mid))
            if entry is not None:
                n, t = entry
                out[n] = (t, at - t)
        return out

    def unanswered(self) -> int:
        """Messages of the current client not yet acknowledged (those of a
        client that died with a killed Siskin never will be)."""
        gen = self.gen
        done = {mid for g, mid, _ in list(self.acks) if g == gen}
        return sum(1 for g, mid in list(self.sent_at) if g == gen and mid not in done)

    def switch(self, port: int) -> None:
        """Siskin restarted (new port): a new client; the numbers go on."""
        old = self.paho
        with contextlib.suppress(Exception):
            old.client.loop_stop()
        self.gen += 1
        self.paho = self._client(port)
        self.paho.connect(15)

    def _run(self) -> None:
        start = time.monotonic()
        n = 0
        while not self.stop.is_set():
            if self.paused.is_set():
                time.sleep(0.01)
                start = time.monotonic() - n / self.rate  # (no burst to catch up)
                continue
            due = start + n / self.rate
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            topic = "up/bad.topic" if self.bad(n) else "up/steady"
            t = time.monotonic()
            info = self.paho.client.publish(topic, b"%d" % n, self.qos)
            self.sent_at[(self.gen, info.mid)] = (n, t)
            n += 1
            self.sent = n

    def bad(self, n: int) -> bool:
        return bool(self.bad_every) and n % self.bad_every == self.bad_every - 1


class Upstream:
    """The upstream under test and the outage it suffers."""

    def __init__(self, kind: str, workdir: Path, inflight: int = 20) -> None:
        self.kind = kind
        self.mosquitto: Mosquitto | None = None
        self.cluster: Any = None
        self.proxy: LinkProxy | None = None
        self.killed = -1
        if kind == "mosquitto":
            # (its max_inflight_messages at least the bridge's max_inflight: docs/bridge.md, "The window")
            extra = [f"max_inflight_messages {inflight}"] if inflight > SISKIN_LIMITS["max_inflight"] else None
            self.mosquitto = Mosquitto(workdir, extra)
            self.mosquitto.start()
            self.ports = [self.mosquitto.port]
            self.pids = [self.mosquitto.pid]
        else:
            from tools.nats_cluster import NatsCluster

            self.cluster = NatsCluster(workdir / "nats", 3).start()
            self.ports = self.cluster.mqtt_ports
            self.pids = [n.proc.pid for n in self.cluster.nodes]

    def bridge_ports(self, case: str, delay: float) -> list[int]:
        """Where the bridge connects: the upstream, or a proxy in front of it
        (`delay`: s each way on its link)."""
        if case in ("cut", "stall") or delay:
            if self.kind != "mosquitto":
                raise SystemExit("--case cut/stall and --delay: with --upstream mosquitto")
            self.proxy = LinkProxy(self.ports[0], delay=delay).start()
            return [self.proxy.port]
        return self.ports

    def begin(self, case: str, edge: BrokerProcess) -> None:
        if case == "stop":
            for pid in self.pids:
                os.kill(pid, signal.SIGSTOP)
        elif case == "cut":
            assert self.proxy is not None
            self.proxy.down()
        elif case == "stall":
            assert self.proxy is not None
            self.proxy.stall()
        elif case == "node-kill":
            found = re.findall(r"bridge cloud: connected to 127\.0\.0\.1:(\d+)", edge.log_text())
            self.killed = self.ports.index(int(found[-1]))
            self.cluster.kill(self.killed)

    def end(self, case: str) -> None:
        if case == "stop":
            for pid in self.pids:
                os.kill(pid, signal.SIGCONT)
        elif case in ("cut", "stall"):
            assert self.proxy is not None
            self.proxy.up()
        elif case == "node-kill" and self.killed >= 0:
            self.cluster.restart(self.killed)
            self.pids[self.killed] = self.cluster.nodes[self.killed].proc.pid

    def consumer_port(self) -> int:
        """A node the outage leaves alone (node-kill: not the bridge's, found later): the first one."""
        return self.ports[0] if self.kind == "mosquitto" else self.ports[-1]

    def close(self) -> None:
        if self.proxy is not None:
            self.proxy.close()
        with contextlib.suppress(OSError):
            for pid in self.pids:
                os.kill(pid, signal.SIGCONT)
        if self.mosquitto is not None:
            self.mosquitto.stop()
        if self.cluster is not None:
            self.cluster.close()


def bridge_table(args: argparse.Namespace, ports: list[int]) -> dict[str, Any]:
    nats = args.upstream == "nats"
    return {
        "name": "cloud",
        "addresses": [f"127.0.0.1:{port}" for port in ports],
        "client_id": "edge-outage",
        "profile": "nats" if nats else "mqtt",
        "protocol": 4 if nats else args.protocol,
        "keepalive": args.keepalive,
        "backoff_max": args.backoff_max,
        "stall_timeout": args.stall_timeout,
        "max_inflight": args.max_inflight,
        "window": max(32, args.max_inflight),  # (the local window: at least the upstream one, docs/bridge.md)
        "topic": [{"pattern": "#", "direction": "out", "local_prefix": "up/", "remote_prefix": "edge/", "qos": args.qos}],
    }


def baseline(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """The same publisher against Siskin without a bridge: its longest PUBACK
    waits over the same phases (what "no worse than without a bridge" means)."""
    edge = BrokerProcess(workdir / "edge", limits={"sys_interval": 1, "store_sync": "always"}, log_level="info")
    publisher = None
    try:
        edge.start()
        publisher = SteadyPublisher(edge.port, args.rate, args.qos, 0)
        publisher.paho.connect()
        publisher.thread.start()
        start = time.monotonic()
        time.sleep(args.before + args.outage + args.after)
        publisher.stop.set()
        publisher.thread.join()
        settle_acks(publisher, args)
        away, back = start + args.before, start + args.before + args.outage
        waits = {"before": 0.0, "away": 0.0, "after": 0.0}
        for t, wait in publisher.acked().values():
            phase = "before" if t < away else "away" if t < back else "after"
            waits[phase] = max(waits[phase], wait)
        return {
            "published": publisher.sent,
            "acked_locally": len(publisher.acked()),
            "longest_puback_wait_s": {k: round(v, 3) for k, v in waits.items()},
        }
    finally:
        if publisher is not None:
            with contextlib.suppress(Exception):
                publisher.paho.close()
        edge.kill()


def measure(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """One run: the figures of the module doc."""
    upstream = Upstream(args.upstream, workdir, args.max_inflight)
    consumer: Consumer | None = None
    publisher: SteadyPublisher | None = None
    edge = BrokerProcess(
        workdir / "edge",
        limits={"sys_interval": 1, "store_sync": "always"},
        bridges=[bridge_table(args, upstream.bridge_ports(args.case, args.delay / 1000))],
        log_level="info",
    )
    down_windows: list[tuple[float, float]] = []  # Siskin killed .. serving again
    try:
        edge.start()
        edge.wait_log("bridge cloud: connected to", 60)
        consumer = Consumer(upstream.consumer_port(), args.qos, workdir)
        publisher = SteadyPublisher(edge.port, args.rate, args.qos, args.bad_every)
        publisher.paho.connect()
        publisher.thread.start()
        time.sleep(args.before)  # (a workload's length, not a synchronisation)
        first_of_outage = publisher.sent
        away = time.monotonic()
        upstream.begin(args.case, edge)
        if args.kill9:
            time.sleep(args.outage / 2)
            publisher.paused.set()
            killed = time.monotonic()
            edge.kill()
            edge.start()
            publisher.switch(edge.port)
            publisher.paused.clear()
            down_windows.append((killed, time.monotonic()))
            time.sleep(max(0.0, away + args.outage - time.monotonic()))
        else:
            time.sleep(args.outage)
        last_of_outage = publisher.sent
        upstream.end(args.case)
        back = time.monotonic()
        time.sleep(args.after)
        publisher.stop.set()
        publisher.thread.join()
        expected = settle_acks(publisher, args)
        drained = settle_arrivals(consumer, expected, args.settle)
        if args.keep:
            # Each acknowledged message: when it was sent (s since the outage began, wall clock) and its wait.
            with (workdir / "waits.txt").open("w") as f:
                for t, wait in sorted(publisher.acked().values()):
                    f.write(f"{t - away:.3f} {time.time() - time.monotonic() + t:.3f} {wait:.4f}\n")
        return figures(publisher, consumer, expected, (first_of_outage, last_of_outage), (away, back, drained),
                       down_windows, edge)  # fmt: skip
    finally:
        if consumer is not None:
            consumer.close()
        if publisher is not None:
            with contextlib.suppress(Exception):
                publisher.paho.close()
        edge.kill()
        upstream.close()


def settle_acks(publisher: SteadyPublisher, args: argparse.Namespace) -> set[int]:
    """The numbers the edge acknowledged, once the last PUBACKs came (or --settle s)."""
    deadline = time.monotonic() + args.settle
    while time.monotonic() < deadline and publisher.unanswered():
        time.sleep(0.2)
    return {n for n in publisher.acked() if not (args.upstream == "nats" and publisher.bad(n))}


def settle_arrivals(consumer: Consumer, expected: set[int], settle: float) -> float:
    """Wait until the consumer has `expected` or `settle` s pass without a new message; when it was done."""
    quiet_since = time.monotonic()
    seen = 0
    while time.monotonic() - quiet_since < settle:
        numbers = consumer.numbers()
        if expected <= set(numbers):
            break
        if len(numbers) != seen:
            seen = len(numbers)
            quiet_since = time.monotonic()
        time.sleep(0.2)
    arrivals = consumer.arrivals()
    return arrivals[-1][0] if arrivals else time.monotonic()


def figures(
    publisher: SteadyPublisher,
    consumer: Consumer,
    expected: set[int],
    outage_numbers: tuple[int, int],
    times: tuple[float, float, float],
    down_windows: list[tuple[float, float]],
    edge: BrokerProcess,
) -> dict[str, Any]:
    away, back, drained = times
    arrivals = consumer.arrivals()
    numbers = [n for _, n in arrivals]
    distinct = set(numbers)
    firsts: list[int] = []
    done: set[int] = set()
    for n in numbers:
        if n not in done:
            done.add(n)
            firsts.append(n)
    backlog = {n for n in range(*outage_numbers) if n in expected}
    replayed = [t for t, n in arrivals if n in backlog and t >= back]

    def in_down(t: float) -> bool:
        return any(a <= t <= b for a, b in down_windows)

    waits: dict[str, float] = {"before": 0.0, "away": 0.0, "draining": 0.0}
    for t, wait in publisher.acked().values():
        if in_down(t):
            continue  # (Siskin itself was down: no broker answers then)
        phase = "before" if t < away else "away" if t < back else "draining" if t < drained else ""
        if phase:
            waits[phase] = max(waits[phase], wait)
    return {
        "published": publisher.sent,
        "acked_locally": len(expected),
        "delivered_upstream": len(distinct & expected),
        "lost": len(expected - distinct),
        "duplicates": len(numbers) - len(distinct),
        "out_of_order": sum(1 for a, b in zip(firsts, firsts[1:]) if b < a),
        "dead_lettered": sys_value(edge, "dead_lettered"),
        "faults": sys_value(edge, "faults"),
        "backlog": len(backlog),
        "longest_puback_wait_s": {k: round(v, 3) for k, v in waits.items()},
        "first_replayed_after_s": round(min(replayed) - back, 2) if replayed else None,
        "replay_msgs_per_s": round(len(replayed) / (max(replayed) - min(replayed)), 1)
        if len(replayed) > 1 and max(replayed) > min(replayed)
        else None,
    }


def sys_value(edge: BrokerProcess, key: str) -> int:
    """$SYS/broker/bridge/cloud/<key> of the edge (retained, published every second)."""
    watch = Paho(edge.port, "outage-watch-" + key)
    try:
        watch.connect()
        watch.subscribe(f"$SYS/broker/bridge/cloud/{key}", 0)
        return int(watch.get(5).payload)
    finally:
        watch.close()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m tools.bridge_outage",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        epilog="Needs /usr/sbin/mosquitto (or nats-server). The figures are in docs/bridge.md.",
    )
    p.add_argument("--case", choices=CASES, default="stop", help="the outage (default stop; see the module doc)")
    p.add_argument("--kill9", action="store_true", help="also kill -9 Siskin in the middle of the outage")
    p.add_argument("--qos", type=int, choices=(1, 2), default=1, help="QoS of the messages and the rule (default 1)")
    p.add_argument("--protocol", type=int, choices=(4, 5), default=4, help="MQTT level to the upstream (default 4)")
    p.add_argument("--outage", type=float, default=60.0, help="seconds the upstream is away (default 60)")
    p.add_argument("--rate", type=float, default=200.0, help="messages per second from the publisher (default 200)")
    p.add_argument("--before", type=float, default=5.0, help="seconds of traffic before the outage (default 5)")
    p.add_argument("--after", type=float, default=10.0, help="seconds of traffic after it (default 10)")
    p.add_argument("--settle", type=float, default=30.0, help="give up after this many quiet seconds (default 30)")
    p.add_argument("--keepalive", type=int, default=60, help="the bridge's keep-alive in s (default 60, the default)")
    p.add_argument("--backoff-max", type=float, default=10.0, help="the bridge's longest retry delay (default 10 s)")
    p.add_argument("--stall-timeout", type=float, default=5.0, help="the bridge's stall_timeout (default 5 s)")
    p.add_argument("--delay", type=float, default=0.0, help="ms each way on the bridge's link (a proxy; default 0)")
    p.add_argument("--max-inflight", type=int, default=20, help="the bridge's max_inflight (default 20, the default)")
    p.add_argument("--bad-every", type=int, default=0, help="every Nth message to a topic with a '.' (default none)")
    p.add_argument("--runs", type=int, default=1, help="runs of the case (default 1)")
    p.add_argument("--consumer", metavar="PORT:QOS:FILE", help=argparse.SUPPRESS)  # (its own process)
    p.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (the brokers' logs, the edge's store)")
    p.add_argument(
        "--baseline", action="store_true", help="no bridge, no outage: the same publisher's PUBACK waits, to compare"
    )
    p.add_argument(
        "--upstream",
        choices=("mosquitto", "nats"),
        default="mosquitto",
        help="mosquitto (profile mqtt) or a 3-node NATS JetStream cluster (profile nats, QoS 1)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.consumer:
        return consume(args.consumer)
    if args.rate * (args.before + args.outage + args.after) >= 65000:
        p.error("rate x duration must stay below 65,000 messages (paho's message ids must not wrap)")
    if args.upstream == "nats" and args.qos == 2:
        p.error("NATS takes QoS 0 and 1 only: --qos 1")
    if args.case == "node-kill" and args.upstream != "nats":
        p.error("--case node-kill: with --upstream nats")
    if args.upstream == "mosquitto" and not Mosquitto.available():
        print("mosquitto is not installed (apt-get install mosquitto)", file=sys.stderr)
        return 2
    if args.baseline:
        print(f"baseline: no bridge, {args.rate:g} msg/s QoS {args.qos} for {args.before + args.outage + args.after:g} s")
    else:
        print(
            f"upstream {args.upstream}, case {args.case}{' + Siskin kill -9' if args.kill9 else ''},"
            f" outage {args.outage:g} s, {args.rate:g} msg/s QoS {args.qos}, keepalive {args.keepalive} s,"
            f" backoff_max {args.backoff_max:g} s, stall_timeout {args.stall_timeout:g} s,"
            f" max_inflight {args.max_inflight}, link delay {args.delay:g} ms each way"
        )
    failed = False
    for run in range(1, args.runs + 1):
        with contextlib.ExitStack() as stack:
            if args.keep:
                tmp = str(Path(args.keep) / f"run{run}")
                Path(tmp).mkdir(parents=True, exist_ok=True)
            else:
                tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="bridge-outage-"))
            result = baseline(args, Path(tmp)) if args.baseline else measure(args, Path(tmp))
        print(f"run {run}: " + ", ".join(f"{k} {v}" for k, v in result.items()), flush=True)
        if not args.baseline:
            failed = failed or result["lost"] > 0 or (args.qos == 2 and result["duplicates"] > 0)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

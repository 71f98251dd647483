"""Acknowledged QoS 1 messages lost to kill -9, counted over many runs.

    python -m tools.crashloss --runs 40                          # built-in defaults
    python -m tools.crashloss --runs 40 --config boards/linux.toml

Each run starts the real host broker (`python -m cpython_host`, with a
`--data-dir` store in a fresh directory), connects a persistent MQTT 3.1.1
subscriber (clean session 0) to `crash/#` at QoS 1 and takes it offline;
then a publisher sends a random number (--min..--max) of numbered QoS 1
messages, 32 in flight, recording every PUBACK, and the broker is killed
with SIGKILL once a random number of them (1..all) are acknowledged. After
a restart on the same store the subscriber reconnects and takes everything
queued for it. An acknowledged message that does not arrive is lost: the
target is 0. With --no-kill the broker is not killed (the queue sizing
check: every message is acknowledged and every one arrives).

With --online the subscriber stays connected while the messages flow (its
session persistent, subscribed at QoS 2) and the publisher alternates
QoS 1 and QoS 2: deliveries then leave the broker before the store's sync
(docs/persistence.md, "Deliveries before the sync"), and the kill lands
while some are on the wire. The subscriber is an exactly-once receiver (a
QoS 2 packet id kept until its PUBREL, across the restart): it reconnects
and takes the rest. Counted: acknowledged messages never delivered (target
0), QoS 2 messages delivered twice (target 0), QoS 1 messages delivered
again (allowed).

Prints one line per run and the totals; exit status 1 if any acknowledged
message was lost (or, with --online, a QoS 2 message delivered twice). `make soak` runs 40 runs with each shipped host settings
file; `make test` a few (tests/host/test_crashloss.py).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

from tests.host.broker_proc import (
    DISCONNECT,
    BrokerProcess,
    Publisher,
    RawClient,
    Receiver,
    arrived,
    drain,
    offline_subscriber,
)

TOPIC = "crash"
SUB_ID = "crash-sub"


class Run:
    """What one run saw: messages published, acknowledged and received."""

    def __init__(self, sent: int, acked: set[int], received: list[int], peak_rss: int) -> None:
        self.sent = sent
        self.acked = acked
        self.received = received
        self.peak_rss = peak_rss

    @property
    def lost(self) -> list[int]:
        return sorted(self.acked - set(self.received))

    @property
    def in_order(self) -> bool:
        firsts = list(dict.fromkeys(self.received))  # a QoS 1 message in flight may come twice
        return firsts == sorted(firsts)


def _broker(workdir: Path, config: str | None) -> BrokerProcess:
    return BrokerProcess(workdir, log_level="info", base=config)


def run_once(workdir: Path, rng: random.Random, count: int, config: str | None = None, kill: bool = True) -> Run:
    """One run in `workdir` (fresh): `count` QoS 1 messages, killed at a random ack."""
    kill_after = rng.randint(1, count) if kill else 0
    with _broker(workdir, config) as broker:
        offline_subscriber(broker, SUB_ID, TOPIC + "/#")
        pub = Publisher(broker.port, "crash-pub")
        stop = threading.Event()
        flood = threading.Thread(target=pub.flood, args=(count, stop, 1, TOPIC), daemon=True)
        flood.start()
        peak = broker.rss()

        def acked() -> int:
            with pub.lock:
                return len(pub.acked[1])

        target = kill_after or count
        deadline = time.monotonic() + 120
        while acked() < target and pub.reader.is_alive() and time.monotonic() < deadline:
            time.sleep(0.001)
        peak = max(peak, broker.rss())
        if kill:
            broker.kill()  # SIGKILL: no shutdown, no final sync
        stop.set()
        flood.join(5)
        if not kill:
            pub.client.send(DISCONNECT)
        pub.client.close()
        pub.reader.join(5)
        with pub.lock:
            got_acks = set(pub.acked[1])
        if not kill:
            assert broker.stop() == 0, broker.log_text()[-3000:]

    with _broker(workdir, config) as broker:
        sub = RawClient(broker.port)
        connack = sub.connect(SUB_ID, clean=False)
        assert connack == b"\x01\x00", f"the persistent session was lost: CONNACK {connack!r}"
        got = drain(sub, until=arrived({f"{TOPIC}/1": got_acks}))
        peak = max(peak, broker.rss())
        sub.send(DISCONNECT)
        sub.close()
    received = [int(payload) for topic, payload, _qos, _dup, _pid in got if topic == f"{TOPIC}/1"]
    return Run(count, got_acks, received, peak)


class OnlineRun:
    """What one --online run saw, per QoS: acknowledged, delivered."""

    def __init__(self, sent: int, acked: dict[int, set[int]], rx: Receiver) -> None:
        self.sent = sent
        self.acked = acked
        self.delivered = rx.delivered
        self.resent = rx.resent

    def lost(self, qos: int) -> list[int]:
        return sorted(self.acked[qos] - set(self.delivered[qos]))

    @property
    def twice(self) -> int:
        """QoS 2 messages delivered more than once."""
        numbers = self.delivered[2]
        return len(numbers) - len(set(numbers))

    @property
    def again(self) -> int:
        """QoS 1 deliveries of a message delivered before (allowed)."""
        numbers = self.delivered[1]
        return len(numbers) - len(set(numbers))

    @property
    def in_order(self) -> bool:
        for qos in (1, 2):
            firsts = list(dict.fromkeys(self.delivered[qos]))
            if firsts != sorted(firsts):
                return False
        return True


def run_online(workdir: Path, rng: random.Random, count: int, config: str | None = None) -> OnlineRun:
    """One --online run in `workdir` (fresh): `count` messages, QoS 1 and 2
    alternately, to a subscriber online; killed at a random acknowledgement."""
    kill_after = rng.randint(1, count)
    rx = Receiver(SUB_ID, TOPIC + "/#")
    with _broker(workdir, config) as broker:
        rx.attach(broker.port, subscribe=True)
        pub = Publisher(broker.port, "crash-pub")
        stop = threading.Event()
        flood = threading.Thread(target=pub.flood, args=(count, stop, 0, TOPIC), daemon=True)
        flood.start()

        def acked() -> int:
            with pub.lock:
                return len(pub.acked[1]) + len(pub.acked[2])

        deadline = time.monotonic() + 120
        while acked() < kill_after and pub.reader.is_alive() and time.monotonic() < deadline:
            time.sleep(0.001)
        broker.kill()  # SIGKILL: no shutdown, no final sync
        stop.set()
        flood.join(5)
        pub.client.close()
        pub.reader.join(5)
        if rx.reader is not None:
            rx.reader.join(10)  # its socket closed with the broker
        with pub.lock:
            got_acks = {q: set(pub.acked[q]) for q in (1, 2)}
            sent = max((n for _q, n in pub.pid_to_msg.values()), default=-1) + 1

    with _broker(workdir, config) as broker:
        connack = rx.attach(broker.port, subscribe=False)
        assert connack == b"\x01\x00", f"the persistent session was lost: CONNACK {connack!r}"
        rx.wait_for(got_acks)
        rx.detach()
    return OnlineRun(sent, got_acks, rx)


def main_online(args: argparse.Namespace, rng: random.Random, settings: str) -> int:
    print(
        f"crashloss --online: {args.runs} runs, {args.min}..{args.max} QoS 1 + 2 messages each, {settings}, seed {args.seed}"
    )
    with tempfile.TemporaryDirectory(prefix="crashloss-") as tmp:
        base = Path(args.workdir) if args.workdir else Path(tmp)
        acked = {1: 0, 2: 0}
        lost = twice = again = disordered = 0
        for i in range(args.runs):
            run = run_online(base / f"run{i}", rng, rng.randint(args.min, args.max), args.config)
            lost_now = run.lost(1) + run.lost(2)
            for q in (1, 2):
                acked[q] += len(run.acked[q])
            lost += len(lost_now)
            twice += run.twice
            again += run.again
            disordered += not run.in_order
            print(
                f"run {i + 1:3d}: published up to {run.sent:5d}, acknowledged QoS 1 {len(run.acked[1]):5d} "
                f"QoS 2 {len(run.acked[2]):5d}, lost {len(lost_now)}"
                + (f" e.g. {lost_now[:5]}" if lost_now else "")
                + f", QoS 2 twice {run.twice}, QoS 1 again {run.again}, QoS 2 resends filtered {run.resent}"
                + ("" if run.in_order else ", OUT OF ORDER"),
                flush=True,
            )
    print(
        f"total --online ({settings}): {args.runs} runs, acknowledged {acked[1] + acked[2]} "
        f"(QoS 1 {acked[1]}, QoS 2 {acked[2]}), lost {lost}; QoS 2 delivered twice {twice}; "
        f"QoS 1 delivered again {again}; runs out of order {disordered}"
    )
    return 1 if lost or twice or disordered else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m tools.crashloss",
        description="Kill -9 the host broker while a publisher sends QoS 1 messages to an offline "
        "persistent 3.1.1 subscriber; count the acknowledged messages that never arrive (target: 0).",
        epilog="examples:\n  python -m tools.crashloss --runs 40\n"
        "  python -m tools.crashloss --runs 40 --config boards/linux.toml\n"
        "  python -m tools.crashloss --runs 3 --no-kill    # queue sizing: all 1,000..5,000 arrive\n"
        "  python -m tools.crashloss --runs 40 --online    # the subscriber online, QoS 1 + 2",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--runs", type=int, default=40, help="runs (default 40)")
    ap.add_argument("--config", help="settings file for the broker (default: the built-in defaults)")
    ap.add_argument("--min", type=int, default=1000, help="fewest messages a run publishes (default 1000)")
    ap.add_argument("--max", type=int, default=5000, help="most messages a run publishes (default 5000)")
    ap.add_argument("--seed", type=int, help="random seed (default: random, printed)")
    ap.add_argument("--no-kill", action="store_true", help="do not kill the broker (a clean restart instead)")
    ap.add_argument("--workdir", help="where the runs' stores and logs go (default: a temporary directory)")
    ap.add_argument(
        "--online",
        action="store_true",
        help="the subscriber stays online during the storm, QoS 1 and 2 alternately; "
        "also counts QoS 2 messages delivered twice (target 0)",
    )
    args = ap.parse_args(argv)
    if not 1 <= args.min <= args.max:
        ap.error("--min and --max want 1 <= min <= max")
    if args.online and args.no_kill:
        ap.error("--online always kills the broker")
    args.seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    seed = args.seed
    rng = random.Random(seed)
    settings = args.config or "built-in defaults"
    if args.online:
        return main_online(args, rng, settings)
    print(f"crashloss: {args.runs} runs, {args.min}..{args.max} QoS 1 messages each, {settings}, seed {seed}")
    with tempfile.TemporaryDirectory(prefix="crashloss-") as tmp:
        base = Path(args.workdir) if args.workdir else Path(tmp)
        sent = acked = received = lost = 0
        disordered = 0
        peak = 0
        for i in range(args.runs):
            run = run_once(base / f"run{i}", rng, rng.randint(args.min, args.max), args.config, not args.no_kill)
            sent += run.sent
            acked += len(run.acked)
            received += len(run.acked & set(run.received))
            lost += len(run.lost)
            disordered += not run.in_order
            peak = max(peak, run.peak_rss)
            print(
                f"run {i + 1:3d}: published up to {run.sent:5d}, acknowledged {len(run.acked):5d}, "
                f"received {len(set(run.received)):5d}, lost {len(run.lost)}"
                + (f" e.g. {run.lost[:5]}" if run.lost else "")
                + ("" if run.in_order else ", OUT OF ORDER"),
                flush=True,
            )
    print(
        f"total ({settings}): {args.runs} runs, acknowledged {acked}, arrived {received}, "
        f"lost {lost}; runs out of order {disordered}; broker RSS peak {peak / 1e6:.1f} MB"
    )
    return 1 if lost or disordered else 0


if __name__ == "__main__":
    sys.exit(main())

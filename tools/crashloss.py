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

Prints one line per run and the totals; exit status 1 if any acknowledged
message was lost. `make soak` runs 40 runs with each shipped host settings
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

from tests.host.broker_proc import DISCONNECT, BrokerProcess, Publisher, RawClient, arrived, drain, offline_subscriber

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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m tools.crashloss",
        description="Kill -9 the host broker while a publisher sends QoS 1 messages to an offline "
        "persistent 3.1.1 subscriber; count the acknowledged messages that never arrive (target: 0).",
        epilog="examples:\n  python -m tools.crashloss --runs 40\n"
        "  python -m tools.crashloss --runs 40 --config boards/linux.toml\n"
        "  python -m tools.crashloss --runs 3 --no-kill    # queue sizing: all 1,000..5,000 arrive",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--runs", type=int, default=40, help="runs (default 40)")
    ap.add_argument("--config", help="settings file for the broker (default: the built-in defaults)")
    ap.add_argument("--min", type=int, default=1000, help="fewest messages a run publishes (default 1000)")
    ap.add_argument("--max", type=int, default=5000, help="most messages a run publishes (default 5000)")
    ap.add_argument("--seed", type=int, help="random seed (default: random, printed)")
    ap.add_argument("--no-kill", action="store_true", help="do not kill the broker (a clean restart instead)")
    ap.add_argument("--workdir", help="where the runs' stores and logs go (default: a temporary directory)")
    args = ap.parse_args(argv)
    if not 1 <= args.min <= args.max:
        ap.error("--min and --max want 1 <= min <= max")
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    settings = args.config or "built-in defaults"
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

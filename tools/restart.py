"""A restart over a big store: how long the restore takes, what it logs, and memory before/after.

    python -m tools.restart --messages 200000                    # boards/linux.toml
    python -m tools.restart --messages 50000 --config boards/rpi.toml --drain

Starts the real host broker (`python -m cpython_host`, --data-dir in a
fresh directory), takes a persistent MQTT 3.1.1 subscriber (clean session 0,
`restart/#` at QoS 1) offline, publishes --messages numbered QoS 1 messages
(8-byte payloads) for it and waits for every PUBACK. Then it reads the
broker's resident memory (RSS, /proc), stops it (SIGTERM), starts it again
on the same store, and prints: the RSS before the restart, the time from the
new process' start to "listening on" (and its CPU time: the wall time
depends on the machine's load), the RSS once it listens, and the broker's
log lines of the restore (progress, counts, compaction). With
--drain the subscriber then takes its queue and the count is checked.
The figures are in docs/persistence.md.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import threading
import time
from pathlib import Path

from tests.host.broker_proc import BrokerProcess, Publisher, RawClient, drain, offline_subscriber, wait_until

TOPIC = "restart"
SUB_ID = "restart-sub"
RESTORE_LINES = re.compile(r"siskin\.(store|core|host): .*(restor|compact|store|listening on)")


def fill(broker: BrokerProcess, count: int) -> None:
    """An offline persistent subscriber with `count` QoS 1 messages queued for it."""
    offline_subscriber(broker, SUB_ID, TOPIC + "/#")
    pub = Publisher(broker.port, "restart-pub")
    flood = threading.Thread(target=pub.flood, args=(count, threading.Event(), 1, TOPIC), daemon=True)
    flood.start()

    def acked() -> int:
        with pub.lock:
            return len(pub.acked[1])

    wait_until(lambda: acked() == count, 60 + count / 1000, lambda: f"{acked()} of {count} acknowledged")
    flood.join()
    pub.client.close()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process `pid` so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load() -> str:
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.restart", description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=200000, help="QoS 1 messages queued (default 200,000)")
    p.add_argument("--config", default="boards/linux.toml", help="settings file (default boards/linux.toml)")
    p.add_argument("--drain", action="store_true", help="then deliver the queue and check its count")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="siskin-restart-") as tmp:
        work = Path(tmp)
        broker = BrokerProcess(work, log_level="info", base=args.config)
        with broker:
            fill(broker, args.messages)
            before = broker.rss()
            assert broker.stop(timeout=120) == 0
        broker.log_path.rename(work / "first.log")
        started = time.monotonic()
        broker.start(timeout=600)
        try:
            listening = time.monotonic() - started
            after = broker.rss()
            cpu = cpu_seconds(broker.pid)
            print("the second start's log:")
            for line in broker.log_text().splitlines():
                if RESTORE_LINES.search(line):
                    print("  " + line)
            print(f"store: {args.messages:,} queued QoS 1 messages, {args.config}")
            print(f"RSS before the restart:   {mb(before)}")
            print(f"RSS after the restore:    {mb(after)} ({(after - before) / before:+.1%})")
            print(f"start to listening:       {listening:.1f} s, {cpu:.1f} s of CPU (load average {load()})")
            if args.drain:
                sub = RawClient(broker.port)
                assert sub.connect(SUB_ID, clean=False)[1] == 0
                got = drain(sub, quiet=60.0)  # (a compaction of a big log pauses the loop for seconds)
                print(f"delivered after the restart: {len(got):,} of {args.messages:,}")
                sub.close()
                if len(got) < args.messages:
                    return 1
            assert broker.stop(timeout=120) == 0
        finally:
            broker.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())

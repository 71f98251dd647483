"""Retained-replay abuse against the real host broker: RSS peak and a bystander's latency.

A retained replay's abuse: the broker holds N retained messages; one
client sends M SUBSCRIBEs to `#` in one burst and never reads its socket;
meanwhile a bystander (paho, MQTT 3.1.1) does QoS 1 round trips (PUBLISH to
a topic it subscribes to at QoS 1, timed until the message comes back).

For each settings file asked for, the tool starts `python -m cpython_host`
(no --data-dir: in memory), stores the retained messages, measures the
bystander alone, runs the abuse for --duration seconds (or until the broker
disconnects the abuser), closes the abuser, and prints:

  - the broker's RSS (/proc/PID/status VmRSS, sampled every 10 ms) before the
    abuse, its peak during it, and after the abuser left;
  - the bystander's round trips: p50 / p99 / max (ms), alone and under abuse;
  - whether and when the broker closed the abuser, and its log line.

  python -m tools.abuse_retained                     built-in defaults and boards/linux.toml
  python -m tools.abuse_retained --settings defaults --retained 2000 --duration 5
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from tools.bench import mqtt
from tools.bench.brokers import REPO_ROOT, BrokerProc, siskin_python

SETTINGS = {"defaults": None, "linux": "boards/linux.toml"}


class Broker(BrokerProc):
    """`python -m cpython_host` with the built-in defaults or a settings file."""

    def __init__(self, workdir: Path, config: str | None) -> None:
        self.name = "siskin"
        super().__init__(workdir)
        self.config = config

    def command(self) -> list[str]:
        cmd = [siskin_python(), "-m", "cpython_host", "--host", "127.0.0.1", "--port", str(self.port)]
        if self.config:
            cmd += ["--config", str(REPO_ROOT / self.config)]
        return [*cmd, "--log-level", "info"]


def rss(pid: int) -> int:
    """VmRSS of process `pid`, in bytes (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class RssPeak:
    """The peak VmRSS of process `pid` from now, sampled every 10 ms in a thread until stop()."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.before = rss(pid)
        self.peak = self.before
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def _sample(self) -> None:
        while not self.done.is_set():
            self.peak = max(self.peak, rss(self.pid))
            time.sleep(0.01)

    def stop(self) -> int:
        """Stop sampling; the peak."""
        self.done.set()
        self.thread.join(5)
        return self.peak


def store_retained(port: int, count: int, size: int) -> None:
    """`count` retained messages of `size` bytes, then a QoS 1 PUBLISH whose PUBACK says all were read."""
    sock = mqtt.open_client(port, "retainer")
    body = bytes(size)
    batch = []
    for i in range(count):
        batch.append(mqtt.publish(f"abuse/{i // 100}/{i}", body, retain=True))
        if len(batch) == 500:
            sock.sendall(b"".join(batch))
            batch = []
    sock.sendall(b"".join(batch) + mqtt.publish("abuse/done", b"", qos=1, packet_id=1))
    ack = mqtt.recv_exact(sock, 4)
    if ack != b"\x40\x02\x00\x01":
        raise RuntimeError(f"no PUBACK after storing the retained messages: {ack.hex()}")
    sock.sendall(mqtt.DISCONNECT)
    sock.close()


class Bystander:
    """A paho client timing QoS 1 round trips through the broker, in its own thread."""

    def __init__(self, port: int) -> None:
        import queue

        import paho.mqtt.client as paho
        from paho.mqtt.enums import CallbackAPIVersion

        self.got: queue.Queue[float] = queue.Queue()
        c = paho.Client(CallbackAPIVersion.VERSION2, client_id="bystander", protocol=paho.MQTTv311)
        c.on_message = lambda client, userdata, msg: self.got.put(time.monotonic())
        c.connect("127.0.0.1", port, keepalive=60)
        # Without it the client's Nagle waits for the broker's delayed ACK of
        # the previous PUBACK: 40 ms per round trip that are no broker's.
        sock: Any = c.socket()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c.loop_start()
        c.subscribe("bystander/ping", 1)
        self.client = c
        time.sleep(0.2)  # (the SUBACK; paho queues the first PUBLISH behind it anyway)
        self.samples: list[float] = []
        self.lost = 0
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None

    def run(self) -> None:
        import queue

        while not self.stop.is_set():
            started = time.monotonic()
            self.client.publish("bystander/ping", b"p", 1)
            try:
                self.samples.append(self.got.get(timeout=10) - started)
            except queue.Empty:
                self.lost += 1
            time.sleep(0.005)

    def measure(self) -> list[float]:
        """Start a new series of round trips; stop_measuring() returns it."""
        self.samples = []
        self.stop.clear()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()
        return self.samples

    def stop_measuring(self) -> list[float]:
        self.stop.set()
        assert self.thread is not None
        self.thread.join(15)
        return self.samples

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def percentiles(samples: list[float]) -> str:
    if not samples:
        return "no round trips"
    s = sorted(samples)

    def at(p: float) -> float:
        return s[min(len(s) - 1, int(p * len(s)))] * 1000

    return f"{len(s)} round trips: p50 {at(0.5):.1f} ms, p99 {at(0.99):.1f} ms, max {s[-1] * 1000:.1f} ms"


def abuse(port: int, subscribes: int) -> socket.socket:
    """The abuser: CONNECT, then `subscribes` SUBSCRIBEs to `#` in one send; it never reads again."""
    sock = mqtt.open_client(port, "abuser")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
    sock.sendall(b"".join(mqtt.subscribe(i + 1, "#", 0) for i in range(subscribes)))
    return sock


def run(name: str, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="siskin-abuse-") as tmp:
        broker = Broker(Path(tmp), SETTINGS[name])
        broker.start()
        try:
            store_retained(broker.port, args.retained, args.payload)
            by = Bystander(broker.port)
            by.measure()
            time.sleep(args.calm)
            alone = by.stop_measuring()
            time.sleep(0.5)
            sampler = RssPeak(broker.pid)
            by.measure()
            started = time.monotonic()
            sock = abuse(broker.port, args.subscribes)
            closed_at = None
            while time.monotonic() - started < args.duration:
                time.sleep(0.05)
                if "closing abuser" in broker.log_path.read_text():
                    closed_at = time.monotonic() - started
                    break
            under = by.stop_measuring()
            sock.close()
            time.sleep(1.0)
            peak = sampler.stop()
            after = rss(broker.pid)
            by.close()
            log = [line for line in broker.log_path.read_text().splitlines() if "closing abuser" in line]
            return {
                "settings": name,
                "before": sampler.before,
                "peak": peak,
                "after": after,
                "alone": alone,
                "under": under,
                "lost": by.lost,
                "closed_at": closed_at,
                "log": log[-1] if log else "",
            }
        finally:
            broker.stop()


def report(r: dict[str, Any], args: argparse.Namespace) -> None:
    mb = 1 << 20
    config = SETTINGS[r["settings"]] or "built-in defaults"
    print(f"== {config}: {args.retained} retained x {args.payload} B, {args.subscribes} SUBSCRIBE '#', never read")
    print(
        f"  broker RSS: {r['before'] / mb:.1f} MiB before, peak {r['peak'] / mb:.1f} MiB "
        f"(+{(r['peak'] - r['before']) / mb:.1f}), {r['after'] / mb:.1f} MiB after the abuser left"
    )
    print(f"  bystander alone:       {percentiles(r['alone'])}")
    print(f"  bystander under abuse: {percentiles(r['under'])}; {r['lost']} lost (10 s without an answer)")
    if r["closed_at"] is not None:
        print(f"  abuser closed by the broker after {r['closed_at']:.1f} s: {r['log'].split('siskin.core: ')[-1]}")
    else:
        print(f"  abuser still connected after {args.duration:.0f} s")
    sys.stdout.flush()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m tools.abuse_retained",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--settings",
        choices=("defaults", "linux", "both"),
        default="both",
        help="defaults: the built-in limits (no --config); linux: boards/linux.toml; both (default)",
    )
    p.add_argument("--retained", type=int, default=10000, help="retained messages stored (default 10000)")
    p.add_argument("--payload", type=int, default=1000, help="bytes per retained message (default 1000)")
    p.add_argument("--subscribes", type=int, default=50, help="SUBSCRIBE '#' packets the abuser sends (default 50)")
    p.add_argument("--duration", type=float, default=20.0, help="s of abuse at most (default 20)")
    p.add_argument("--calm", type=float, default=2.0, help="s the bystander is measured alone first (default 2)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    os.chdir(REPO_ROOT)
    names = ["defaults", "linux"] if args.settings == "both" else [args.settings]
    for name in names:
        report(run(name, args), args)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Rate limits under load: what a flooder costs its neighbours, and what the
limits cost when nobody reaches them (`python -m tools.bench limits`).

A bystander client measures PUBLISH QoS 1 -> PUBACK latency for `seconds`,
one PUBLISH every 1/BYSTANDER_RATE s (under RATE, so that it is never held
back itself), its p50/p90/p99 in microseconds, in four runs, each against a
fresh Siskin:

- `off`: no rate limit set (the rate module is not even loaded);
- `on_idle`: per-client, per-user and per-listener rates set far above what
  anyone sends (every PUBLISH is charged to three buckets, none in debt);
- `limited`: `rate_messages` = RATE and `rate_grace` 0 (back-pressure only),
  the bystander alone: its baseline under limits;
- `flooded`: the same broker config, while another client floods QoS 0 at
  10 x RATE (paced in 10 ms slices; when the broker stops reading it, its
  sends block and it falls behind, never more than a second's worth).

What the issue asks of them: the bystander's p99 when `flooded` within 10 %
of `limited`, and `on_idle` within 3 % of `off`. The flooder reports what it
managed to send, and the broker's log how often it was held back.

Each run is a separate worker process (fork) with a blocking raw socket, as
tools/bench/scenarios.py's latency scenario.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from . import brokers, mqtt
from .scenarios import RECV, Workers, _check, _cpu_wall, _usage, percentiles

RATE = 1000  # rate_messages (PUBLISHes/s) in `limited` and `flooded`: every client's
# The bystander's own pace, under RATE (else it is held back itself): one
# PUBLISH every 1/BYSTANDER_RATE s, each timed until its PUBACK.
BYSTANDER_RATE = 400
FLOOD_FACTOR = 10
SLICE_S = 0.01  # the flooder's pacing step
# `on_idle`: every limit set, none reached
ON_IDLE: dict[str, object] = {
    "rate_messages": 10**7,
    "rate_bytes": 10**9,
    "user_rate_messages": 10**7,
    "listener_rate_messages": 10**7,
    "listener_rate_bytes": 10**9,
}
LIMITED: dict[str, object] = {"rate_messages": RATE, "rate_grace": 0}
NONE: dict[str, object] = {}
RUNS: tuple[tuple[str, dict[str, object], bool], ...] = (
    ("off", NONE, False),
    ("on_idle", ON_IDLE, False),
    ("limited", LIMITED, False),
    ("flooded", LIMITED, True),
)


def bystander_worker(port: int, seconds: float, tag: str) -> dict[str, Any]:
    cpu0, wall0 = _cpu_wall()
    sock = mqtt.open_client(port, f"bystander-{tag}")
    sock.settimeout(10)
    buf = bytearray(RECV)
    pubs = [mqtt.publish(f"bench/calm/{tag}", mqtt.payload(), 1, i) for i in range(1, 1001)]
    for i in range(200):  # warm-up
        sock.sendall(pubs[i])
        mqtt.recv_exact(sock, 4)
    samples: list[float] = []
    due = time.monotonic()
    end = due + seconds
    i = 0
    while due < end:
        now = time.monotonic()
        if due > now:
            time.sleep(due - now)
        due += 1.0 / BYSTANDER_RATE
        t0 = time.perf_counter_ns()
        sock.sendall(pubs[i % 1000])
        got = 0
        while got < 4:
            n = sock.recv_into(buf, 4 - got)
            if not n:
                raise ConnectionError("broker closed the bystander")
            got += n
        samples.append((time.perf_counter_ns() - t0) / 1000.0)
        i += 1
    sock.sendall(mqtt.DISCONNECT)
    sock.close()
    return {"who": "bystander", "samples": samples, **_usage(cpu0, wall0)}


def flooder_worker(port: int, seconds: float, rate: int, tag: str) -> dict[str, Any]:
    cpu0, wall0 = _cpu_wall()
    sock = mqtt.open_client(port, f"flooder-{tag}")
    per_slice = max(1, int(rate * SLICE_S))
    packet = mqtt.publish(f"bench/flood/{tag}", mqtt.payload(), 0) * per_slice
    sent = 0
    start = time.monotonic()
    due = start
    while True:
        now = time.monotonic()
        if now - start >= seconds:
            break
        if due > now:
            time.sleep(due - now)
        sock.sendall(packet)  # blocks while the broker holds it back
        sent += per_slice
        due += SLICE_S
        if due < time.monotonic() - 1.0:
            due = time.monotonic() - 1.0  # behind: catch up at most a second's worth
    sock.close()
    return {"who": "flooder", "sent": sent, "span": time.monotonic() - start, **_usage(cpu0, wall0)}


def measure(port: int, seconds: float, flood: bool, tag: str) -> dict[str, Any]:
    w = Workers()
    try:
        w.start(bystander_worker, port, seconds, tag)
        if flood:
            w.start(flooder_worker, port, seconds + 1.0, RATE * FLOOD_FACTOR, tag)
        results = w.results(2 if flood else 1, seconds + 120)
        _check(results)
    finally:
        w.close()
    by = {r["who"]: r for r in results}
    out: dict[str, Any] = {
        "puback_us": percentiles(by["bystander"]["samples"]),
        "count": len(by["bystander"]["samples"]),
    }
    if flood:
        f = by["flooder"]
        out["flooder_sent_per_s"] = round(f["sent"] / f["span"])
    return out


def run(python: str | None, seconds: float, label: str) -> dict[str, Any]:
    """The four runs on one interpreter; their figures by run name."""
    figures: dict[str, Any] = {}
    workdir = brokers.make_workdir()
    for name, limits, flood in RUNS:
        broker = brokers.Siskin(workdir, python, name=f"{label}-{name}", loop="asyncio", limits=limits)
        broker.start()
        try:
            figures[name] = measure(broker.port, seconds, flood, name)
            figures[name]["held_logged"] = broker_log_count(broker.log_path, "over rate_messages")
        finally:
            broker.stop()
    return figures


def broker_log_count(path: Path, text: str) -> int:
    try:
        return path.read_text(errors="replace").count(text)
    except FileNotFoundError:
        return 0


def report(label: str, figures: dict[str, Any]) -> str:
    def p99(name: str) -> float:
        return float(figures[name]["puback_us"]["p99"])

    lines = [
        f"### {label}",
        "",
        "| run | bystander PUBACK p50 / p90 / p99 (us) | samples | flooder sent/s |",
        "|---|---|---|---|",
    ]
    for name, _limits, _flood in RUNS:
        f = figures[name]
        pc = f["puback_us"]
        lines.append(
            f"| {name} | {pc['p50']} / {pc['p90']} / {pc['p99']} | {f['count']} | {f.get('flooder_sent_per_s', '-')} |"
        )
    lines.append("")
    lines.append(
        f"- flooded vs limited p99: {100.0 * (p99('flooded') / p99('limited') - 1):+.1f} % (goal: within 10 %)"
    )
    lines.append(f"- on_idle vs off p99: {100.0 * (p99('on_idle') / p99('off') - 1):+.1f} % (goal: within 3 %)")
    return "\n".join(lines)


def main(seconds: float, pypy: bool) -> int:
    from .__main__ import machine

    print(f"bench limits: {seconds} s per run, rate_messages {RATE}, flooder at {FLOOD_FACTOR} x; {machine()}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    targets: list[tuple[str, str | None]] = [("CPython", None)]
    if pypy:
        exe = brokers.pypy_python()
        if exe is None:
            print("bench limits: no .venv-pypy: PyPy skipped")
        else:
            targets.append(("PyPy", exe))
    for label, exe in targets:
        figures = run(exe, seconds, label.lower())
        print()
        print(report(f"Siskin on {label}", figures))
    return 0

"""Rate limits under load: what a flooder costs its neighbours, and what the
limits cost when nobody reaches them (`python -m tools.bench limits`).

A bystander client measures PUBLISH QoS 1 -> PUBACK latency for `seconds`,
one PUBLISH every 1/BYSTANDER_RATE s (under RATE, so that it is never held
back itself), its p50/p90/p99 in microseconds, in five runs, each against a
fresh Siskin:

- `off`: no rate limit set (the rate module is not even loaded);
- `on_idle`: per-client, per-user and per-listener rates set far above what
  anyone sends (every PUBLISH is charged to three buckets, none in debt);
- `limited`: `rate_messages` = RATE and `rate_grace` 0 (back-pressure only),
  the bystander alone: its baseline under limits;
- `within_rate`: the same broker config, while another client publishes
  QoS 0 at WITHIN_FACTOR x RATE, paced as the flooder below: traffic the
  limit allows (never held back), so what it costs the bystander is the
  cost of the broker's work for it, limits or not;
- `flooded`: the same broker config, while another client floods QoS 0 at
  FLOOD_FACTOR x RATE (paced in 10 ms slices; when the broker stops
  reading it, its sends block and it falls behind, never more than a
  second's worth). The broker passes about RATE of it a second, so against
  `within_rate` (nearly as much passed) what remains is the cost of its
  excess: being held back and released a slice at a time.

What the issue asks of them: the bystander's p99 when `flooded` within 10 %
of `limited`, and `on_idle` within 3 % of `off`. A p99 of one run moves by
more than 3 % from run to run on a shared VM, so `--cost PAIRS` also
measures what limits on but not reached cost where it is steady: the
broker's CPU per message in a fan-in QoS 1 (4 publishers, `seconds` long),
`off` and `on_idle` alternated PAIRS times on fresh brokers, medians. The report also sets
`flooded` against `within_rate` (the flooder's excess alone) and
`within_rate` against `limited` (the allowed traffic alone). The other
client reports what it managed to send, and the broker's log how often a
client was held back (`within_rate`: none, unless the machine stalls the
broker for about a second).

Each run is a separate worker process (fork) with a blocking raw socket, as
tools/bench/scenarios.py's latency scenario.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from . import brokers, mqtt
from .scenarios import RECV, Workers, _check, _cpu_wall, _usage, fan_in, percentiles

RATE = 1000  # rate_messages (PUBLISHes/s) in `limited`, `within_rate` and `flooded`: every client's
# The bystander's own pace, under RATE (else it is held back itself): one
# PUBLISH every 1/BYSTANDER_RATE s, each timed until its PUBACK.
BYSTANDER_RATE = 400
FLOOD_FACTOR = 10.0  # `flooded`: the other client's pace, x RATE
WITHIN_FACTOR = 0.9  # `within_rate`: the other client's pace, x RATE (never held back)
SLICE_S = 0.01  # the other client's pacing step
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
# (name, broker limits, the other client's pace x RATE: 0, none)
RUNS: tuple[tuple[str, dict[str, object], float], ...] = (
    ("off", NONE, 0.0),
    ("on_idle", ON_IDLE, 0.0),
    ("limited", LIMITED, 0.0),
    ("within_rate", LIMITED, WITHIN_FACTOR),
    ("flooded", LIMITED, FLOOD_FACTOR),
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


def publisher_worker(port: int, seconds: float, rate: int, tag: str) -> dict[str, Any]:
    """The other client: QoS 0 at `rate` a second, in SLICE_S slices."""
    cpu0, wall0 = _cpu_wall()
    sock = mqtt.open_client(port, f"other-{tag}")
    per_slice = max(1, int(rate * SLICE_S))
    packet = mqtt.publish(f"bench/other/{tag}", mqtt.payload(), 0) * per_slice
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
    return {"who": "other", "sent": sent, "span": time.monotonic() - start, **_usage(cpu0, wall0)}


def measure(port: int, seconds: float, other: float, tag: str) -> dict[str, Any]:
    """The bystander's figures, beside another client at `other` x RATE (0: alone)."""
    w = Workers()
    try:
        w.start(bystander_worker, port, seconds, tag)
        if other:
            w.start(publisher_worker, port, seconds + 1.0, round(RATE * other), tag)
        results = w.results(2 if other else 1, seconds + 120)
        _check(results)
    finally:
        w.close()
    by = {r["who"]: r for r in results}
    out: dict[str, Any] = {
        "puback_us": percentiles(by["bystander"]["samples"]),
        "count": len(by["bystander"]["samples"]),
    }
    if other:
        f = by["other"]
        out["other_sent_per_s"] = round(f["sent"] / f["span"])
    return out


def run(python: str | None, seconds: float, label: str) -> dict[str, Any]:
    """The five runs on one interpreter; their figures by run name."""
    figures: dict[str, Any] = {}
    with brokers.WorkDir() as work:
        for name, limits, other in RUNS:
            broker = brokers.Siskin(work.path, python, name=f"{label}-{name}", loop="asyncio", limits=limits)
            broker.start()
            try:
                figures[name] = measure(broker.port, seconds, other, name)
                figures[name]["held_logged"] = broker_log_count(broker.log_path, "over rate_messages")
            finally:
                broker.stop()
    return figures


def cost(python: str | None, seconds: float, pairs: int, label: str) -> dict[str, list[dict[str, Any]]]:
    """Fan-in QoS 1 on fresh brokers, `off` then `on_idle`, `pairs` times."""
    out: dict[str, list[dict[str, Any]]] = {"off": [], "on_idle": []}
    with brokers.WorkDir() as work:
        for i in range(pairs):
            for name, limits in (("off", NONE), ("on_idle", ON_IDLE)):
                label_i = f"{label}-cost-{name}-{i}"
                broker = brokers.Siskin(work.path, python, name=label_i, loop="asyncio", limits=limits)
                broker.start()
                try:
                    out[name].append(fan_in(broker.port, 1, duration=seconds, pid=broker.pid, tag=f"{name}{i}"))
                finally:
                    broker.stop()
    return out


def cost_report(label: str, runs: dict[str, list[dict[str, Any]]]) -> str:
    def median(name: str, key: str) -> float:
        values = sorted(float(r[key]) for r in runs[name])
        return values[len(values) // 2]

    lines = [f"### {label}: fan-in QoS 1, limits on but not reached vs off ({len(runs['off'])} alternated pairs)", ""]
    lines.append("| run | broker CPU per message (us), each run | median | msg/s, median |")
    lines.append("|---|---|---|---|")
    for name in ("off", "on_idle"):
        each = ", ".join(str(r["broker_us_per_msg"]) for r in runs[name])
        lines.append(f"| {name} | {each} | {median(name, 'broker_us_per_msg')} | {median(name, 'msg_per_s'):.0f} |")
    change = 100.0 * (median("on_idle", "broker_us_per_msg") / median("off", "broker_us_per_msg") - 1)
    lines.append("")
    lines.append(f"- on_idle vs off, broker CPU per message: {change:+.1f} % (goal: within 3 %)")
    return "\n".join(lines)


def broker_log_count(path: Path, text: str) -> int:
    try:
        return path.read_text(errors="replace").count(text)
    except FileNotFoundError:
        return 0


def report(label: str, figures: dict[str, Any]) -> str:
    def p99(name: str) -> float:
        return float(figures[name]["puback_us"]["p99"])

    def versus(a: str, b: str) -> str:
        return f"- {a} vs {b} p99: {100.0 * (p99(a) / p99(b) - 1):+.1f} %"

    lines = [
        f"### {label}",
        "",
        "| run | bystander PUBACK p50 / p90 / p99 (us) | samples | other client sent/s | held (log lines) |",
        "|---|---|---|---|---|",
    ]
    for name, _limits, _other in RUNS:
        f = figures[name]
        pc = f["puback_us"]
        lines.append(
            f"| {name} | {pc['p50']} / {pc['p90']} / {pc['p99']} | {f['count']} "
            f"| {f.get('other_sent_per_s', '-')} | {f['held_logged']} |"
        )
    lines.append("")
    lines.append(versus("flooded", "limited") + " (goal: within 10 %)")
    lines.append(versus("flooded", "within_rate") + " (the flooder's excess, apart from the traffic the limit allows)")
    lines.append(versus("within_rate", "limited") + f" (a neighbour at {WITHIN_FACTOR} x the limit: allowed traffic)")
    lines.append(versus("on_idle", "off") + " (goal: within 3 %)")
    return "\n".join(lines)


def main(seconds: float, pypy: bool, pairs: int = 0) -> int:
    from .__main__ import machine

    print(
        f"bench limits: {seconds} s per run, rate_messages {RATE}, flooder at {FLOOD_FACTOR} x, "
        f"neighbour within it at {WITHIN_FACTOR} x; {machine()}"
    )
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
        if pairs:
            print()
            print(cost_report(f"Siskin on {label}", cost(exe, seconds, pairs, label.lower())))
    return 0

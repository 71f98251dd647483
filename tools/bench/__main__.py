"""Siskin benchmarks side by side with Mosquitto and amqtt.

    python -m tools.bench                 quick comparison (make bench, < 3 min)
    python -m tools.bench --full          the full one (docs/benchmarks.md)
    python -m tools.bench run fanin --port 1883 --qos 1 --publishers 4
                                          one scenario against a running broker:
                                          one JSON line
    python -m tools.bench limits [--seconds 8] [--pypy] [--cost 5]
                                          a bystander's latency beside a client
                                          flooding at 10 x its rate limit, and
                                          limits on but not reached vs off
    python -m tools.bench rss [--pypy]    where a fresh broker's resident memory
                                          goes: interpreter, modules, warm-up

See docs/benchmarks.md for what each scenario measures and how.
"""

from __future__ import annotations

import argparse
import functools
import json
import platform
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import brokers, rss_parts, scenarios, scenarios_connect, scenarios_durable, scenarios_limits

NOFILE = 65536


def raise_nofile(want: int = NOFILE) -> int:
    """Raise RLIMIT_NOFILE for this process and its children (brokers, workers)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


# ------------------------------------------------------------------ profiles

PROFILES: dict[str, dict[str, Any]] = {
    "smoke": {
        "rounds": 1,
        "duration": 0.3,
        "fanout": [10, 100],
        "latency": 200,
        "idle": 100,
        "retained": 1000,
        "idle_wait": 1.0,
        "takeover": 1.0,
        "subsetup": 100,
    },
    "quick": {
        "rounds": 1,
        "duration": 1.5,
        "fanout": [10, 100, 1000],
        "latency": 2000,
        "idle": 1000,
        "retained": 10000,
        "idle_wait": 2.0,
        "takeover": 3.0,
        "subsetup": 1000,
    },
    "full": {
        "rounds": 3,
        "duration": 5.0,
        "fanout": [10, 100, 1000],
        "latency": 10000,
        "idle": 1000,
        "retained": 10000,
        "idle_wait": 2.0,
        "takeover": 10.0,
        "subsetup": 1000,
    },
}


def plan(p: dict[str, Any]) -> list[tuple[str, Callable[[int, int | None, str], dict[str, Any]]]]:
    """(name, run(port, pid, tag)) in the order they run against each broker.

    Idle connections first, on brokers that have served nothing yet (so RSS
    growth is not hidden by memory freed by earlier scenarios); retained last,
    since it leaves its topics in the broker.
    """
    d = p["duration"]
    w = p["idle_wait"]
    steps: list[tuple[str, Callable[[int, int | None, str], dict[str, Any]]]] = [
        ("idle", lambda port, pid, tag: scenarios.idle(port, p["idle"], pid=pid, tag=tag)),
        ("takeover", lambda port, pid, tag: scenarios_connect.takeover(port, duration=p["takeover"], pid=pid, tag=tag)),
        ("subsetup", lambda port, pid, tag: scenarios_connect.subsetup(port, p["subsetup"], pid=pid, tag=tag)),
    ]

    def fan_in(q: int) -> Callable[[int, int | None, str], dict[str, Any]]:
        return lambda port, pid, tag: scenarios.fan_in(port, q, duration=d, idle=w, pid=pid, tag=tag)

    def fan_out(n: int) -> Callable[[int, int | None, str], dict[str, Any]]:
        return lambda port, pid, tag: scenarios.fan_out(port, n, duration=d, idle=w, pid=pid, tag=tag)

    steps += [(f"fanin_qos{q}", fan_in(q)) for q in (0, 1, 2)]
    steps += [(f"fanout_{n}", fan_out(n)) for n in p["fanout"]]
    steps += scenarios_durable.steps(d, w)
    steps.append(("latency", lambda port, pid, tag: scenarios.latency(port, p["latency"], pid=pid, tag=tag)))
    steps.append(("retained", lambda port, pid, tag: scenarios.retained(port, p["retained"], pid=pid, tag=tag)))
    steps.append(
        ("retained_pub", lambda port, pid, tag: scenarios_durable.retained_publish(port, p["retained"], pid, tag))
    )
    return steps


# -------------------------------------------------------------------- figures

# Targets on Siskin/Mosquitto, per runtime (PyPy: every throughput
# >= 1.5, latency p50 <= 0.9, connect >= 1.0, set-up <= 1.0, takeover >= 1.0,
# RSS at start <= 100 MB with the nursery pinned; CPython: no figure below docs/benchmarks.md's,
# connect >= 0.7, set-up <= 1.5); a target ending in B or MB is on Siskin's
# own figure (docs/benchmarks.md says where each comes from).
def per_runtime(cpython: str, pypy: str) -> dict[str, str]:
    return {"CPython": cpython, "PyPy": pypy}


# (label, scenario, path in the result, unit, higher is better, target on Siskin/Mosquitto, on Siskin/amqtt)
Figure = tuple[str, str, tuple[str, ...], str, bool, "str | dict[str, str]", str]
FIGURES: list[Figure] = [
    ("fan-in QoS 0, 4→1", "fanin_qos0", ("msg_per_s",), "msg/s", True, per_runtime("≥ 1.67", "≥ 1.5"), "≥ 5"),
    ("fan-in QoS 0 loss", "fanin_qos0", ("loss",), "", False, "", ""),
    ("fan-in QoS 1, 4→1", "fanin_qos1", ("msg_per_s",), "msg/s", True, per_runtime("≥ 0.72", "≥ 1.5"), ""),
    ("fan-in QoS 2, 4→1", "fanin_qos2", ("msg_per_s",), "msg/s", True, per_runtime("≥ 0.84", "≥ 1.5"), ""),
    ("fan-out 1:10", "fanout_10", ("deliveries_per_s",), "deliveries/s", True, per_runtime("≥ 1.38", "≥ 1.5"), ""),
    ("fan-out 1:10 latency p50", "fanout_10", ("latency_us", "p50"), "µs", False, "", ""),
    ("fan-out 1:100", "fanout_100", ("deliveries_per_s",), "deliveries/s", True, per_runtime("≥ 2.58", "≥ 1.5"), "≥ 5"),
    ("fan-out 1:100 latency p50", "fanout_100", ("latency_us", "p50"), "µs", False, "", ""),
    ("fan-out 1:1000", "fanout_1000", ("deliveries_per_s",), "deliveries/s", True, per_runtime("≥ 4.65", "≥ 1.5"), ""),
    ("fan-out 1:1000 latency p50", "fanout_1000", ("latency_us", "p50"), "µs", False, "", ""),
    ("PUBLISH→PUBACK p50", "latency", ("puback_us", "p50"), "µs", False, per_runtime("≤ 1.23", "≤ 0.9"), ""),
    ("PUBLISH→PUBACK p90", "latency", ("puback_us", "p90"), "µs", False, "", ""),
    ("PUBLISH→PUBACK p99", "latency", ("puback_us", "p99"), "µs", False, "", ""),
    ("publish→delivery p50", "latency", ("roundtrip_us", "p50"), "µs", False, per_runtime("≤ 1.37", "≤ 0.9"), ""),
    ("publish→delivery p90", "latency", ("roundtrip_us", "p90"), "µs", False, "", ""),
    ("publish→delivery p99", "latency", ("roundtrip_us", "p99"), "µs", False, "", ""),
    ("broker RSS at start", "idle", ("rss_before",), "bytes", False, per_runtime("≤ 33 MB", "≤ 100 MB"), ""),
    ("broker RSS after the run", "end", ("rss_after",), "bytes", False, "", ""),
    ("idle RSS per connection", "idle", ("rss_per_conn",), "bytes", False, "≤ 4096 B", ""),
    ("connect rate", "idle", ("connect_per_s",), "conn/s", True, per_runtime("≥ 0.7", "≥ 1.0"), ""),
    ("takeover storm, connections handled", "takeover", ("handled",), "conn", True, per_runtime("≥ 0.5", "≥ 1.0"), ""),
    ("takeover storm CONNACK p50", "takeover", ("connack_us", "p50"), "µs", False, "", ""),
    ("takeover storm CONNACK p99", "takeover", ("connack_us", "p99"), "µs", False, "", ""),
    ("1,000 subscribers set up", "subsetup", ("setup_s",), "s", False, per_runtime("≤ 1.5", "≤ 1.0"), ""),
    ("retained replay, 10,000 topics", "retained", ("replay_s",), "s", False, per_runtime("≤ 1.17", "≤ 2"), ""),
    ("retained replay, the first message", "retained", ("first_s",), "s", False, "≤ 2.0", ""),
    ("retained publish, QoS 1, window 64", "retained_pub", ("msg_per_s",), "msg/s", True, "≥ 1.0", ""),
    ("retained publish, fsyncs per message", "retained_pub", ("fsyncs_per_msg",), "fsyncs", False, "", ""),
    *scenarios_durable.FIGURES,
]


def pick(res: dict[str, Any], path: tuple[str, ...]) -> float | None:
    v: Any = res
    for k in path:
        if not isinstance(v, dict) or k not in v:
            return None
        v = v[k]
    return float(v) if isinstance(v, (int, float)) else None


def fmt(v: float | None, unit: str) -> str:
    if v is None:
        return "—"
    if unit in ("s", "fsyncs"):
        return f"{v:.3f}"
    if unit == "" and v < 1:
        return f"{v * 100:.2f} %"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:.1f}"


def verdict(ratio: float | None, target: str, siskin: float | None) -> str:
    if not target or ratio is None:
        return ""
    op, _, num = target.partition(" ")
    if num.endswith("B"):  # an absolute target on Siskin's own figure
        if siskin is None:
            return ""
        limit = float(num.split()[0]) * (1e6 if num.endswith("MB") else 1)
        ok = siskin <= limit if op == "≤" else siskin >= limit
    else:
        limit = float(num)
        ok = ratio <= limit if op == "≤" else ratio >= limit
    return "met" if ok else "NOT met"


def table(medians: dict[str, dict[str, dict[str, Any]]], names: list[str], runtime: str = "CPython") -> str:
    """The markdown table: medians per broker, Siskin's ratios, the issue's targets on `runtime`.

    Every Siskin variant ("siskin": asyncio; "siskin-uvloop"; "siskin-pypy") gets its ratios
    to every peer; a target cell says met / NOT met for each variant.
    """
    ours = [n for n in names if n.startswith("siskin")]
    peers = [n for n in names if not n.startswith("siskin")]
    pairs = [(a, b) for a in ours for b in peers]
    head = ["figure", *names] + [f"{a}/{b}" for a, b in pairs] + ["target"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, scen, path, unit, _higher, t_mosq, t_amqtt in FIGURES:
        vals = {n: (pick(medians[n][scen], path) if scen in medians.get(n, {}) else None) for n in names}
        if all(v is None for v in vals.values()):
            continue
        row = [f"{label}" + (f" ({unit})" if unit else "")]
        row += [fmt(vals[n], unit) for n in names]
        ratios: dict[tuple[str, str], float | None] = {}
        for a, b in pairs:
            x, y = vals.get(a), vals.get(b)
            ratios[(a, b)] = round(x / y, 2) if x is not None and y else None
            row.append("—" if ratios[(a, b)] is None else f"{ratios[(a, b)]:.2f}")
        cells = []
        for peer, target in (("mosquitto", t_mosq if isinstance(t_mosq, str) else t_mosq[runtime]), ("amqtt", t_amqtt)):
            if not target:
                continue
            absolute = target.endswith("B")
            verdicts = []
            for a in ours:
                v = verdict(ratios.get((a, peer)) if not absolute else 1.0, target, vals.get(a))
                if v:
                    verdicts.append(f"{a} {v}")
            where = "" if absolute else f" x {peer}"
            cells.append(f"{target}{where}" + (f" ({', '.join(verdicts)})" if verdicts else ""))
        row.append("; ".join(cells))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def median_result(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-field medians of several results of one scenario (numbers and nested dicts)."""
    out: dict[str, Any] = dict(results[-1])
    for key, value in results[-1].items():
        if isinstance(value, bool) or key in ("gen_cpu",):
            continue
        if isinstance(value, (int, float)):
            nums = [r[key] for r in results if isinstance(r.get(key), (int, float))]
            out[key] = scenarios.median(nums)
        elif isinstance(value, dict) and all(isinstance(x, (int, float)) for x in value.values()):
            out[key] = {k: scenarios.median([r[key][k] for r in results if key in r]) for k in value}
    return out


def max_gen_cpu(res: dict[str, Any]) -> float:
    best = 0.0
    for v in (res.get("gen_cpu") or {}).values():
        for x in v if isinstance(v, list) else [v]:
            best = max(best, float(x))
    return best


# --------------------------------------------------------------------- driver


def compare(args: argparse.Namespace) -> int:
    kind = "smoke" if args.smoke else "full" if args.full else "quick"
    profile = dict(PROFILES[kind])
    if args.rounds:
        profile["rounds"] = args.rounds
    if args.duration:
        profile["duration"] = args.duration
    nofile = raise_nofile()
    wanted = args.brokers.split(",")
    pypy = args.pypy_python or brokers.pypy_python()
    classes: dict[str, Callable[[Path], brokers.BrokerProc]] = {
        "siskin": lambda wd: brokers.Siskin(wd, args.siskin_python, args.siskin_root, "siskin", "asyncio"),
        "siskin-uvloop": lambda wd: brokers.Siskin(wd, args.siskin_python, args.siskin_root, "siskin-uvloop", "uvloop"),
        "siskin-pypy": lambda wd: brokers.Siskin(wd, pypy, args.siskin_root, "siskin-pypy", "asyncio"),
        "mosquitto": brokers.Mosquitto,
        "amqtt": brokers.Amqtt,
        **scenarios_durable.broker_classes(args.siskin_python, args.siskin_root, pypy),
    }
    if args.before_root:  # A/B in one run: the same brokers from another checkout, alternating with these
        for n in ("siskin", "siskin-uvloop"):
            classes[n + "-before"] = functools.partial(
                brokers.Siskin, python=args.siskin_python, root=args.before_root, name=n + "-before",
                loop="uvloop" if n == "siskin-uvloop" else "asyncio",
            )  # fmt: skip
    for n in wanted:
        if n.startswith("siskin-pypy@"):  # siskin-pypy@16M: another PYPY_GC_NURSERY (@0: PyPy's own)
            classes[n] = functools.partial(brokers.Siskin, python=pypy, root=args.siskin_root, name=n, loop="asyncio",
                                           nursery=n.split("@", 1)[1])  # fmt: skip
    names = []
    for n in wanted:
        if n.startswith("mosquitto") and not brokers.Mosquitto.available():
            print(f"bench: {brokers.MOSQUITTO} not found (apt-get install mosquitto): skipping it", file=sys.stderr)
            continue
        if n.startswith("siskin-uvloop") and not brokers.has_uvloop(args.siskin_python or brokers.siskin_python()):
            print("bench: no uvloop in .venv (make setup installs it): skipping siskin-uvloop", file=sys.stderr)
            continue
        if n.startswith("siskin-pypy") and pypy is None:
            print("bench: no .venv-pypy (make bench makes it where pypy3 is installed): skipping " + n, file=sys.stderr)
            continue
        if n == "amqtt" and not brokers.Amqtt.available():
            print("bench: amqtt not found (make bench installs it into .venv-bench): skipping it", file=sys.stderr)
            continue
        names.append(n)
    steps = plan(profile)
    if args.only:
        keep = set(args.only.split(","))
        steps = [s for s in steps if s[0] in keep or s[0].split("_")[0] in keep]
    work = brokers.WorkDir()
    workdir = work.path
    versions: dict[str, str] = {}
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {n: {} for n in names}
    out = open(args.json, "a") if args.json else None
    started = time.monotonic()
    print(
        f"bench: {kind} run, {profile['rounds']} round(s), brokers {', '.join(names)}, "
        f"RLIMIT_NOFILE {nofile}, work dir {workdir}",
        file=sys.stderr,
    )
    try:
        for rnd in range(profile["rounds"]):
            procs: dict[str, brokers.BrokerProc] = {}
            try:
                for n in names:
                    procs[n] = classes[n](workdir).start()
                    versions.setdefault(n, procs[n].version())
                # Alternate brokers within each scenario, rotating who goes first.
                order = names[rnd % len(names) :] + names[: rnd % len(names)]
                for step, run in steps:
                    for n in order:
                        if not scenarios_durable.applies(step, n):
                            continue
                        b = procs[n]
                        tag = f"r{rnd}{n[0]}"
                        try:
                            res = run(b.port, b.pid, tag)
                        except Exception as e:
                            res = {"scenario": step, "error": f"{type(e).__name__}: {e}"}
                        res = {"broker": n, "round": rnd, **res}
                        line = json.dumps(res, separators=(",", ":"))
                        print(line, flush=True)
                        if out:
                            out.write(line + "\n")
                        if "error" not in res:
                            runs[n].setdefault(step, []).append(res)
                        else:
                            work.keep = True
                        if b.proc is not None and b.proc.poll() is not None:
                            print(f"bench: {n} died during {step}: {b.log_tail()}", file=sys.stderr)
                            work.keep = True
                            procs[n] = classes[n](workdir).start()
                for n in names if not args.only else []:  # what a whole round left the broker holding
                    if n not in scenarios_durable.STORED and procs[n].proc.poll() is None:  # type: ignore[union-attr]
                        res = {
                            "broker": n,
                            "round": rnd,
                            "scenario": "end",
                            "rss_after": scenarios.vmrss_bytes(procs[n].pid),
                        }
                        line = json.dumps(res, separators=(",", ":"))
                        print(line, flush=True)
                        if out:
                            out.write(line + "\n")
                        runs[n].setdefault("end", []).append(res)
            finally:
                for b in procs.values():
                    b.stop()
    except BaseException:
        work.keep = True
        raise
    finally:
        if out:
            out.close()
        work.close()
    medians = {n: {s: median_result(rs) for s, rs in runs[n].items()} for n in names}
    gen = max((max_gen_cpu(r) for n in names for rs in runs[n].values() for r in rs), default=0.0)
    print()
    print(f"## Siskin vs peers ({kind}, median of {profile['rounds']} round(s))")
    print()
    print(f"- date: {time.strftime('%Y-%m-%d %H:%M')}; machine: {machine()}")
    for n in names:
        print(f"- {n}: {versions.get(n, '?')}")
    print(f"- busiest load-generator process: {gen:.2f} CPU (1.00 = a full core)")
    print(f"- wall time: {time.monotonic() - started:.0f} s")
    print()
    # One table per runtime: the CPython variants, then PyPy's, each beside the peers.
    peers = [n for n in names if not n.startswith("siskin")]
    for runtime in ("CPython", "PyPy"):
        ours = [n for n in names if n.startswith("siskin") and ("pypy" in n) == (runtime == "PyPy")]
        if ours:
            print()
            print(f"### Siskin on {runtime}")
            print()
            print(table(medians, ours + peers, runtime))
    durable = scenarios_durable.report(medians, names)
    if durable:
        print()
        print(f"### Durable sessions (fsyncs: {scenarios_durable.strace_version()})")
        print()
        print(durable)
    return 0


def machine() -> str:
    model = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    import os

    return f"{model}, {os.cpu_count()} CPUs, Linux {platform.release()}, Python {platform.python_version()}"


# ------------------------------------------------------------------ one run


def run_one(args: argparse.Namespace) -> int:
    raise_nofile()
    pid = args.pid
    s = args.scenario
    res: dict[str, Any]
    if s == "fanin":
        res = scenarios.fan_in(args.port, args.qos, args.publishers, args.duration, args.batch, args.idle, pid)
    elif s == "fanout":
        res = scenarios.fan_out(args.port, args.subscribers, args.duration, args.batch, args.procs, args.idle, pid)
    elif s == "latency":
        res = scenarios.latency(args.port, args.count, pid)
    elif s == "idle":
        res = scenarios.idle(args.port, args.clients, args.procs, pid=pid)
    elif s == "retained_pub":
        res = scenarios.retained_publish(args.port, args.topics, pid=pid)
    elif s == "retained":
        res = scenarios.retained(args.port, args.topics, pid=pid)
    elif s == "takeover":
        res = scenarios_connect.takeover(args.port, args.takers, args.duration, pid)
    elif s == "subsetup":
        res = scenarios_connect.subsetup(args.port, args.clients, args.procs, pid=pid)
    else:  # pragma: no cover - argparse restricts the choices
        raise SystemExit(2)
    print(json.dumps(res, separators=(",", ":")))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m tools.bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--full", action="store_true", help="the full run: 3 rounds, 5 s per throughput scenario")
    p.add_argument("--smoke", action="store_true", help="one tiny round (tests/host/test_bench_smoke.py)")
    p.add_argument("--rounds", type=int, default=0, help="override the number of rounds")
    p.add_argument("--duration", type=float, default=0, help="override the publishing time per scenario (s)")
    p.add_argument(
        "--brokers",
        default="siskin,siskin-uvloop,siskin-pypy,mosquitto,amqtt,siskin-uvloop-store,mosquitto-persist",
        help="comma-separated (default: siskin,siskin-uvloop,siskin-pypy,mosquitto,amqtt,siskin-uvloop-store,"
        "mosquitto-persist; "
        "siskin runs with --event-loop asyncio, siskin-uvloop with --event-loop uvloop, the default of make run; "
        "siskin-pypy on PyPy (make's .venv-pypy; asyncio's loop; its GC nursery pinned by Siskin), "
        "siskin-pypy@SIZE with PYPY_GC_NURSERY=SIZE (siskin-pypy@0: PyPy's own size, from /proc/cpuinfo); "
        "siskin-store, siskin-uvloop-store, siskin-pypy-store and mosquitto-persist run with persistence on, "
        "the durable scenarios only: "
        "tools/bench/scenarios_durable.py)",
    )
    p.add_argument(
        "--only", default="", help="comma-separated scenarios (idle,fanin,fanout,latency,retained,durable, ...)"
    )
    p.add_argument("--json", metavar="FILE", help="also append every result line to FILE")
    p.add_argument("--siskin-python", metavar="EXE", help="interpreter for Siskin (default .venv/bin/python)")
    p.add_argument("--pypy-python", metavar="EXE", help="interpreter for siskin-pypy (default .venv-pypy/bin/python)")
    p.add_argument("--siskin-root", metavar="DIR", help="run Siskin from another checkout (A/B comparisons)")
    p.add_argument(
        "--before-root",
        metavar="DIR",
        help="also offer brokers siskin-before and siskin-uvloop-before: Siskin from the checkout DIR, so that "
        "before and after run in one sitting, alternating within each scenario (--brokers siskin,siskin-before)",
    )
    sub = p.add_subparsers(dest="cmd")
    r = sub.add_parser("run", help="one scenario against a running broker; prints one JSON line")
    r.add_argument(
        "scenario", choices=["fanin", "fanout", "latency", "idle", "retained", "retained_pub", "takeover", "subsetup"]
    )
    r.add_argument("--port", type=int, required=True)
    r.add_argument("--pid", type=int, default=None, help="broker pid, for its CPU and RSS (idle needs it for RSS)")
    r.add_argument("--qos", type=int, default=0, choices=[0, 1, 2], help="fanin: QoS of publishes and subscription")
    r.add_argument("--publishers", type=int, default=4, help="fanin: publishing clients (one process each)")
    r.add_argument("--subscribers", type=int, default=100, help="fanout: subscribing clients")
    r.add_argument("--procs", type=int, default=2, help="fanout/idle: client processes")
    r.add_argument("--duration", type=float, default=3.0, help="fanin/fanout: seconds of publishing")
    r.add_argument("--batch", type=int, default=0, help="fanin/fanout: messages per flow-control batch")
    r.add_argument("--idle", type=float, default=2.0, help="fanin/fanout: s of silence that ends the wait")
    r.add_argument("--count", type=int, default=2000, help="latency: sequential messages per measure")
    r.add_argument("--clients", type=int, default=1000, help="idle/subsetup: connections")
    r.add_argument("--takers", type=int, default=8, help="takeover: processes sharing one client id")
    r.add_argument("--topics", type=int, default=10000, help="retained: retained topics")
    lim = sub.add_parser("limits", help="rate limits: a bystander beside a flooder; on-not-reached vs off")
    lim.add_argument("--seconds", type=float, default=8.0, help="seconds each of the five runs measures")
    lim.add_argument("--pypy", action="store_true", help="also on PyPy (.venv-pypy)")
    lim.add_argument(
        "--cost",
        type=int,
        default=0,
        metavar="PAIRS",
        help="also the broker's CPU per message in a fan-in QoS 1, limits off and on but not reached, "
        "alternated PAIRS times on fresh brokers (medians)",
    )
    rss = sub.add_parser("rss", help="where a fresh broker's resident memory goes (tools/bench/rss_parts.py)")
    rss.add_argument("--pypy", action="store_true", help="also on PyPy (.venv-pypy)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.cmd == "run":
        return run_one(args)
    if args.cmd == "limits":
        return scenarios_limits.main(args.seconds, args.pypy, args.cost)
    if args.cmd == "rss":
        return rss_parts.main(args.pypy, machine())
    return compare(args)


if __name__ == "__main__":
    sys.exit(main())

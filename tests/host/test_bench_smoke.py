"""The benchmark tool works: one tiny round of every scenario (tools/bench).

Runs `python -m tools.bench --smoke` against Siskin (this interpreter) and,
where it is installed, Mosquitto; amqtt is only for `make bench` (it lives in
.venv-bench), never here. Checks that each scenario printed one well-formed
JSON line and that its figures are plausible: messages were delivered, QoS 1
and 2 lost nothing, percentiles are ordered, the table was printed. It never
asserts a speed: speed is what `make bench` reports, side by side.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import REPO_ROOT, require
from tests.host.conftest import pypy_python
from tools.bench import brokers, scenarios_durable, scenarios_limits

SCENARIOS = {
    "idle",
    "fanin_qos0",
    "fanin_qos1",
    "fanin_qos2",
    "fanout_10",
    "fanout_100",
    "latency",
    "retained",
    "retained_pub",
    "end",
    "durable_v3_qos1",
    "durable_v3_qos2",
    "durable_v5_qos1",
    "durable_v5_qos2",
    "takeover",
    "subsetup",
}


def run_smoke(names: list[str], json_path: Path, only: str = "", *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "tools.bench",
            "--smoke",
            "--brokers",
            ",".join(names),
            "--siskin-python",
            sys.executable,
            "--json",
            str(json_path),
            *(["--only", only] if only else []),
            *extra,
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


def check_result(r: dict[str, Any]) -> None:
    name = f"{r['broker']} {r['scenario']}"
    assert "error" not in r, f"{name}: {r['error']}"
    s = r["scenario"]
    if s.startswith(("fanin", "durable")):
        assert r["sent"] > 0 and r["delivered"] > 0, name
        assert r["msg_per_s"] > 0, name
        if r["qos"]:
            assert r["delivered"] == r["sent"] and r["loss"] == 0, f"{name}: QoS {r['qos']} lost messages: {r}"
        assert 0 <= r["loss"] <= 1, name
    elif s.startswith("fanout"):
        assert r["sent"] > 0 and r["delivered"] > 0, name
        assert r["deliveries_per_s"] > 0 and r["ragged"] == 0, name
        lat = r["latency_us"]
        assert r["latency_samples"] > 0 and 0 < lat["p50"] <= lat["p90"] <= lat["p99"], name
    elif s == "latency":
        for key in ("puback_us", "roundtrip_us"):
            p = r[key]
            assert 0 < p["p50"] <= p["p90"] <= p["p99"], f"{name} {key}: {p}"
    elif s == "idle":
        assert r["clients"] == 100, name
        assert r["connect_per_s"] > 0, name
        assert r["rss_after"] > 0 and isinstance(r["rss_per_conn"], int), name
    elif s == "retained":
        assert r["received"] == r["topics"] == 1000, name
        assert r["replay_s"] is not None and r["replay_s"] > 0, name
        assert 0 < r["first_s"] <= r["replay_s"], name
    elif s == "retained_pub":
        assert r["count"] == 1000 and r["msg_per_s"] > 0, name
    elif s == "end":
        assert r["rss_after"] > 0, name
        return  # (no load generator)
    elif s == "takeover":
        # Every connection got its CONNACK; each worker but the last holder was thrown out.
        assert r["handled"] > r["clients"] == 8 and r["held"] <= 1, name
        lat = r["connack_us"]
        assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"], f"{name}: {lat}"
    elif s == "subsetup":
        assert r["subscribers"] == 100 and r["setup_s"] > 0, name
    cpu = r["gen_cpu"]
    assert cpu and all(isinstance(v, (int, float, list)) for v in cpu.values()), name


def test_bench_smoke(tmp_path: Path) -> None:
    names = ["siskin"]
    if brokers.Mosquitto.available():
        names.append("mosquitto")
    else:
        require("mosquitto", False, "apt-get install mosquitto")
    out = tmp_path / "bench.jsonl"
    proc = run_smoke(names, out)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    results = [json.loads(line) for line in lines]
    assert results == [json.loads(line) for line in out.read_text().splitlines()]
    for broker in names:
        seen = {r["scenario"] for r in results if r["broker"] == broker}
        assert seen == SCENARIOS, f"{broker}: scenarios {sorted(seen)}"
    for r in results:
        check_result(r)
    assert "| figure |" in proc.stdout, proc.stdout[-2000:]
    if "mosquitto" in names:
        assert "siskin/mosquitto" in proc.stdout
    # A run that went well leaves no work dir behind (a make test ran this
    # in every run, and each left 1 MB in /tmp).
    workdir = re.search(r"work dir (\S+)", proc.stderr)
    assert workdir and not Path(workdir.group(1)).exists(), proc.stderr[-2000:]


def test_bench_smoke_durable(tmp_path: Path) -> None:
    """Persistent subscribers against Siskin with its store (store_sync = always)
    and Mosquitto with persistence: nothing lost, fsyncs counted, the durable table."""
    names = ["siskin-store"]
    if brokers.Mosquitto.available():
        names.append("mosquitto-persist")
    out = tmp_path / "bench.jsonl"
    proc = run_smoke(names, out, "durable_v3_qos1,durable_v5_qos2")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert sorted((r["broker"], r["scenario"]) for r in results) == sorted(
        (n, s) for n in names for s in ("durable_v3_qos1", "durable_v5_qos2")
    )
    for r in results:
        check_result(r)
        assert r["protocol"] == (4 if r["scenario"].startswith("durable_v3") else 5)
        if scenarios_durable.STRACE is not None and r["broker"] == "siskin-store":
            # store_sync = always: at least one fsync per sync, at most one per message and record
            assert 0 < r["fsyncs_per_msg"] <= 5, r
    assert "### Durable sessions" in proc.stdout and "| durable_v3_qos1 | siskin-store |" in proc.stdout, proc.stdout[-2000:]


def test_bench_smoke_pypy(tmp_path: Path) -> None:
    """The siskin-pypy column: Siskin on PyPy, in a table of its own, with its RSS at start."""
    out = tmp_path / "bench.jsonl"
    proc = run_smoke(["siskin-pypy"], out, "idle,fanin_qos1", "--pypy-python", pypy_python())
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert sorted((r["broker"], r["scenario"]) for r in results) == [("siskin-pypy", "fanin_qos1"), ("siskin-pypy", "idle")]
    for r in results:
        check_result(r)
    assert "- siskin-pypy: siskin " in proc.stdout and "(PyPy 3." in proc.stdout, proc.stdout[-2000:]
    assert "### Siskin on PyPy" in proc.stdout and "### Siskin on CPython" not in proc.stdout, proc.stdout[-2000:]
    rss = next(r for r in results if r["scenario"] == "idle")["rss_before"]
    assert rss > 0 and f"| broker RSS at start (bytes) | {rss:,} |" in proc.stdout, proc.stdout[-2000:]


def test_bench_limits_smoke() -> None:
    # `python -m tools.bench limits` (tools/bench/scenarios_limits.py), a
    # fraction of a second per run: each of its runs has a row with ordered
    # percentiles, the two with another client what it sent, and the
    # report sets flooded against limited and within_rate; `--cost 1` one
    # fan-in pair, off and on_idle, with the broker's CPU per message.
    proc = subprocess.run(
        [sys.executable, "-m", "tools.bench", "limits", "--seconds", "0.3", "--cost", "1"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    rows = {}
    for line in proc.stdout.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 5 and cells[0] in {name for name, _limits, _other in scenarios_limits.RUNS}:
            rows[cells[0]] = cells
    assert sorted(rows) == sorted(name for name, _limits, _other in scenarios_limits.RUNS), proc.stdout
    for name, _limits, other in scenarios_limits.RUNS:
        p50, p90, p99 = (float(x) for x in rows[name][1].split(" / "))
        assert 0 < p50 <= p90 <= p99, rows[name]
        assert int(rows[name][2]) > 0, rows[name]
        assert (rows[name][3] != "-") == bool(other), rows[name]
    for pair in ("flooded vs limited", "flooded vs within_rate", "within_rate vs limited", "on_idle vs off"):
        assert f"- {pair} p99: " in proc.stdout, proc.stdout
    for name in ("off", "on_idle"):
        row = next(line for line in proc.stdout.splitlines() if line.startswith(f"| {name} | ") and line.count("|") == 5)
        each = [float(x) for x in row.split("|")[2].split(",")]
        assert len(each) == 1 and each[0] > 0, row
    assert "- on_idle vs off, broker CPU per message: " in proc.stdout, proc.stdout


def test_bench_rss_smoke() -> None:
    # `python -m tools.bench rss` (tools/bench/rss_parts.py) on this
    # interpreter: its six steps each with a figure, the module counts read
    # from a started broker, the started broker's mappings with the
    # interpreter's own library among them.
    proc = subprocess.run(
        [sys.executable, "-m", "tools.bench", "rss"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    steps = re.findall(r"^\| ([^|]+) \| ([0-9.]+) \|[^|]*\|$", proc.stdout, re.M)
    assert len(steps) == 6 and all(float(mb) > 0 for _name, mb in steps), proc.stdout
    counts = re.search(r"other (\d+) standard-library modules.*Siskin's (\d+) modules", proc.stdout, re.S)
    assert counts and int(counts.group(1)) > 0 and int(counts.group(2)) > 0, proc.stdout
    assert re.search(r"^\| the interpreter's library \(libpython[^|]*\| [0-9.]+ \|$", proc.stdout, re.M), proc.stdout
    assert re.search(r"^\| all \| [0-9.]+ \|$", proc.stdout, re.M), proc.stdout


def test_a_work_dir_is_kept_only_when_a_run_went_wrong(capsys: Any) -> None:
    with brokers.WorkDir() as good:
        (good.path / "siskin.log").write_text("fine")
    assert not good.path.exists()
    with brokers.WorkDir() as failed:
        failed.keep = True  # a scenario's error, a broker that died
    assert failed.path.exists() and f"kept in {failed.path}" in capsys.readouterr().err
    try:
        with brokers.WorkDir() as cut:
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        pass
    assert cut.path.exists() and f"kept in {cut.path}" in capsys.readouterr().err
    for work in (failed, cut):
        shutil.rmtree(work.path)


def test_free_port_never_hands_out_a_recent_port_twice(monkeypatch: Any) -> None:
    # The kernel may give back a port it just gave: a NATS node once got the
    # same port for its HTTP monitor and its cluster routes, and failed to bind
    # the second (a make test-repeat run, 13 set-up errors).
    given = iter([40001, 40002, 40001, 40002, 40003])

    class KernelSocket:
        def __enter__(self) -> KernelSocket:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def bind(self, address: tuple[str, int]) -> None:
            self.port = next(given)

        def getsockname(self) -> tuple[str, int]:
            return ("127.0.0.1", self.port)

    monkeypatch.setattr(brokers, "_RECENT_PORTS", [])
    monkeypatch.setattr(brokers.socket, "socket", KernelSocket)
    assert [brokers.free_port() for _ in range(3)] == [40001, 40002, 40003]

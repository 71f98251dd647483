"""Where a fresh broker's resident memory goes (`python -m tools.bench rss`).

The bench's "broker RSS at start" is one figure; this splits it, each step
a fresh process of the same interpreter (VmRSS after a gc.collect()):

1. the interpreter alone;
2. + asyncio;
3. + every other standard-library module a started broker has loaded;
4. + Siskin's own modules a started broker has loaded;
5. a broker started with the bench's settings and `warm_up = false`;
6. the same with `warm_up = true`, the default (on PyPy: the JIT warm-ups
   of cpython_host/runtime/warmup.py; on CPython they do nothing);

and the last broker's memory by kind of mapping (/proc/PID/smaps): the
interpreter's own shared library (its code, and on PyPy its prebuilt
heap), anonymous memory (the object heap: arenas, PyPy's GC nursery,
large objects), malloc's heap, JIT machine code, the other shared
libraries. Which modules a started broker has loaded is read from one
started apart, with a thread that writes sys.modules once it listens.
Each broker runs on the bench's event loop for its interpreter (uvloop
where installed, as siskin-uvloop; PyPy: asyncio).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from cpython_host.runtime.pypy_heap import PINNED_NURSERY

from . import brokers, scenarios

# Steps 1-4 in one process, each on top of the last. (Its own VmRSS
# reader, not scenarios.vmrss_bytes: importing the bench would add to what
# it measures.)
IMPORTS = """
import gc, importlib, json, sys
def rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
mods = json.loads(open(sys.argv[1]).read())
out = {}
gc.collect(); out["interpreter"] = rss()
import asyncio
gc.collect(); out["asyncio"] = rss()
for name in mods["stdlib"]:
    try:
        importlib.import_module(name)
    except Exception:
        pass  # (one the broker's own order made importable: rare)
gc.collect(); out["stdlib"] = rss()
for name in mods["siskin"]:
    importlib.import_module(name)
gc.collect(); out["siskin"] = rss()
print(json.dumps(out))
"""

# A broker (python -m cpython_host ARGS) that writes its sys.modules to DUMP once it listens on PORT.
LOADED = """
import json, os, runpy, socket, sys, threading, time
sys.path.insert(0, os.getcwd())
port, dump = int(sys.argv[1]), sys.argv[2]
def watch():
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            break
        except OSError:
            time.sleep(0.05)
    with open(dump + ".part", "w") as f:
        json.dump(sorted(sys.modules), f)
    os.rename(dump + ".part", dump)
threading.Thread(target=watch, daemon=True).start()
sys.argv = ["cpython_host", *sys.argv[3:]]
runpy.run_module("cpython_host", run_name="__main__", alter_sys=True)
"""


class _Loaded(brokers.Siskin):
    def __init__(self, workdir: Path, python: str | None) -> None:
        super().__init__(workdir, python, name="rss-modules")
        self.dump = workdir / "modules.json"
        # Set, so that the `siskin` command does not exec itself again (without this script).
        self.env["PYPY_GC_NURSERY"] = PINNED_NURSERY

    def command(self) -> list[str]:
        return [self.python, "-c", LOADED, str(self.port), str(self.dump), *super().command()[3:]]


def _started(workdir: Path, python: str | None, warm_up: bool) -> brokers.Siskin:
    broker = brokers.Siskin(workdir, python, name=f"rss-warm-{str(warm_up).lower()}")
    with broker.config.open("a") as f:
        f.write(f"warm_up = {str(warm_up).lower()}\n")  # (the config's last table is [server])
    broker.start(120)
    return broker


ANONYMOUS = "anonymous (the object heap: arenas, PyPy's nursery, large objects)"


def mappings(pid: int) -> Counter[str]:
    """Resident bytes of process `pid` by kind of mapping."""
    kinds: Counter[str] = Counter()
    kind = "?"
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            parts = line.split()
            if parts[0].endswith(":"):
                if parts[0] == "Rss:":
                    kinds[kind] += int(parts[1]) * 1024
                continue
            path = parts[5] if len(parts) > 5 else ""
            name = path.rsplit("/", 1)[-1]
            if ".so" in name:
                own = name.startswith(("libpypy", "libpython"))
                kind = f"the interpreter's library ({name})" if own else "other shared libraries"
            elif path == "[heap]":
                kind = "malloc's heap"
            elif path:
                kind = "other files and [stack], [vdso]"
            else:
                kind = "anonymous, executable (JIT code)" if "x" in parts[1] else ANONYMOUS
    return kinds


def measure(python: str | None) -> dict[str, Any]:
    """The six steps' VmRSS (bytes) and the warm broker's mappings."""
    with brokers.WorkDir() as work:
        loaded = _Loaded(work.path, python)
        loaded.start(120)
        try:
            deadline = time.monotonic() + 60  # (its thread writes once it has connected too: at once)
            while not loaded.dump.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            names = json.loads(loaded.dump.read_text()) if loaded.dump.exists() else None
        finally:
            loaded.stop()
        if names is None:
            raise RuntimeError(f"the started broker did not write its modules: {loaded.log_tail()}")
        ours = [n for n in names if n.split(".")[0] in ("common", "cpython_host")]
        stdlib = [n for n in names if n not in ours and n != "__main__"]
        mods = work.path / "mods.json"
        mods.write_text(json.dumps({"stdlib": stdlib, "siskin": ours}))
        proc = subprocess.run(
            [loaded.python, "-c", IMPORTS, str(mods)],
            cwd=brokers.REPO_ROOT,
            env={**os.environ, "PYPY_GC_NURSERY": PINNED_NURSERY},
            capture_output=True,
            text=True,
            timeout=120,
        )
        if proc.returncode:
            raise RuntimeError(proc.stderr[-2000:])
        steps: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
        steps["modules"] = {"stdlib": len(stdlib), "siskin": len(ours)}
        for warm in (False, True):
            broker = _started(work.path, python, warm)
            try:
                steps[f"warm_up_{str(warm).lower()}"] = scenarios.vmrss_bytes(broker.pid)
                if warm:
                    steps["mappings"] = dict(mappings(broker.pid))
            finally:
                broker.stop()
    return steps


def report(label: str, s: dict[str, Any]) -> str:
    mb = 1 << 20
    rows = [
        ("the interpreter alone", s["interpreter"]),
        ("+ asyncio", s["asyncio"]),
        (f"+ the other {s['modules']['stdlib']} standard-library modules a started broker has", s["stdlib"]),
        (f"+ Siskin's {s['modules']['siskin']} modules a started broker has", s["siskin"]),
        ("a started broker, warm_up = false", s["warm_up_false"]),
        ("a started broker, warm_up = true (the default)", s["warm_up_true"]),
    ]
    lines = [f"### {label}: resident memory of a fresh broker, step by step", "", "| step | VmRSS (MB) | added (MB) |"]
    lines.append("|---|---|---|")
    last = 0
    for name, value in rows:
        lines.append(f"| {name} | {value / mb:.1f} | {(value - last) / mb:+.1f} |" if last else f"| {name} | {value / mb:.1f} | |")
        last = value
    lines += ["", "The started broker (warm_up = true) by kind of mapping:", "", "| mapping | resident (MB) |", "|---|---|"]
    total = 0
    for kind, value in sorted(s["mappings"].items(), key=lambda kv: -kv[1]):
        lines.append(f"| {kind} | {value / mb:.1f} |")
        total += value
    lines.append(f"| all | {total / mb:.1f} |")
    return "\n".join(lines)


def main(pypy: bool, machine: str) -> int:
    print(f"- machine: {machine}; {time.strftime('%Y-%m-%d %H:%M')}")
    print()
    print(report("CPython", measure(None)))
    if pypy:
        python = brokers.pypy_python()
        if python is None:
            print("bench: no .venv-pypy (make bench makes it where pypy3 is installed)", file=sys.stderr)
            return 1
        print()
        print(report("PyPy (nursery pinned)", measure(python)))
    return 0

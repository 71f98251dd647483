"""The host on PyPy (Python 3.9, Debian's pypy3) from the same tree as on CPython.

Every module of common/, cpython_host/ and tools/ imports under make's PyPy
venv: this is what fails when new code uses a 3.10+ feature the interpreter
evaluates at import (an `X | Y` annotation without `from __future__ import
annotations`, tomllib, a 3.11 name imported from the standard library) —
ruff's py39 target catches the syntax, mypy's 3.10 target the 3.11 names,
python39_hazards() the run-time uses an import does not reach.
The integration tests that use the broker_runtime fixture or RUNTIMES
(tests/host/conftest.py) run the real broker on PyPy for the rest.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from cpython_host.runtime.pypy_heap import NURSERY_VARIABLE, PINNED_NURSERY
from tests.conftest import REPO_ROOT
from tests.host.broker_proc import BrokerProcess, connect_when_served, wait_until
from tests.host.conftest import pypy_python
from tools import procgroup

# MicroPython scripts among them (they import what only MicroPython has).
MICROPYTHON_ONLY = {"tools.bench.upy_heap"}

IMPORT_ALL = """
import importlib, json, pathlib, sys, traceback
failed = {}
names = []
for root in ("common", "cpython_host", "tools"):
    for path in sorted(pathlib.Path(root).rglob("*.py")):
        if "node_modules" in path.parts:
            continue
        parts = path.with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if name in sys.argv[1:]:
            continue
        names.append(name)
        try:
            importlib.import_module(name)
        except BaseException:
            failed[name] = traceback.format_exc(limit=-3)
print(json.dumps({"implementation": sys.implementation.name, "imported": names, "failed": failed}))
"""


def test_every_host_module_imports_on_pypy() -> None:
    report = _pypy_json(IMPORT_ALL, *sorted(MICROPYTHON_ONLY), timeout=240)
    assert report["implementation"] == "pypy"
    assert report["failed"] == {}, "\n".join(f"{n}:\n{tb}" for n, tb in report["failed"].items())
    # It did walk the tree: the modules the broker runs are among them.
    assert {"cpython_host.server", "common.broker.broker", "common.driver", "tools.bench.brokers"} <= set(
        report["imported"]
    )


def test_on_pypy_the_broker_says_it_runs_on_asyncio_and_why(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path, log_level="info", python=pypy_python()) as b:
        b.wait_log(r"event loop: asyncio's own: uvloop does not run on PyPy")
        b.wait_log(r"listening on .*event loop: asyncio")
    demanded = subprocess.run(
        [pypy_python(), "-m", "cpython_host", "--port", "0", "--event-loop", "uvloop"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert demanded.returncode == 2
    assert "uvloop does not run on PyPy; or use --event-loop asyncio" in demanded.stderr


def test_on_pypy_the_jit_is_warmed_up_before_the_listeners_open(tmp_path: Path) -> None:
    # ([server] warm_up is on by default; the test brokers turn it off unless asked.)
    with BrokerProcess(tmp_path / "pypy", log_level="info", server={"warm_up": True}, python=pypy_python()) as b:
        log = b.log_text()
        warmed = re.search(r"JIT warmed up: (\d+) in-memory connections through the core in [0-9.]+ s", log)
        assert warmed is not None and int(warmed.group(1)) > 0, log
        assert warmed.start() < log.index("listening on")
        # Then the shell's socket code, through a loopback hub of its own
        # (takeovers: accept, read, write, half-close, close, the loss).
        sockets = re.search(r"JIT warmed up: (\d+) takeovers through a loopback epoll hub in [0-9.]+ s", log)
        assert sockets is not None and int(sockets.group(1)) > 0, log
        assert warmed.start() < sockets.start() < log.index("listening on")
        assert "warm-takeover" not in log  # its clients are not the broker's: not one core line
        served_after = connect_when_served(b.port, "after-warm-up")
        served_after.close()
    with BrokerProcess(tmp_path / "cpython", log_level="info", server={"warm_up": True}) as b:
        assert "JIT warmed up" not in b.log_text()  # nothing to compile on CPython


# The `siskin` entry point as pip writes it (a script, not `-m cpython_host`).
SISKIN_SCRIPT = """import sys
from cpython_host.__main__ import main
sys.exit(main())
"""


def _nursery_of_a_started_broker(tmp_path: Path, nursery: str | None, script: bool = False) -> tuple[str, str, str]:
    """Start the broker on PyPy (PYPY_GC_NURSERY=`nursery`, None: unset) until it
    logs its nursery; (the log's line, PYPY_GC_NURSERY in the environment of the
    process that was started, its command line)."""
    env = {k: v for k, v in os.environ.items() if k != NURSERY_VARIABLE}
    if nursery is not None:
        env[NURSERY_VARIABLE] = nursery
    how = ["-m", "cpython_host"]
    if script:
        (tmp_path / "siskin").write_text(SISKIN_SCRIPT)
        how = [str(tmp_path / "siskin")]
        env["PYTHONPATH"] = str(REPO_ROOT)
    log_path = tmp_path / "broker.log"
    cmd = [pypy_python(), *how, "--port", "0", "--log-level", "info", "--config", os.devnull]
    with log_path.open("wb") as logf:
        proc = procgroup.spawn(cmd, cwd=REPO_ROOT, stdout=logf, stderr=subprocess.STDOUT, env=env)

    def logged() -> re.Match[str] | None:
        assert proc.poll() is None, log_path.read_text()
        return re.search(r"PyPy GC nursery: .*", log_path.read_text())

    try:
        line = wait_until(logged, 60, lambda: log_path.read_text()).group(0)
        # The pid that was started is the broker's (an exec, not a child).
        with open(f"/proc/{proc.pid}/environ", "rb") as f:
            environ = dict(item.partition(b"=")[::2] for item in f.read().split(b"\0") if item)
        with open(f"/proc/{proc.pid}/cmdline", "rb") as f:
            cmdline = f.read().replace(b"\0", b" ").decode()
    finally:
        procgroup.kill(proc)
    return line, environ.get(NURSERY_VARIABLE.encode(), b"unset").decode(), cmdline


def test_on_pypy_the_broker_runs_with_a_pinned_gc_nursery(tmp_path: Path) -> None:
    # Unset: the command execs itself again with the pin, before it serves;
    # the GC then reports that nursery (not half the CPU's cache size).
    line, environ, cmdline = _nursery_of_a_started_broker(tmp_path, None)
    assert environ == PINNED_NURSERY == "4M"
    assert line.startswith("PyPy GC nursery: 4096 KB (PYPY_GC_NURSERY=4M;"), line
    assert " -m cpython_host --port 0 " in cmdline  # started again the way it was started
    # The same from the `siskin` script.
    line, environ, cmdline = _nursery_of_a_started_broker(tmp_path, None, script=True)
    assert (environ, line.split(" (")[0]) == ("4M", "PyPy GC nursery: 4096 KB"), line
    assert f"{tmp_path / 'siskin'} --port 0 " in cmdline


def test_on_pypy_a_nursery_set_by_the_user_is_kept(tmp_path: Path) -> None:
    line, environ, _ = _nursery_of_a_started_broker(tmp_path, "1M")
    assert environ == "1M"
    assert line.startswith("PyPy GC nursery: 1024 KB (PYPY_GC_NURSERY=1M;"), line
    line, environ, _ = _nursery_of_a_started_broker(tmp_path, "2048k")
    assert line.startswith("PyPy GC nursery: 2048 KB (PYPY_GC_NURSERY=2048k;"), line


def test_on_cpython_nothing_is_pinned() -> None:
    env = {k: v for k, v in os.environ.items() if k != NURSERY_VARIABLE}
    proc = subprocess.run(
        [sys.executable, "-c", "from cpython_host.runtime import pypy_heap as h; h.pin_nursery([]); print(h.nursery_bytes())"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.stdout.split() == ["None"], proc.stderr


def test_on_pypy_with_rate_limits_the_warm_up_floods_them_and_leaves_the_real_buckets_full(tmp_path: Path) -> None:
    # In memory and then over loopback sockets (the release through the
    # server's timer, the hub's pause and resume), on brokers of its own.
    limits = {"rate_messages": 1000, "rate_grace": 0}
    with BrokerProcess(tmp_path, limits=limits, log_level="info", server={"warm_up": True}, python=pypy_python()) as b:
        log = b.log_text()
        memory = re.search(r"(\d+) releases of clients held back for their rate limits", log)
        sockets = re.search(r"(\d+) PUBACKs beside clients over their rate limits", log)
        assert memory is not None and int(memory.group(1)) > 100, log
        assert sockets is not None and int(sockets.group(1)) > 0, log
        # None of its holds is the real broker's: not logged, not counted,
        # and a real client's bucket starts full (a second's worth passes).
        c = connect_when_served(b.port, "after-the-flood")
        topic = b"t/flood"
        for pid in range(1, 501):
            body = len(topic).to_bytes(2, "big") + topic + pid.to_bytes(2, "big") + b"x"
            c.send(bytes([0x32, len(body)]) + body)
        acks = [c.read_packet() for _ in range(500)]
        assert all(a is not None and a[0] == 0x40 for a in acks)
        c.close()
        log = b.log_text()
        assert "over rate_messages" not in log and "warm-flood" not in log, log


WARM_UP = """
import gc, json, logging, sys, weakref
from cpython_host.config import load_config
from cpython_host.runtime.run import make_driver
from cpython_host.server import ticks_ms
from cpython_host.runtime.warmup import warm_up
import common.broker.replay as replay

replayed = [0]  # retained messages a SUBSCRIBE's replay sent
deliver = replay.deliver
def counting(*args):
    replayed[0] += 1
    return deliver(*args)
replay.deliver = counting
import common.broker.rate_hold as rate_hold
holds = [0]  # clients held back for their rate limits
hold = rate_hold.hold
def counting_hold(*args):
    holds[0] += 1
    return hold(*args)
rate_hold.hold = counting_hold

class Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines = []
    def emit(self, record):
        self.lines.append(record.getMessage())

lines = Lines()
logging.getLogger().addHandler(lines)
logging.getLogger().setLevel(logging.DEBUG)
cfg = load_config(sys.argv[1] if len(sys.argv) > 1 else None)
made = []
kept = []  # (with an argument "keep": the driver, to count what it left open)
def make(broker):
    driver = make_driver(cfg, broker)
    made.append((weakref.ref(broker), weakref.ref(driver), driver.ticks_ms is ticks_ms))
    if sys.argv[2:] == ["keep"]:
        kept.append(driver)
    return driver
security = (None, None, True)
ran = warm_up(cfg.settings, make, security, rounds=200)
print(json.dumps({
    "ran": ran[0],
    "made": len(made),
    "real_clock": made[0][2],
    "kept": [made[0][0]() is not None, made[0][1]() is not None],
    "logged": lines.lines,
    "open": [d.open for d in kept],
    "refused": [d.broker.stats.refused_connections for d in kept],
    "replayed": replayed[0],
    "holds": holds[0],
    "released": ran[2],
}))
"""


def _pypy_json(script: str, *args: str, timeout: float = 120) -> Any:
    """Run `script` under PyPy from the repository; the JSON of its last line."""
    proc = subprocess.run(
        [pypy_python(), "-c", script, *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def _warm_up_in_pypy(tmp_path: Path, limits: str = "", *extra: str) -> dict:
    cfg = tmp_path / "siskin.toml"
    cfg.write_text(f"[limits]\n{limits}\n")
    return _pypy_json(WARM_UP, str(cfg), *extra)


def test_the_warm_up_runs_the_real_brokers_driver_logs_nothing_and_keeps_nothing(tmp_path: Path) -> None:
    # The driver is the one serve.py makes (its clock, its logger): code the
    # JIT compiled for a stand-in's would fail its guards on the real one's.
    result = _warm_up_in_pypy(tmp_path)
    assert result["ran"] >= 200
    assert result["made"] == 1 and result["real_clock"]
    # Its connects are not the broker's: not one core line, even at debug level.
    assert result["logged"] == []
    # Its broker and driver are collected before the listeners open.
    assert result["kept"] == [False, False]
    # Its clients' SUBSCRIBEs replayed retained messages (the replay path
    # compiled too): several for each of the 200 clients.
    assert result["replayed"] > 200, result


def test_with_rate_limits_set_the_warm_up_holds_clients_back_and_releases_them(tmp_path: Path) -> None:
    # A fresh PyPy broker compiled the hold and the release while its first
    # flood was on: a bystander's p99 was 3-4 x what it was in a second
    # flood (docs/benchmarks.md). The warm-up runs flooders through both,
    # on the real clock, and logs none of it (the holds log at warning).
    result = _warm_up_in_pypy(tmp_path, "rate_messages = 1000\nrate_grace = 0")
    assert result["released"] > 100 and result["holds"] >= result["released"], result
    assert result["logged"] == [] and result["kept"] == [False, False]
    # Without rate limits there is nothing to flood; with rates nobody
    # reaches, the flood ends unheld.
    assert _warm_up_in_pypy(tmp_path)["released"] == 0
    unheld = _warm_up_in_pypy(tmp_path, "rate_messages = 10000000")
    assert unheld["released"] == 0 and unheld["holds"] == 0, unheld


def test_the_warm_up_stays_within_max_connections(tmp_path: Path) -> None:
    # A batch holds more clients than a small board's limit: those refused
    # are left out and the warm-up ends as usual.
    result = _warm_up_in_pypy(tmp_path, "max_connections = 3\nmax_sessions = 2", "keep")
    assert result["ran"] >= 200 and result["logged"] == []
    assert result["refused"][0] > 0  # (the limit was reached)
    assert result["open"] == [0]  # every client it let in, it let go


WARM_UP_STORED = """
import json, os, sys
import cpython_host.runtime.storage as storage
from common.store.store import Store
from cpython_host.config import load_config
from cpython_host.runtime.run import make_driver
from cpython_host.runtime.warmup import warm_up

opened = []
real_open = storage.open_store
def open_store(*args, **kwargs):
    opened.append(real_open(*args, **kwargs))
    return opened[-1]
storage.open_store = open_store
puts = {}
real_put = Store.put
def put(self, ns, key, value):
    puts[ns.decode()] = puts.get(ns.decode(), 0) + 1
    real_put(self, ns, key, value)
Store.put = put
cfg = load_config(sys.argv[1])
ran = warm_up(cfg.settings, lambda b: make_driver(cfg, b), (None, None, True), rounds=200, store_in=(sys.argv[2], True))
store = opened[0]
print(json.dumps({"ran": ran[0], "syncs": store.syncs, "sealed": bool(store.keys), "errors": store.errors,
                  "puts": puts, "left": os.listdir(sys.argv[2])}))
"""


def test_with_a_store_the_warm_up_runs_the_stores_paths_in_a_scratch_store(tmp_path: Path) -> None:
    # A fresh PyPy broker with a store ran its first durable seconds at two
    # thirds of its later speed: the warm-up's broker gets a store of its
    # own in the data directory (sealed when the real one is), half its
    # clients keep their sessions, and the store is removed after.
    cfg = tmp_path / "siskin.toml"
    cfg.write_text('[limits]\nstore_sync = "always"\n')
    data = tmp_path / "data"
    data.mkdir()
    (data / "siskin.log").write_bytes(b"the real store: not touched")
    (data / ".warm-up-left-by-a-kill").mkdir()  # a start cut short: removed
    result = _pypy_json(WARM_UP_STORED, str(cfg), str(data))
    assert result["ran"] >= 200 and result["errors"] == 0
    assert result["sealed"]  # (the sealing code is compiled too)
    # Sessions, subscriptions and deliveries were stored, and synced.
    assert result["puts"].get("S", 0) > 0 and result["puts"].get("U", 0) > 0 and result["puts"].get("D", 0) > 0
    assert result["syncs"] > 0
    assert result["left"] == ["siskin.log"]
    assert (data / "siskin.log").read_bytes() == b"the real store: not touched"


def test_a_warm_up_store_that_cannot_be_made_leaves_the_warm_up_without_one(tmp_path: Path) -> None:
    # (Here the "data directory" is a file: no scratch directory in it.)
    # The start must not fail for the warm-up's sake: it runs without a store.
    cfg = tmp_path / "siskin.toml"
    cfg.write_text("")
    not_a_dir = tmp_path / "data"
    not_a_dir.write_bytes(b"")
    code = (
        "import sys; from cpython_host.config import load_config; from cpython_host.runtime.run import make_driver; "
        "from cpython_host.runtime.warmup import warm_up; cfg = load_config(sys.argv[1]); "
        "print(warm_up(cfg.settings, lambda b: make_driver(cfg, b), (None, None, True), rounds=64, "
        "store_in=(sys.argv[2], False))[0])"
    )
    assert _pypy_json(code, str(cfg), str(not_a_dir)) >= 64  # (the clients it ran: a JSON number)


START_AFTER_WARM_UP = """
import socket, sys
import cpython_host.runtime.storage as storage
import cpython_host.runtime.warmup as warmup
from cpython_host.cli import serve

events = []
real_warm_up, real_give_back = warmup.warm_up, storage.give_back_heap
def warm_up(*args, **kwargs):
    events.append("warm_up")
    return real_warm_up(*args, rounds=50)
def give_back_heap():
    events.append("give_back_heap")
    real_give_back()
warmup.warm_up, storage.give_back_heap = warm_up, give_back_heap
busy = socket.socket()
busy.bind(("127.0.0.1", 0))
busy.listen()
code = serve.main(["--config", sys.argv[1], "--port", str(busy.getsockname()[1])])
print(code, events)
"""


def test_on_pypy_the_warm_ups_heap_is_given_back_before_the_listeners_open(tmp_path: Path) -> None:
    # glibc keeps what the warm-up's garbage used (8 MB of RSS at start,
    # docs/benchmarks.md) unless malloc_trim gives it back; the port is
    # taken, so the start ends (exit 1) where the listeners would open.
    cfg = tmp_path / "siskin.toml"
    cfg.write_text("[server]\nwarm_up = true\n")
    proc = subprocess.run(
        [pypy_python(), "-c", START_AFTER_WARM_UP, str(cfg)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    # (the second: after the socket warm-up, which runs on the loop before the listeners open)
    assert proc.stdout.splitlines()[-1] == "1 ['warm_up', 'give_back_heap', 'give_back_heap']", (
        proc.stdout + proc.stderr
    )
    assert "cannot listen" in proc.stderr


# Python 3.10 calls that mypy's 3.10 target cannot see as new.
NEWER_KEYWORDS = {("zip", "strict"), ("dataclass", "slots"), ("dataclass", "kw_only"), ("dataclass", "match_args")}
NEWER_CALLS = {"bit_count", "pairwise", "aiter", "anext", "aclosing"}


def python39_hazards(path: Path) -> list[str]:
    """What a module does at run time that Python 3.9 does not take, and an
    import does not reach: `X | Y` as a type in isinstance()/issubclass(),
    the 3.10 calls above, and the builtin TimeoutError for asyncio's (before 3.11,
    asyncio.wait_for raises asyncio.TimeoutError, which is not one: on PyPy
    a bridge's task died of it)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (
            isinstance(node, ast.Name)
            and node.id == "TimeoutError"
            and path.relative_to(REPO_ROOT).parts[0] == "cpython_host"
        ):
            found.append(f"{node.lineno}: TimeoutError (write asyncio.TimeoutError, or socket.timeout for a socket's)")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("isinstance", "issubclass")
            and len(node.args) == 2
            and any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.BitOr) for n in ast.walk(node.args[1]))
        ):
            found.append(f"{node.lineno}: {node.func.id}() with X | Y (write a tuple)")
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            for kw in node.keywords:
                if (name, kw.arg) in NEWER_KEYWORDS:
                    found.append(f"{node.lineno}: {name}({kw.arg}=) (3.10)")
            if name in NEWER_CALLS:
                found.append(f"{node.lineno}: {name}() (3.10)")
    return found


def test_no_python_3_10_types_at_run_time_in_the_host() -> None:
    hazards = [
        f"{path.relative_to(REPO_ROOT)}:{hazard}"
        for root in ("common", "cpython_host", "tools")
        for path in sorted((REPO_ROOT / root).rglob("*.py"))
        if "node_modules" not in path.parts
        for hazard in python39_hazards(path)
    ]
    assert hazards == [], "\n".join(hazards)

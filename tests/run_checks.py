"""What a test run says at its end besides the tests (hooks re-exported by tests/conftest.py).

Processes left behind. The run marks itself: SISKIN_TEST_RUN=<uuid> in the
environment, set here at import unless a run that started this one set it
already (a pytest run by a test, an xdist worker), so every process the
run starts, and everything those start, inherits it, even one that was
orphaned and adopted by init. At the end the run that set the mark waits a
few seconds for every other process carrying it (/proc/PID/environ) to go;
one that does not is a leak: it is listed with the test that was running
when it was started (PYTEST_CURRENT_TEST, inherited the same way) and its
command line, killed by its pid, and the run fails. Other people's
processes on the machine never carry this run's mark.

Skipped for a missing component. tests/conftest.py `require()` skips a test
with "COMPONENT is not available (HINT)"; the summary counts those skips per
component and names the one command that installs the system packages,
`make deps` (.ci/install-deps, as .ci/run does).

Failed and errored tests. A red run ends by naming every test that failed
or errored (with the phase, set-up, call or tear-down, and the first line of
its reason) in one short list after the skip summary, so that a run on
someone else's machine says which test it was without a rerun.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

MARK = "SISKIN_TEST_RUN"
OWNS_MARK = MARK not in os.environ
if OWNS_MARK:
    os.environ[MARK] = uuid.uuid4().hex
RUN_ID = os.environ[MARK]

LEAK_GRACE = 5.0  # s for processes that are on their way out (a stop that has just signalled)

_leftovers: list[str] = []


def marked_processes(run_id: str = RUN_ID) -> dict[int, dict[str, str]]:
    """pid -> the environment, of every live process (not a zombie) that carries `run_id`, this one aside."""
    needle = f"{MARK}={run_id}".encode()
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            if needle not in environ.split(b"\0"):
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:  # gone, or not ours to read
            continue
        if state == "Z":  # exited, waiting for its parent to reap it: not running
            continue
        env = dict(item.split("=", 1) for item in environ.decode(errors="replace").split("\0") if "=" in item)
        found[int(entry.name)] = env
    return found


def command_line(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()[:300]


def stop_own_helpers() -> None:
    """Stop what this process keeps running for itself until it exits: the
    resource tracker of multiprocessing (started with the first process of a
    spawn context, tools/churn.py's bystander), which is no test's leftover."""
    tracker = sys.modules.get("multiprocessing.resource_tracker")
    stop = getattr(getattr(tracker, "_resource_tracker", None), "_stop", None)
    if stop is not None:
        stop()


def end_leftovers(grace: float = LEAK_GRACE) -> list[str]:
    """Wait up to `grace` s for this run's processes to end; describe and kill those that did not."""
    stop_own_helpers()
    deadline = time.monotonic() + grace
    while (left := marked_processes()) and time.monotonic() < deadline:
        time.sleep(0.1)
    lines = []
    for pid, env in sorted(left.items()):
        test = env.get("PYTEST_CURRENT_TEST", "outside any test")
        lines.append(f"pid {pid} started during {test}: {command_line(pid)}")
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return lines


@pytest.hookimpl(trylast=True)  # after pytest-xdist has stopped its workers (they carry the mark too)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not OWNS_MARK:  # (a pytest-xdist worker, a pytest run by a test: the run that set it checks)
        return
    _leftovers[:] = end_leftovers()
    if _leftovers:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_MISSING = re.compile(r"(.+?) is not available(?: \((.*)\))?$")


def missing_components(skipped: list[pytest.TestReport]) -> dict[str, tuple[int, str]]:
    """component -> (tests skipped for it, the hint) from the skip reports of require()."""
    counts: Counter[str] = Counter()
    hints: dict[str, str] = {}
    for report in skipped:
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        m = _MISSING.match(reason.removeprefix("Skipped: "))
        if m:
            counts[m.group(1)] += 1
            hints.setdefault(m.group(1), m.group(2) or "")
    return {name: (n, hints[name]) for name, n in counts.most_common()}


def skip_summary(missing: dict[str, tuple[int, str]]) -> list[str]:
    total = sum(n for n, _ in missing.values())
    width = max(len(name) for name in missing)
    lines = [f"{total} test{'s' if total != 1 else ''} skipped: these components are missing on this machine"]
    for name, (n, hint) in missing.items():
        lines.append(f"  {name:<{width}}  {n:4d} test{'s' if n != 1 else ' '}" + (f"  ({hint})" if hint else ""))
    lines.append("One command installs the system packages: make deps   (.ci/install-deps, as CI runs it; sudo when")
    lines.append("not root). make test then installs the rest into .venv and node_modules and runs every test.")
    return lines


def reason_line(report: pytest.BaseReport) -> str:
    """The first `E   ...` line of the report's traceback (pytest's own
    line for the exception), else its last line; bounded."""
    lines = [line.rstrip() for line in str(report.longrepr or "").splitlines() if line.strip()]
    errors = [line[1:].strip() for line in lines if line.startswith("E ")]
    return (errors[0] if errors else lines[-1].strip() if lines else "")[:160]


def red_tests(failed: list[pytest.BaseReport], errored: list[pytest.BaseReport]) -> list[str]:
    """One line per test that failed or errored: FAILED/ERROR, the node id,
    the phase unless it was the test itself, the reason."""
    lines = []
    for word, reports in (("FAILED", failed), ("ERROR", errored)):
        for report in reports:
            when = getattr(report, "when", "collect")  # a collection error has no phase
            phase = "" if when == "call" else f" (at {when})"
            reason = reason_line(report)
            lines.append(f"{word} {report.nodeid}{phase}" + (f": {reason}" if reason else ""))
    return lines


@pytest.hookimpl(tryfirst=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    # After pytest's own last line, so that a run ends with these words.
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    missing = missing_components(reporter.stats.get("skipped", []))
    if missing:
        reporter.write_sep("=", "skipped: missing components", yellow=True, bold=True)
        for line in skip_summary(missing):
            reporter.write_line(line)
    red = red_tests(reporter.stats.get("failed", []), reporter.stats.get("error", []))
    if red:
        reporter.write_sep("=", f"{len(red)} test(s) failed or errored", red=True, bold=True)
        for line in red:
            reporter.write_line(line, red=True)
    if _leftovers:
        reporter.write_sep("=", "processes left running", red=True, bold=True)
        reporter.write_line(
            f"{len(_leftovers)} process(es) started by this run outlived it (now killed); the run fails:", red=True
        )
        for line in _leftovers:
            reporter.write_line("  " + line)

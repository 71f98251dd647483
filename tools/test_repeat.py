"""`make test` N times on a fresh clone, as a newcomer would run it, optionally under load.

    python3 -m tools.test_repeat --runs 5            (make test-repeat N=5)
    python3 -m tools.test_repeat --runs 5 --load     (make test-repeat N=5 LOAD=1)

Clones the current commit (HEAD; uncommitted changes are not in it, and it
says so) into a temporary directory, runs `make setup` there once (the venv
and node_modules, timed on their own), then `make test` N times in a row.
With --load, `stress-ng --cpu 2` (two busy workers: the 2 cores of the
reference machine) runs beside every test run, started and stopped here in
a process group of its own; a missing stress-ng is installed through
.ci/install-deps (asking sudo for root), or the command says how to.

Each run's output goes to LOGDIR/run-K.log (default build/test-repeat-
<time>/ in this tree); the table at the end gives per run the exit code,
pytest's counts, the wall time, and what the run's end-of-run check said
about processes left running (tests/run_checks.py). Exit status 0 only if
every run passed. The clone is removed at the end unless --keep.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TypedDict

from tools import procgroup

REPO_ROOT = Path(__file__).resolve().parent.parent
_COUNTS = re.compile(r"^=+ ((?:\d+ \w+, )*\d+ \w+ in [\d.]+s)(?: \([\d:]+\))? =+$", re.M)
# pytest's own summary line and the run's closing list (tests/run_checks.py)
# both name a red test: "FAILED <node id>[: reason]", "ERROR <node id> (at setup)...".
_FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+?)(?::? |:?$)", re.M)


def git(*args: str, cwd: Path = REPO_ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def clone(commit: str, dest: Path) -> None:
    subprocess.run(["git", "clone", "--quiet", "--no-checkout", str(REPO_ROOT), str(dest)], check=True)
    subprocess.run(["git", "checkout", "--quiet", "--detach", commit], cwd=dest, check=True)


def start_load() -> subprocess.Popen[bytes]:
    if shutil.which("stress-ng") is None:
        print("test-repeat: --load needs stress-ng; installing it (.ci/install-deps stress-ng)", flush=True)
        if subprocess.run(["bash", str(REPO_ROOT / ".ci" / "install-deps"), "stress-ng"]).returncode != 0:
            sys.exit("test-repeat: no stress-ng: install it (Debian: apt-get install stress-ng) and run again")
    return procgroup.spawn(
        ["stress-ng", "--cpu", "2", "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


class Run(TypedDict):
    rc: int
    counts: str  # pytest's last line: "1046 passed, 62 skipped in 413.21s"
    wall_s: float
    left: int  # processes the run's end-of-run check found still running
    failed: list[str]  # the FAILED/ERROR test ids


def failed_tests(text: str) -> list[str]:
    """The ids of the tests a run's output names as failed or errored, each once, in order."""
    return list(dict.fromkeys(_FAILED.findall(text)))


def run_once(workdir: Path, log: Path, pytest_args: str) -> Run:
    started = time.monotonic()
    env = dict(os.environ)
    env.pop("SISKIN_TEST_RUN", None)  # each run is its own (tests/run_checks.py)
    cmd = ["make", "test"] + ([f"PYTEST_ARGS={pytest_args}"] if pytest_args else [])
    with log.open("wb") as out:
        rc = subprocess.run(cmd, cwd=workdir, stdout=out, stderr=subprocess.STDOUT, env=env).returncode
    seconds = time.monotonic() - started
    text = log.read_text(errors="replace")
    counts = _COUNTS.findall(text)  # the last one is the run's (a test may print a pytest run of its own)
    left = re.search(r"(\d+) process\(es\) started by this run outlived it", text)
    return {
        "rc": rc,
        "counts": counts[-1] if counts else "(no pytest summary)",
        "wall_s": seconds,
        "left": int(left.group(1)) if left else 0,
        "failed": failed_tests(text),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python3 -m tools.test_repeat",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--runs", type=int, default=5, metavar="N", help="make test runs (default 5)")
    p.add_argument("--load", action="store_true", help="stress-ng --cpu 2 beside every run")
    p.add_argument("--pytest-args", default="", metavar="ARGS", help="PYTEST_ARGS for each make test")
    p.add_argument("--logdir", type=Path, help="where run-K.log go (default build/test-repeat-<time>)")
    p.add_argument("--keep", action="store_true", help="keep the clone (its path is printed)")
    args = p.parse_args(argv)

    commit = git("rev-parse", "HEAD")
    if git("status", "--porcelain", "--untracked-files=no"):
        print(f"test-repeat: uncommitted changes are NOT tested: the clone is of HEAD {commit[:12]}", flush=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    logdir = args.logdir or REPO_ROOT / "build" / f"test-repeat-{stamp}"
    logdir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="siskin-repeat-"))
    workdir = tmp / "siskin"
    load = None
    rows: list[Run] = []
    try:
        clone(commit, workdir)
        print(f"test-repeat: {commit[:12]} cloned into {workdir}; logs in {logdir}", flush=True)
        started = time.monotonic()
        with (logdir / "setup.log").open("wb") as out:
            rc = subprocess.run(["make", "setup"], cwd=workdir, stdout=out, stderr=subprocess.STDOUT).returncode
        print(f"test-repeat: make setup: exit {rc} in {time.monotonic() - started:.0f} s", flush=True)
        if rc != 0:
            print((logdir / "setup.log").read_text(errors="replace")[-3000:])
            return 1
        if args.load:
            load = start_load()
            print(f"test-repeat: stress-ng --cpu 2 running beside the tests (pid {load.pid})", flush=True)
        for k in range(1, args.runs + 1):
            row = run_once(workdir, logdir / f"run-{k}.log", args.pytest_args)
            rows.append(row)
            print(
                f"test-repeat: run {k}/{args.runs}: exit {row['rc']}, {row['counts']}, "
                f"{row['wall_s']:.0f} s wall, processes left: {row['left']}"
                + (f"; failed: {' '.join(row['failed'])}" if row["failed"] else ""),
                flush=True,
            )
    finally:
        if load is not None:
            procgroup.stop(load, timeout=10)
        if args.keep:
            print(f"test-repeat: the clone is kept: {workdir}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    print()
    print(f"| run | exit | pytest | wall | processes left | ({commit[:12]}{', under stress-ng --cpu 2' if args.load else ''})")
    print("|---|---|---|---|---|")
    for k, row in enumerate(rows, 1):
        print(f"| {k} | {row['rc']} | {row['counts']} | {row['wall_s']:.0f} s | {row['left']} |")
    bad = [k for k, row in enumerate(rows, 1) if row["rc"] != 0]
    print(f"\ntest-repeat: {len(rows) - len(bad)} of {len(rows)} runs passed" + (f"; failed: runs {bad}" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

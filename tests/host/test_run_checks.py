"""The end of a test run (tests/run_checks.py), seen from outside: a pytest
run of a few made-up tests, in a subprocess of its own.

- Tests skipped for a missing component are counted per component, and the
  run ends by naming the command that installs them (`make deps`).
- A process a test started and left running fails the run, although every
  test passed; the end-of-run check names it with the test that started it
  and kills it (by its pid). One that its test stopped is not named.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import REPO_ROOT
from tests.host.broker_proc import wait_until
from tests.run_checks import MARK
from tools.test_repeat import failed_tests


def inner_pytest(tmp_path: Path, tests: str) -> subprocess.CompletedProcess[str]:
    """pytest over one file holding `tests`, with the end-of-run hooks and no
    mark of this run: the inner run is a run of its own, as `make test` is."""
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(tests))
    env = {k: v for k, v in os.environ.items() if k not in (MARK, "SISKIN_REQUIRE_ALL", "PYTEST_ADDOPTS")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.run_checks", "-p", "no:cacheprovider", "-rs", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


# The process a test of the inner run leaves behind: it sleeps, and if a
# catchable signal ends it first it writes down which one and who sent it
# (and the sender's command line), so that a run in which it died before the
# end-of-run check says why (one did, once, in a repeat run on a shared
# machine). A SIGKILL leaves no word: then the file is missing.
SLEEPER = r"""
import signal, sys
caught = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
signal.pthread_sigmask(signal.SIG_BLOCK, caught)
info = signal.sigtimedwait(caught, 300)
if info is not None:
    try:
        sender = open("/proc/%d/cmdline" % info.si_pid, "rb").read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        sender = "(gone)"
    open(sys.argv[1], "w").write("signal %d from pid %d: %s" % (info.si_signo, info.si_pid, sender))
"""


def test_what_a_run_says_at_its_end(tmp_path: Path) -> None:
    pidfile = tmp_path / "sleeper.pid"
    ended = tmp_path / "sleeper.ended"
    sleeper = tmp_path / "sleeper.py"
    sleeper.write_text(SLEEPER)
    proc = inner_pytest(
        tmp_path,
        f"""
        import subprocess
        import sys

        import pytest
        from tests.conftest import require

        def test_starts_a_sleeper_and_forgets_it():
            # its own session, as a daemon would: only the run's mark finds it
            p = subprocess.Popen([sys.executable, {str(sleeper)!r}, {str(ended)!r}], start_new_session=True)
            open({str(pidfile)!r}, "w").write(str(p.pid))

        def test_starts_and_stops():
            p = subprocess.Popen(["sleep", "300"])
            p.terminate()
            p.wait()

        @pytest.mark.parametrize("i", range(3))
        def test_needs_mosquitto(i):
            require("mosquitto", None, "apt-get install mosquitto")

        def test_needs_nats():
            require("nats-server", "", "apt-get install nats-server")

        def test_has_what_it_needs():
            require("python", "/usr/bin/python3")

        def test_skips_for_another_reason():
            pytest.skip("not on this platform")
        """,
    )
    out = proc.stdout + proc.stderr
    pid = int(pidfile.read_text())
    try:
        assert "3 passed, 5 skipped in " in out, out
        # Every test passed, and still the run fails: one process is left running.
        why = ended.read_text() if ended.exists() else "no signal it could catch (SIGKILL?)"
        assert proc.returncode == 1, f"the sleeper was not left running: {why}\n{out}"
        end = out[out.index("3 passed, 5 skipped in ") :].splitlines()[1:]  # after pytest's own last line
        assert "skipped: missing components" in end[0], end
        assert end[1] == "4 tests skipped: these components are missing on this machine", end
        assert end[2].split() == "mosquitto 3 tests (apt-get install mosquitto)".split(), end
        assert end[3].split() == "nats-server 1 test (apt-get install nats-server)".split(), end
        assert end[4].startswith("One command installs the system packages: make deps "), end
        assert not any("platform" in line for line in end), end  # a skip for another reason is not counted
        assert "processes left running" in end[6], end
        assert end[7] == "1 process(es) started by this run outlived it (now killed); the run fails:", end
        assert end[8].startswith(
            f"  pid {pid} started during test_inner.py::test_starts_a_sleeper_and_forgets_it (call): "
        ), end
        assert end[8].endswith(f"{sleeper} {ended}"), end
        assert len(end) == 9, end  # the sleeper stopped by its test is not there
        wait_until(lambda: not alive(pid), 10, f"the sleeper {pid} is still running")
    finally:
        if alive(pid):
            os.kill(pid, 9)


def test_a_red_run_ends_by_naming_each_test_that_failed_or_errored(tmp_path: Path) -> None:
    proc = inner_pytest(
        tmp_path,
        """
        import pytest
        from tests.conftest import require

        @pytest.fixture
        def broken_setup():
            raise OSError("port 1883 is in use")

        @pytest.fixture
        def broken_teardown():
            yield
            raise RuntimeError("the broker did not stop")

        def test_passes():
            pass

        def test_fails():
            assert 1 + 1 == 3, "arithmetic"

        def test_errs_at_setup(broken_setup):
            pass

        def test_errs_at_teardown(broken_teardown):
            pass

        def test_needs_mosquitto():
            require("mosquitto", None, "apt-get install mosquitto")
        """,
    )
    out = proc.stdout + proc.stderr
    assert "1 failed, 2 passed, 1 skipped, 2 errors in " in out, out
    assert proc.returncode == 1, out
    end = out[out.index("1 failed, 2 passed, 1 skipped, 2 errors in ") :].splitlines()[1:]
    assert "skipped: missing components" in end[0], end
    # The red list comes after the skip summary, one line per test, and ends the run.
    red = end[end.index(next(line for line in end if "3 test(s) failed or errored" in line)) + 1 :]
    assert red == [
        "FAILED test_inner.py::test_fails: AssertionError: arithmetic",
        "ERROR test_inner.py::test_errs_at_setup (at setup): OSError: port 1883 is in use",
        "ERROR test_inner.py::test_errs_at_teardown (at teardown): RuntimeError: the broker did not stop",
    ], end
    # make test-repeat's table names each of them once (pytest's -ra summary names them too).
    assert failed_tests(out) == [
        "test_inner.py::test_fails",
        "test_inner.py::test_errs_at_setup",
        "test_inner.py::test_errs_at_teardown",
    ], out

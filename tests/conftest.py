"""Shared pytest set-up for the whole suite (CPython only).

- Puts the repository root on sys.path, so `import common` works whatever
  directory pytest was started from.
- `require(component, available, hint)`: a test that needs an outside
  component (node, mosquitto, nats-server, micropython, mpy-cross, the wasm port) calls it
  instead of `pytest.skip`. Normally a missing component skips the test; with
  SISKIN_REQUIRE_ALL=1 (set by .ci/run) it fails it, so CI can never go green
  by skipping.
- `tool_path(name)`: a console tool from the venv (next to sys.executable),
  else from PATH.
- `core_test_ids` fixture: the ids of the test methods pytest collects in
  tests/core, which the MicroPython runs must all pass.
- Hypothesis profile: no deadline (CI machines are slow and shared);
  SISKIN_FUZZ_EXAMPLES=N sets max_examples (`make fuzz`).
- At the end (tests/run_checks.py): a run fails if a process it started is
  still running, and the tests skipped for a missing component are counted
  per component, with the command that installs them (`make deps`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

# The end-of-run hooks; importing them also marks this run's processes (SISKIN_TEST_RUN).
from tests.run_checks import pytest_sessionfinish, pytest_unconfigure  # noqa: E402, F401

REQUIRE_ALL = os.environ.get("SISKIN_REQUIRE_ALL", "") not in ("", "0")


def require(component: str, available: object, hint: str = "") -> None:
    """Skip (or, with SISKIN_REQUIRE_ALL=1, fail) unless `available` is truthy."""
    if available:
        return
    message = f"{component} is not available"
    if hint:
        message += f" ({hint})"
    if REQUIRE_ALL:
        pytest.fail(message + " and SISKIN_REQUIRE_ALL=1 forbids skipping", pytrace=False)
    pytest.skip(message)


def node_with(package: str) -> str:
    """The node executable, once `package` (an npm dev dependency) resolves
    from the tree; else the test is skipped (require)."""
    node = shutil.which("node")
    require("node", node, "apt-get install nodejs")
    assert node is not None
    found = subprocess.run([node, "-e", f"require.resolve('{package}')"], cwd=REPO_ROOT, capture_output=True)
    require(f"npm {package}", found.returncode == 0, "npm ci installs it")
    return node


def tool_path(name: str) -> str | None:
    """A console tool installed in the running venv, else found on PATH."""
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which(name)


# -- hypothesis ---------------------------------------------------------------


def _load_hypothesis_profile() -> None:
    try:
        from hypothesis import settings
    except ImportError:  # pragma: no cover - hypothesis is a pinned test dependency
        return
    examples = os.environ.get("SISKIN_FUZZ_EXAMPLES")
    if examples:
        settings.register_profile("siskin", deadline=None, print_blob=True, max_examples=int(examples))
    else:
        settings.register_profile("siskin", deadline=None, print_blob=True)
    settings.load_profile("siskin")


_load_hypothesis_profile()


# -- the core test inventory --------------------------------------------------


def _dotted(nodeid: str) -> str:
    path, _, rest = nodeid.partition("::")
    return path[: -len(".py")].replace("/", ".") + "." + rest.replace("::", ".")


def collect_core_test_ids() -> list[str]:
    """Test ids pytest collects in tests/core, as dotted names
    (tests.core.test_x.Class.test_method), the form tests/upy/run.py prints."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests/core"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode not in (0, 5):
        raise RuntimeError("pytest could not collect tests/core:\n" + proc.stdout + proc.stderr)
    return [_dotted(line) for line in proc.stdout.splitlines() if "::" in line]


_CORE = REPO_ROOT / "tests" / "core"
_session_core_ids: list[str] | None = None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    # When this run collects the whole of tests/core anyway (as `make test`
    # does), remember its ids before -k/-m deselection, which saves a second
    # pytest process for the inventory.
    global _session_core_ids
    roots = {REPO_ROOT, REPO_ROOT / "tests", _CORE}
    args = config.args or [str(REPO_ROOT / p) for p in config.getini("testpaths")]
    if any("::" not in a and (config.invocation_params.dir / a).resolve() in roots for a in args):
        _session_core_ids = [_dotted(item.nodeid) for item in items if item.nodeid.startswith("tests/core/")]


@pytest.fixture(scope="session")
def core_test_ids() -> list[str]:
    if _session_core_ids is not None:
        return list(_session_core_ids)
    return collect_core_test_ids()

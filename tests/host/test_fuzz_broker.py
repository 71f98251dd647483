"""The atheris broker target (tests/host/fuzz_broker.py), short: 20,000 inputs.

`make fuzz` runs it long (FUZZ_RUNS, default 1,000,000). libFuzzer exits
non-zero and writes the input as crash-* when an exception escapes the core
or a pool is left above its baseline.
"""

import importlib.util
import platform
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT, require

RUNS = 20000
TARGET = REPO_ROOT / "tests" / "host" / "fuzz_broker.py"

pytestmark = pytest.mark.slow


def test_broker_fuzz_short(tmp_path):
    # atheris has wheels for x86-64 Linux only (pyproject.toml installs it there).
    if sys.platform != "linux" or platform.machine() != "x86_64":
        pytest.skip("atheris has no wheel for this platform")
    require("atheris", importlib.util.find_spec("atheris"), "pip install atheris (make setup)")
    proc = subprocess.run(
        [sys.executable, str(TARGET), f"-runs={RUNS}", "-seed=1", f"-artifact_prefix={tmp_path}/"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,  # a hang guard (pyproject.toml timeout): 180 s were seen on a loaded machine
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert f"Done {RUNS} runs" in out, out[-4000:]
    assert not list(tmp_path.glob("crash-*"))

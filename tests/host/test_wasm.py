"""The core tests pass under the 32-bit WebAssembly MicroPython port.

@micropython/micropython-webassembly-pyscript 1.27.0 (npm, installed by
`make test`) run by Node: a 32-bit object model (31-bit small ints, 4-byte
words) like the ESP32 and RP2040 boards, which the 64-bit unix port does not
show. tools/wasm_run.mjs copies common/, tests/core/, tests/upy/ and
tests/fixtures/ into the port's in-memory file system and runs
tests/upy/run.py there. What the port lacks (socket, cryptolib, real files,
threads) is listed in tools/wasm_run.mjs; the core needs none of it, and a
core test that does must skipTest with a reason, which this test prints.

The pyscript build grows its GC heap on demand, so --heap is only the
initial size here: allocation budgets are measured on the unix port.
"""

from __future__ import annotations

import re
import shutil
import subprocess

from tests.conftest import REPO_ROOT, require
from tests.host.test_micropython import HEAP, check_against_pytest

PORT = REPO_ROOT / "node_modules" / "@micropython" / "micropython-webassembly-pyscript" / "micropython.mjs"
INTERPRETER = re.compile(r"^interpreter: (.*)$", re.M)


def run_wasm(*runner_args: str) -> subprocess.CompletedProcess[str]:
    node = shutil.which("node")
    require("node", node, "apt-get install nodejs")
    require("the wasm MicroPython port", PORT.is_file(), "npm ci at the repository root (make test does)")
    assert node is not None
    return subprocess.run(
        [node, "tools/wasm_run.mjs", "--heap", HEAP, "--", *runner_args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=900,  # a hang guard (pyproject.toml timeout): 150 s were seen on a loaded machine
    )


def test_core_tests_pass_under_32bit_wasm_micropython(core_test_ids: list[str]) -> None:
    assert core_test_ids, "pytest collected no tests in tests/core"
    proc = run_wasm("-v")
    output = proc.stdout + proc.stderr
    found = INTERPRETER.search(output)
    assert found, output[-4000:]
    facts = dict(item.split("=", 1) for item in found.group(1).split())
    print("wasm", found.group(1))
    # The point of this run: a 32-bit object model, as on the boards.
    assert facts["impl"] == "micropython"
    assert facts["platform"] == "webassembly"
    assert int(facts["maxsize"]) == 2**31 - 1, facts
    assert int(facts["smallint_bits"]) == 31, facts
    check_against_pytest(output, proc.returncode, core_test_ids, "MicroPython (32-bit wasm)")

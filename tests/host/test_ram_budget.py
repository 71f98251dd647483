"""tools/ram_budget.py on the 32-bit wasm port, from the .mpy files a board
loads: its figures, the modules the default start-up leaves loaded, and the
table it writes into a Markdown file between its markers (docs/boards.md's
figures come from it, never typed by hand)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT, node_with
from tests.host.test_firmware_build import run_build
from tools.ram_budget import BEGIN, END, LAYOUTS


def _mpy(root: Path, name: str) -> Path:
    """The .mpy file of module `name` under `root` (a package's __init__.mpy)."""
    path = root.joinpath(*name.split("."))
    return path.with_suffix(".mpy") if path.with_suffix(".mpy").exists() else path / "__init__.mpy"


def test_figures_modules_and_the_written_table(tmp_path: Path) -> None:
    node_with("@micropython/micropython-webassembly-pyscript")
    proc = run_build("unix", tmp_path / "dist")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = tmp_path / "boards.md"
    doc.write_text(f"before\n{BEGIN}\nold figures\n{END}\nafter\n")
    mpy = tmp_path / "dist" / "unix"
    cmd = [
        sys.executable,
        "tools/ram_budget.py",
        "--port",
        "wasm",
        "--mpy",
        str(mpy),
        "--write",
        str(doc),
        "boards/esp32.json",
    ]
    run = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert 0 < result["code"] < result["startup"]
    # One run per heap layout; `code` is the least (the conservative
    # collector's false retention only ever adds).
    assert len(result["code_layouts"]) == len(LAYOUTS) and result["code"] == min(result["code_layouts"])
    assert result["per_client"] > 0
    # What the default start-up keeps: the broker, not a feature it did not use.
    modules = result["modules"]
    assert {"common.broker.broker", "common.broker.ratelimit", "firmware.shell"} <= set(modules)
    assert not {
        "common.broker.wills",
        "common.broker.refusal",
        "common.broker.connect_v5",
        "common.broker.rate_hold",
    } & set(modules)
    sizes = sum(_mpy(mpy, name).stat().st_size for name in modules)
    assert result["mpy_bytes"] == sizes
    text = doc.read_text()
    assert text.startswith("before\n" + BEGIN) and text.endswith(END + "\nafter\n")
    assert "old figures" not in text
    assert f"| code of the default start-up (`code`) | **{result['code']:,} B** |" in text
    assert " / ".join(f"{c:,}" for c in result["code_layouts"]) + " B |" in text
    assert f"| connected client, core only (`per_client`) | **{result['per_client']:,} B** |" in text
    assert f"{len(modules)} modules, {result['mpy_bytes']:,} B of .mpy" in text

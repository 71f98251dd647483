"""cpython_host/transports/shared_selector.py holds the host's only use of private
fields of its runtime (PRIVATE: two of selectors.EpollSelector, one of
socket.socket): the CPython and the PyPy the host runs on must have every
one of them, of the kind the module expects, and no other module of the
host may use them (as tests/host/test_firmware_poller.py does for the
firmware's asyncio internals)."""

from __future__ import annotations

import ast
import json
import select
import selectors
import socket
import subprocess

import pytest

from cpython_host.transports import shared_selector
from tests.conftest import REPO_ROOT
from tests.host.conftest import pypy_python

# Run under an interpreter: what of PRIVATE it lacks, or has of another kind.
CHECK = """
import json, selectors, socket, sys
from cpython_host.transports.shared_selector import PRIVATE

def problems():
    out = []
    sel = selectors.EpollSelector()
    sock = socket.socket()
    try:
        for owner, name, _what in PRIVATE:
            obj = sel if owner is selectors.EpollSelector else sock
            if not hasattr(obj, name):
                out.append("%s.%s: missing" % (owner.__name__, name))
        if hasattr(sel, "_selector") and not hasattr(sel._selector, "poll"):
            out.append("EpollSelector._selector: not an epoll")
        if hasattr(sel, "_fd_to_key") and not hasattr(sel._fd_to_key, "get"):
            out.append("EpollSelector._fd_to_key: not a mapping")
        if hasattr(sock, "_accept") and not callable(sock._accept):
            out.append("socket._accept: not callable")
    finally:
        sel.close()
        sock.close()
    return out

print(json.dumps({"implementation": sys.implementation.name, "problems": problems()}))
"""

pytestmark = pytest.mark.skipif(not hasattr(select, "epoll"), reason="epoll: Linux only")


def _run(python: str) -> dict[str, object]:
    proc = subprocess.run([python, "-c", CHECK], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result: dict[str, object] = json.loads(proc.stdout.splitlines()[-1])
    return result


def test_private_fields_named() -> None:
    assert [name for _o, name, _w in shared_selector.PRIVATE] == ["_selector", "_fd_to_key", "_accept"]
    assert {o for o, _n, _w in shared_selector.PRIVATE} == {selectors.EpollSelector, socket.socket}


def test_cpython_has_every_private_field() -> None:
    import sys

    report = _run(sys.executable)
    assert report == {"implementation": "cpython", "problems": []}


def test_pypy_has_every_private_field() -> None:
    report = _run(pypy_python())
    assert report == {"implementation": "pypy", "problems": []}


def test_the_check_names_what_is_missing() -> None:
    # A field the runtime lacks: the check names it (the probe asks for one more).
    import sys

    probe = CHECK.replace("in PRIVATE:", 'in PRIVATE + ((selectors.EpollSelector, "_no_such_field", ""),):')
    proc = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert json.loads(proc.stdout.splitlines()[-1])["problems"] == ["EpollSelector._no_such_field: missing"]


def private_uses(sources: dict[str, str]) -> list[str]:
    """'path: name' for each use of a PRIVATE name (an attribute) in `sources`."""
    names = {name for _o, name, _w in shared_selector.PRIVATE}
    found = []
    for path, text in sources.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Attribute) and node.attr in names:
                found.append(f"{path}: {node.attr}")
    return sorted(set(found))


def test_no_other_host_module_uses_them() -> None:
    sources = {
        str(p.relative_to(REPO_ROOT)): p.read_text()
        for p in sorted((REPO_ROOT / "cpython_host").rglob("*.py"))
        if p.name != "shared_selector.py"
    }
    assert private_uses(sources) == []
    assert private_uses({"probe.py": "def f(sel):\n    return sel._fd_to_key\n"}) == ["probe.py: _fd_to_key"]

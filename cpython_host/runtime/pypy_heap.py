"""PyPy's GC nursery, pinned so that a broker's heap is the same on every machine.

PyPy's GC sizes its nursery (the young generation every new object is
allocated in) from the "cache size" line of /proc/cpuinfo: half of it. On
a desktop CPU that line holds the L2 (a nursery of 256 KB-1 MB); on most
cloud VMs it holds the L3 shared by the whole socket (an Intel Xeon VM
reports 491,520 KB: a 240 MB nursery), and the major-collection threshold
follows the nursery (1.82 times it), so the same broker is 95 MB resident
on one machine and 330 MB on the other (docs/install.md). The nursery is
read once, when the interpreter starts, from the environment variable
PYPY_GC_NURSERY; nothing later can change it. So the `siskin` command (and
`python -m cpython_host`) on PyPy, started without the variable, execs
itself again at once with PYPY_GC_NURSERY=PINNED_NURSERY: the same process
(the pid a service manager or a test holds stays), a fixed heap.

The setting that overrides it is the variable itself: a value set by the
user (PYPY_GC_NURSERY=1M siskin ..., the systemd unit's Environment=) is
kept, and PYPY_GC_NURSERY=0 gives PyPy's own choice from /proc/cpuinfo
back. The other sizes of PyPy's GC come from the nursery (PYPY_GC_MIN) or
are unlimited (PYPY_GC_MAX); PYPY_GC_MAX_DELTA (1/8 of the RAM) only caps
the growth between two major collections.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Sequence
from typing import Any

NURSERY_VARIABLE = "PYPY_GC_NURSERY"
# 4 MB: the A/B bench of docs/benchmarks.md ("PyPy's nursery") against
# 1 MB, 16 MB and PyPy's own 240 MB on an Intel Xeon VM.
PINNED_NURSERY = "4M"


def on_pypy() -> bool:
    return sys.implementation.name == "pypy"


def pin_nursery(argv: Sequence[str]) -> None:
    """On PyPy with PYPY_GC_NURSERY unset: exec this command again with it set; else nothing.

    `argv`: the command's arguments (sys.argv[1:]). It was started either as
    `python -m cpython_host` or as a script (the `siskin` entry point); it
    is started again the same way, so that the same files are imported."""
    if not on_pypy() or NURSERY_VARIABLE in os.environ:
        return
    os.environ[NURSERY_VARIABLE] = PINNED_NURSERY
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    how = ["-m", "cpython_host"] if spec is not None and spec.name == "cpython_host.__main__" else [sys.argv[0]]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, *how, *argv])


def nursery_bytes() -> int | None:
    """The size of the nursery PyPy's GC runs with (bytes), or None (not on PyPy)."""
    if not on_pypy():
        return None
    stats: Any = gc.get_stats()  # PyPy's: a GcStats (CPython's: a list)
    size: int = stats._s.nursery_size  # the number; stats.nursery_size is text ("4.0MB")
    return size

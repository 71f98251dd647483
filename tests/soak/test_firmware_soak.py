"""Soak: the firmware under steady load for minutes; the free heap must not trend down.

Run by `make soak` (marker `soak`; SISKIN_SOAK_SECONDS sets the length,
default 180). tests/host/test_firmware_soak.py runs the same load for ~20 s
inside `make test`. The load and the verdict: tests/soak/firmware_load.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.soak.firmware_load import run_load, verdict

pytestmark = pytest.mark.soak


def test_firmware_heap_does_not_trend_down(tmp_path: Path) -> None:
    seconds = float(os.environ.get("SISKIN_SOAK_SECONDS", "180"))
    summary = verdict(run_load(tmp_path, seconds, report=2))
    print("firmware soak:", summary)

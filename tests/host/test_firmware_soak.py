"""A ~20 s soak of the firmware inside `make test` (the long one: make soak).

Same load and verdict as tests/soak/test_firmware_soak.py
(tests/soak/firmware_load.py): under steady QoS 1 traffic and connection
churn, gc.mem_free() after gc.collect() does not trend down.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.soak.firmware_load import run_load, verdict

pytestmark = [pytest.mark.interop, pytest.mark.slow]


def test_firmware_short_soak(tmp_path: Path) -> None:
    summary = verdict(run_load(tmp_path, 20, report=1))
    print("firmware short soak:", summary)

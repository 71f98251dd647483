"""The bridge's births first over 100 upstream link cuts under load, against
a real Mosquitto (tests/host/test_sparkplug_births.py runs 10 in the normal
tests). Run by `make soak` (marker `soak`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.host.test_sparkplug_births import NODES, reconnects

pytestmark = [pytest.mark.soak, pytest.mark.interop]


def test_births_first_over_100_cuts_under_load(tmp_path: Path) -> None:
    counts = reconnects(tmp_path, 100)
    print("births first, 100 cuts:", counts)
    assert (counts["violations"], counts["unresolved"], counts["lost"]) == (0, 0, 0), counts
    assert counts["fewest_births_after_a_mark"] >= 2 * len(NODES), counts
    assert counts["replays_logged"] >= 100, counts

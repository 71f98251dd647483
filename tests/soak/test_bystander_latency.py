"""Soak: a bystander's latency while others storm the host broker, as a verdict.

Run by `make soak` (marker `soak`), on a machine whose cores are not busy
with other work: there a millisecond bound says something about the broker.
`make test` runs the same storms and abuse and checks everything else they
must leave (tests/host/test_server_churn.py, test_server_replay.py); there
the latencies are figures only.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.host import test_server_churn, test_server_replay
from tools import churn

pytestmark = pytest.mark.soak

CHURN_BOUND_MS = 100.0  # the bystander's p99 in every phase of the storms


def test_churn_leaves_bystander_alone(tmp_path: Path) -> None:
    res, figures = test_server_churn.storms(tmp_path)
    print(figures)
    assert churn.failures(res, CHURN_BOUND_MS) == [], figures


def test_retained_replay_abuse_leaves_bystander_alone(tmp_path: Path) -> None:
    during, after = test_server_replay.abuse(tmp_path)
    for samples in (during, after):
        p99 = test_server_replay.p99(samples)
        assert p99 < test_server_replay.P99_BOUND, (
            f"bystander QoS 1 p99 {p99 * 1000:.1f} ms (max {max(samples) * 1000:.1f} ms, {len(samples)} round trips)"
        )

"""Crash tests: kill -9 the host broker during a QoS 1 / QoS 2 publish storm.

Each iteration: a persistent subscriber (clean session 0) subscribes to
`storm/#` and goes away; a second persistent subscriber subscribes to an
unrelated topic; a publisher floods numbered QoS 1 and QoS 2 messages and
records every PUBACK/PUBREC it receives; at a random moment the broker is
killed with SIGKILL. After a restart on the same data directory the
subscriber reconnects and must receive every acknowledged message, in
publish order per QoS, QoS 2 exactly once; the unrelated subscriber must
receive none of them. `make test` runs a few iterations at random kill
points; `make soak` runs many (SISKIN_CRASH_ITERATIONS).
"""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path

import pytest

from tests.host.broker_proc import DISCONNECT, BrokerProcess, Publisher, RawClient, arrived, drain

ITERATIONS = int(os.environ.get("SISKIN_CRASH_ITERATIONS", "6"))
# With the broker on PyPy (the PyPy leg of make test): the same storms, fewer
# of them by default, so that the leg stays within make test's time budget.
PYPY_ITERATIONS = int(os.environ.get("SISKIN_CRASH_ITERATIONS", "2"))


# Room for the whole storm: a message dropped by a full queue is counted, not
# kept (a 3.1.1 PUBACK cannot say so), and that is not what this test is about.
LIMITS = {"max_queued_messages": 50000, "max_queued_bytes": 1 << 26, "max_messages": 60000}


def storm_and_kill(workdir: Path, rng: random.Random) -> int:
    """One iteration; the number of acknowledged messages it checked."""
    with BrokerProcess(workdir, limits=LIMITS, log_level="info") as broker:
        sub = RawClient(broker.port)
        assert sub.connect("storm-sub", clean=False)[1] == 0
        assert sub.subscribe("storm/#", 2) == 2
        sub.send(DISCONNECT)
        other = RawClient(broker.port)
        other.connect("bystander", clean=False)
        assert other.subscribe("elsewhere/#", 2) == 2
        other.send(DISCONNECT)
        broker.wait_log(r"storm-sub disconnected")
        broker.wait_log(r"bystander disconnected")
        pub = Publisher(broker.port)
        stop = threading.Event()
        flood = threading.Thread(target=pub.flood, args=(20000, stop), daemon=True)
        flood.start()
        time.sleep(rng.uniform(0.05, 0.6))
        broker.kill()  # SIGKILL: no shutdown, no final sync
        stop.set()
        flood.join(5)
        pub.reader.join(5)
        with pub.lock:
            acked = {q: set(s) for q, s in pub.acked.items()}
        pub.client.close()

    with BrokerProcess(workdir, limits=LIMITS, log_level="info") as broker:
        sub = RawClient(broker.port)
        connack = sub.connect("storm-sub", clean=False)
        assert connack == b"\x01\x00", "persistent session lost across kill -9"
        got = drain(sub, until=arrived({f"storm/{qos}": acked[qos] for qos in (1, 2)}))
        other = RawClient(broker.port)
        assert other.connect("bystander", clean=False) == b"\x01\x00"
        stray = drain(other, quiet=0.3)
        log = broker.log_text()
    assert stray == [], "a message reached a session that never subscribed to it"
    for qos in (1, 2):
        numbers = [int(p) for t, p, q, _d, _pid in got if t == f"storm/{qos}"]
        missing = acked[qos] - set(numbers)
        assert not missing, f"QoS {qos}: {len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:5]}\n{log[-3000:]}"
        # In publish order; QoS 1 may repeat one that was in flight, QoS 2 never.
        firsts = list(dict.fromkeys(numbers))
        assert firsts == sorted(firsts), f"QoS {qos}: out of order"
        if qos == 2:
            assert len(numbers) == len(set(numbers)), "QoS 2 delivered twice"
    return len(acked[1]) + len(acked[2])


@pytest.mark.slow
def test_kill_9_during_storm_loses_nothing_acknowledged(tmp_path: Path, broker_runtime: str) -> None:
    iterations = PYPY_ITERATIONS if broker_runtime == "pypy" else ITERATIONS
    seed = int(os.environ.get("SISKIN_CRASH_SEED", str(random.randrange(1 << 30))))
    rng = random.Random(seed)
    checked = []
    for i in range(iterations):
        try:
            checked.append(storm_and_kill(tmp_path / f"iter{i}", rng))
        except AssertionError as e:
            raise AssertionError(f"iteration {i} (SISKIN_CRASH_SEED={seed}): {e}") from None
    print(f"crash iterations: {iterations}, acknowledged messages checked per iteration: {checked}")
    # The kill must land mid-storm: with nothing acknowledged the test proves nothing.
    assert sum(1 for n in checked if n > 0) >= iterations // 2


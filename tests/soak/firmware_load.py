"""Steady load on the firmware under the unix port, and the heap trend it leaves.

Used by tests/soak/test_firmware_soak.py (minutes, `make soak`) and
tests/host/test_firmware_soak.py (~20 s, `make test`). The broker runs with
the Pico W settings at twice the Pico W heap and prints "heap t= free=
alloc=" every `report` seconds after a gc.collect(). Three clients, the
board's max_connections:

- a publisher: QoS 1 to soak/data/<0..7>, in bursts of 20, each burst waited for;
- a subscriber: QoS 1 to soak/data/#, which must receive every message
  but those the broker counted as dropped (its queue full while it lagged);
- a churner: connects, subscribes, publishes a retained message to one of
  16 topics, and leaves (half the time with DISCONNECT, half the time by
  dropping the socket, which publishes its will), over and over.

The verdict: after a warm-up (the first quarter), the least-squares slope of
gc.mem_free() over time is not downwards beyond noise, and the lowest free
heap of the last third is not below the lowest of the first third by more
than a small tolerance.
"""

from __future__ import annotations

import queue
import threading
import time
from pathlib import Path
from typing import Any

from tests.host.broker_proc import DISCONNECT, Paho, RawClient, publish_packet
from tests.host.upy_broker_proc import PICOW_HEAP, UpyBrokerProcess


def _churn(port: int, stop: threading.Event, counts: dict[str, int]) -> None:
    i = 0
    while not stop.is_set():
        i += 1
        try:
            c = RawClient(port)
            if c.connect(f"churn-{i % 5}", will=("soak/will", b"w%d" % i, 0, False)) != b"\x00\x00":
                c.close()
                time.sleep(0.1)
                continue
            c.subscribe("soak/churn/#", 1)
            c.send(publish_packet(f"soak/ret/{i % 16}", b"r" * 64, 0, retain=True))
            if i % 2:
                c.send(DISCONNECT)
            c.close()
            counts["churn"] += 1
        except OSError:
            counts["churn_errors"] += 1
        time.sleep(0.05)


def run_load(workdir: Path, seconds: float, report: int = 1) -> dict[str, Any]:
    """Load the firmware for `seconds`; the heap samples and the counts."""
    counts = {"published": 0, "churn": 0, "churn_errors": 0}
    # The board's rate limits off: this is the heap under load, and the
    # publisher goes as fast as its acks (far over rate_messages 50, which
    # would hold it back and, after rate_grace, close it).
    off = {"rate_messages": 0, "rate_bytes": 0, "rate_subscribes": 0}
    with UpyBrokerProcess(workdir, board="rp2040_picow", heap=PICOW_HEAP, heap_report=report, limits=off) as broker:
        sub = Paho(broker.port, "soak-sub").connect()
        pub = Paho(broker.port, "soak-pub").connect()
        sub.subscribe("soak/data/#", 1)
        stop = threading.Event()
        churner = threading.Thread(target=_churn, args=(broker.port, stop, counts), daemon=True)
        churner.start()
        payload = b"p" * 64
        deadline = time.monotonic() + seconds
        try:
            while time.monotonic() < deadline:
                infos = [pub.client.publish(f"soak/data/{k % 8}", payload, 1) for k in range(20)]
                for info in infos:
                    info.wait_for_publish(5)
                counts["published"] += len(infos)
                time.sleep(0.01)
        finally:
            stop.set()
            churner.join(5)
        # Every message arrives or is counted as dropped (heap lines: queue_full);
        # waited for as long as a loaded machine needs (the verdict says what is missing).
        received = 0
        end = time.monotonic() + 60
        while time.monotonic() < end:
            samples = broker.heap_samples()
            dropped = samples[-1]["queue_full"] if samples else 0
            if received + dropped >= counts["published"]:
                break
            try:
                sub.messages.get(timeout=0.5)
                received += 1
            except queue.Empty:
                pass
        while not sub.messages.empty():
            sub.messages.get_nowait()
            received += 1
        counts["received"] = received
        sub.close()
        pub.close()
        # Two more heap lines: one whole report interval after the clients left.
        samples = broker.wait_heap_samples(len(broker.heap_samples()) + 2, 2 * report + 30)
        alive = broker.alive()
        code = broker.stop()
        log_tail = broker.log_text()[-3000:]
    return {"samples": samples, "counts": counts, "alive": alive, "exit": code, "log": log_tail}


def slope_per_minute(samples: list[dict[str, int]], key: str = "free") -> float:
    """Least-squares slope of samples[key] against t, in bytes per minute."""
    n = len(samples)
    ts = [s["t"] for s in samples]
    ys = [s[key] for s in samples]
    mt = sum(ts) / n
    my = sum(ys) / n
    var = sum((t - mt) ** 2 for t in ts)
    if not var:
        return 0.0
    return 60 * sum((t - mt) * (y - my) for t, y in zip(ts, ys, strict=True)) / var


def verdict(result: dict[str, Any], tolerance: int = 4096) -> dict[str, Any]:
    """Check the run; a summary (raises AssertionError when the heap trends down)."""
    assert result["alive"], result["log"]
    assert result["exit"] == 0, result["log"]
    counts = result["counts"]
    assert counts["published"] > 0 and counts["churn"] > 0, counts
    samples = result["samples"]
    assert len(samples) >= 8, result["log"]
    # Every QoS 1 message reached the subscriber or was dropped and counted
    # (its session queue was full while it lagged: max_queued_messages).
    last = samples[-1]
    counts["dropped_queue_full"] = last["queue_full"]
    assert counts["received"] + last["queue_full"] >= counts["published"], counts
    steady = samples[len(samples) // 4 :]
    third = max(1, len(steady) // 3)
    first_min = min(s["free"] for s in steady[:third])
    last_min = min(s["free"] for s in steady[-third:])
    slope = slope_per_minute(steady)
    duration = steady[-1]["t"] - steady[0]["t"]
    summary = {
        "samples": len(samples),
        "duration_s": duration,
        "free_first_min": first_min,
        "free_last_min": last_min,
        "free_min": min(s["free"] for s in samples),
        "free_slope_bytes_per_min": round(slope),
        "counts": counts,
    }
    # Not trending down: the lowest free heap of the last third is within the
    # tolerance of the first third's, and over a minute or more the slope's
    # drift too. (Not the slope of a shorter run, `make test`'s 20 s: there it
    # is the churn's noise, -12,695 to +12,574 B/min in runs whose lowest
    # free heaps differed by less than 3 KB; a leak shows in `make soak`.)
    assert last_min >= first_min - tolerance, summary
    if duration >= 60:
        assert slope * duration / 60 > -tolerance, summary
    return summary

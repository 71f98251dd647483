"""PyPy: the JIT compiles the connection paths before the first client comes.

PyPy interprets a function until it has run about 1,600 times, and its
interpreter is slower than CPython's: a fresh PyPy broker's first 1,000
connects cost it 240 µs of CPU each, a warm one's 50-80 (docs/benchmarks.md,
"The connect path"; 180-210 after this warm-up). The moment a broker meets the most
connects at once is just after it starts: every client of a restarted
broker reconnects. So before the listeners open, `warm_up` runs the core
through those paths in memory: connections of both protocol levels that
connect, subscribe, publish at each QoS and acknowledge, take each other's
sessions over, disconnect or drop, through the same Turns and Driver the
shell feeds (common/turns.py, common/driver.py), on a broker of its own
with the same settings, no store, no log and no $SYS. Nothing of it is
kept: its broker is dropped, only the compiled code stays (the real
broker's objects have the same classes, so the same code serves them).

On an interpreter without a JIT (CPython) it does nothing. [server]
warm_up = false skips it (on PyPy a start-up up to BUDGET_S sooner).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from typing import Any

from common.driver import Driver
from common.mqtt import consts as C
from common.mqtt.client_packets import encode_connect, encode_subscribe
from common.mqtt.packets import Connect, Disconnect, PubAck, Publish, Subscribe, encode_packet
from common.store.storeboot import new_broker
from common.turns import Turns

# Rounds of the exercise: enough for PyPy's thresholds (1,619 runs of a
# function or loop, counters that decay) on every path it takes.
ROUNDS = 2500
# It stops sooner after this many seconds (a slow machine).
BUDGET_S = 5.0


def has_jit() -> bool:
    """Whether this interpreter compiles hot code as it runs (PyPy's JIT)."""
    return importlib.util.find_spec("pypyjit") is not None


class _Sink:
    """A connection handle that takes everything and sends nothing."""

    __slots__ = ("closed",)

    def __init__(self) -> None:
        self.closed = False

    def write(self, data: Any) -> None:
        pass

    def half_close(self) -> None:
        self.closed = True

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def pending(self) -> int:
        return 0

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def _packets(n: int, level: int) -> list[bytes]:
    """What client `n` sends in a round: CONNECT, SUBSCRIBE, a PUBLISH of each QoS, PUBREL, PUBACK."""
    cid = f"warm-{level}-{n}"
    topic = f"warm/{n % 16}"
    props = [(C.PROP_SESSION_EXPIRY_INTERVAL, 0)] if level == C.LEVEL_5 else None
    connect = Connect(level, True, 60, cid, props=props)
    return [
        encode_connect(connect, level),
        encode_subscribe(Subscribe(1, [(topic, 1)]), level),
        encode_packet(Publish(topic, b"warm-up", 0), level)
        + encode_packet(Publish(topic, b"warm-up", 1, packet_id=2), level)
        + encode_packet(Publish(topic, b"warm-up", 2, packet_id=3), level),
        encode_packet(PubAck(C.PUBREL, 3), level),
        encode_packet(PubAck(C.PUBACK, 1), level),  # its own QoS 1 copy's (the first packet id it was given)
    ]


def warm_up(settings: Any, rounds: int = ROUNDS, budget_s: float = BUDGET_S) -> tuple[int, float] | None:
    """Run the core's connection paths `rounds` times (at most `budget_s`
    seconds); (rounds run, seconds), or None without a JIT."""
    if not has_jit():
        return None
    started = time.monotonic()
    broker = new_broker(settings, os.urandom, None)
    broker.set_logger(_no_log, 100)
    clock = [0]
    driver = Driver(broker, lambda: clock[0], 0, 0)
    turns = Turns(driver)
    scripts = [_packets(n, level) for n in range(64) for level in (C.LEVEL_311, C.LEVEL_5)]
    disconnect = {level: encode_packet(Disconnect(), level) for level in (C.LEVEL_311, C.LEVEL_5)}
    buf = bytearray(1024)
    view = memoryview(buf)
    live: list[tuple[int, _Sink]] = []
    done = 0
    while done < rounds and time.monotonic() - started < budget_s:
        clock[0] += 7
        level = C.LEVEL_5 if done % 2 else C.LEVEL_311  # (as the script's: scripts alternate)
        sink = _Sink()
        cid = driver.connection_made(sink, ("127.0.0.1:1", None, True))
        for data in scripts[done % len(scripts)]:
            # As the shell reads: into one buffer, handed over as a memoryview
            # (cpython_host/epoll_hub.py; code compiled for bytes would not serve).
            n = len(data)
            buf[:n] = data
            turns.input(cid, view[:n])
            if turns.due:
                turns.end_turn()
            driver.flush()
        # It leaves politely, is dropped, or stays until a later round's
        # client with its id takes its session over.
        how = done % 4
        if how == 0:
            n = len(disconnect[level])
            buf[:n] = disconnect[level]
            turns.input(cid, view[:n])
            driver.flush()
        if how < 2:
            _lost(turns, driver, cid)
        else:
            live.append((cid, sink))
        if done % 16 == 0:
            for cid, sink in [x for x in live if x[1].closed]:
                live.remove((cid, sink))
                _lost(turns, driver, cid)
        done += 1
    for cid, _ in live:
        _lost(turns, driver, cid)
    return done, time.monotonic() - started


def _lost(turns: Turns, driver: Driver, cid: int) -> None:
    # The shell's order (server.py BrokerServer.lost).
    turns.run_now(cid)
    driver.connection_lost(cid)
    turns.forget(cid)


def _no_log(level: int, text: str) -> None:
    pass


if __name__ == "__main__":  # python -m cpython_host.warmup: how long it takes here
    from common.broker.settings import new_settings

    print(warm_up(new_settings()), file=sys.stderr)

"""Connection-heavy scenarios: a takeover storm on one client id, and the set-up
of many subscribers.

- `takeover`: `clients` worker processes open connection after connection,
  all with the SAME client id, for `duration` seconds. Every CONNECT takes
  the session over from whichever connection holds it ([MQTT-3.1.4-2]: the
  broker closes the old one): like clients that share an id by mistake and
  reconnect whenever they are thrown out. A worker connects, reads its
  CONNACK, waits for the broker to close that connection (taken over by
  another worker), closes its end and connects again at once. Figures:
  connections handled (CONNACKs received), per second of the run, and the latency from the start of the TCP connect to the
  CONNACK (p50/p90/p99): a broker that lingers over closing the old
  connection, or syncs a store on every connect, shows it here. The worker
  holding the session at the end waits out the run (counted in `held`).
- `subsetup`: `subscribers` clients, `procs` processes, `group` at a time per
  process: connect all of the group, CONNECT all, read the CONNACKs,
  SUBSCRIBE all (QoS 1, each client its own topic `bench/setup/<tag>-<p>/<n>`,
  like per-device command topics: the trie grows a leaf per subscriber),
  read the SUBACKs. Figure: the time from the first connect until the last
  SUBACK, over every process. Clients stay connected until all are set up.
"""

from __future__ import annotations

import socket
import time
from typing import Any

from . import mqtt
from .scenarios import CTX, Workers, _check, _cpu_wall, _usage, broker_cpu_seconds, hold_clients, percentiles


def takeover_worker(port: int, client_id: str, duration: float, start: Any) -> dict[str, Any]:
    start.wait(30)
    cpu0, wall0 = _cpu_wall()
    connect = mqtt.connect(client_id)
    lat: list[float] = []
    held = 0  # connections the broker did not close within the run (the last holder)
    end = wall0 + duration
    while time.monotonic() < end:
        t0 = time.monotonic()
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        s.sendall(connect)
        connack = mqtt.recv_exact(s, 4)
        lat.append((time.monotonic() - t0) * 1e6)
        if connack[0] != 0x20 or connack[3] != 0:
            raise RuntimeError(f"CONNACK refused: {connack.hex()}")
        # Taken over: the broker closes this connection (3.1.1 says nothing
        # first). Read until its EOF, then reconnect at once.
        s.settimeout(max(end - time.monotonic(), 0) + 1.0)
        try:
            while s.recv(64):
                pass
        except TimeoutError:
            held += 1
        s.close()
    return {"handled": len(lat), "held": held, "lat": lat, **_usage(cpu0, wall0)}


def takeover(
    port: int, clients: int = 8, duration: float = 10.0, pid: int | None = None, tag: str = ""
) -> dict[str, Any]:
    """`clients` processes take one client id over from each other for `duration` s."""
    tag = tag or f"{time.monotonic_ns() % 10**9}"
    w = Workers()
    start = CTX.Event()
    try:
        for _ in range(clients):
            w.start(takeover_worker, port, f"takeover-{tag}", duration, start)
        cpu_b0 = broker_cpu_seconds(pid)
        start.set()
        res = w.results(clients, duration + 60)
        cpu_b = broker_cpu_seconds(pid) - cpu_b0
        _check(res)
    finally:
        w.close()
    handled = sum(r["handled"] for r in res)
    span = max(r["wall_s"] for r in res)  # (the last holder's wait included: CPU over all of it)
    return {
        "scenario": "takeover",
        "clients": clients,
        "duration": duration,
        "handled": handled,
        "handled_per_s": round(handled / duration),
        "held": sum(r["held"] for r in res),
        "connack_us": percentiles([x for r in res for x in r["lat"]]),
        "broker_cpu": round(cpu_b / max(span, 1e-9), 3) if pid else None,
        "broker_us_per_connect": round(cpu_b * 1e6 / handled, 1) if pid and handled else None,
        "gen_cpu": {"clients": [r["cpu"] for r in res]},
    }


def subsetup(
    port: int, subscribers: int = 1000, procs: int = 4, group: int = 20, pid: int | None = None, tag: str = ""
) -> dict[str, Any]:
    """The time until `subscribers` clients are connected and subscribed."""
    tag = tag or f"{time.monotonic_ns() % 10**9}"
    res, cpu_b, span, _ = hold_clients(port, subscribers, procs, group, f"setup-{tag}", pid, f"bench/setup/{tag}")
    done = sum(r["opened"] for r in res)
    return {
        "scenario": "subsetup",
        "subscribers": done,
        "setup_s": round(span, 4),
        "broker_cpu": round(cpu_b / max(span, 1e-9), 3) if pid else None,
        "broker_us_per_subscriber": round(cpu_b * 1e6 / done, 1) if pid and done else None,
        "gen_cpu": {"clients": [r["cpu"] for r in res]},
    }

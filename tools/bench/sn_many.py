"""Many MQTT-SN clients on one host broker: what each costs, and the round
trip with all of them connected.

    python -m tools.bench.sn_many [--clients 1000] [--asleep 0.25] [--count 1000] [--python pypy3]

Starts the host broker (tools/bench/sn_rtt.py's: a plain MQTT and an MQTT-SN
listener on loopback, memory only, `max_clients` = CLIENTS) and, with hand-made
v1.2 datagrams (§5.4), one UDP socket per SN client:

1. the QoS 1 round trip of one SN client alone: PUBLISH (64 B) until the TCP
   subscriber has it and until its PUBACK, COUNT times, one at a time;
2. CLIENTS - 1 more SN clients: CONNECT (clean, Duration 600), SUBSCRIBE to a
   topic of their own (QoS 1, by name: the SUBACK gives its id), and a share
   ASLEEP of them DISCONNECT with a Duration (asleep: their sessions stay);
   the broker's RSS (VmRSS) before and after, per SN client;
3. the same round trip as 1 with all CLIENTS there, and a TCP PUBLISH QoS 1
   to one awake SN client's topic until that client has it (it PUBACKs);
4. one CONNECT over `max_clients`: it must get CONNACK 0x01 (congestion)
   and the log line that names the limit.

Prints one JSON line: RSS in KiB, round trips in ms (p50/p99), connects/s.
RSS includes what the allocator keeps, so per-client figures are upper bounds.
"""

from __future__ import annotations

import argparse
import json
import resource
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tools import procgroup
from tools.bench.mqtt import publish
from tools.bench.sn_rtt import (
    PAYLOAD,
    bench_clients,
    pct,
    read_packet,
    sn,
    sn_expect,
    sn_round_trips,
    start_broker,
)

DURATION = b"\x02\x58"  # 600 s: no keep-alive runs out during the bench


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def connect_many(udp: int, n: int, asleep: float) -> tuple[list[socket.socket], list[tuple[socket.socket, bytes]]]:
    """`n` SN clients, each SUBSCRIBEd to b/<i>; every 1/asleep-th asleep. (All sockets, the awake (socket, topic id).)"""
    every = round(1 / asleep) if asleep else 0
    socks: list[socket.socket] = []
    awake: list[tuple[socket.socket, bytes]] = []
    for i in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(10)
        s.connect(("127.0.0.1", udp))
        socks.append(s)
        sn(s, 0x04, b"\x04\x01" + DURATION + b"sn-%05d" % i)  # CONNECT clean
        code = sn_expect(s, 0x05)
        if code != b"\x00":
            raise RuntimeError(f"CONNACK 0x{code.hex()} at client {i}")
        sn(s, 0x12, b"\x20\x00\x01" + b"m/%d" % i)  # SUBSCRIBE m/<i> QoS 1
        ack = sn_expect(s, 0x13)
        if ack[5] != 0:
            raise RuntimeError(f"SUBACK refused at client {i}")
        if every and i % every == every - 1:
            sn(s, 0x18, DURATION)  # DISCONNECT with a Duration: asleep (§6.14)
            sn_expect(s, 0x18)
        else:
            awake.append((s, ack[1:3]))
    return socks, awake


def to_one(pub: socket.socket, client: socket.socket, topic: str, count: int) -> dict[str, float]:
    """TCP PUBLISH QoS 1 to `topic` until the SN `client` has it (and PUBACKs it)."""
    deliver: list[float] = []
    for i in range(1, count + 1):
        t0 = time.perf_counter()
        pub.sendall(publish(topic, PAYLOAD, 1, i & 0xFFFF or 1))
        data = client.recv(65536)
        deliver.append(time.perf_counter() - t0)
        if data[1] != 0x0C:
            raise RuntimeError(f"wanted a PUBLISH, got {data.hex()}")
        sn(client, 0x0D, data[3:7] + b"\x00")
        read_packet(pub)  # its PUBACK
    return pct(deliver)


def run(proc: Any, tcp: int, udp: int, log: Path, clients: int, asleep: float, count: int) -> dict[str, Any]:
    sub, pub, probe, topic_id = bench_clients(tcp, udp)
    out: dict[str, Any] = {"alone": sn_round_trips(probe, topic_id, sub, count)}
    time.sleep(0.5)  # (the loop idle: RSS settles)
    before = rss_kib(proc.pid)
    t0 = time.perf_counter()
    socks, awake = connect_many(udp, clients - 1, asleep)
    out["connect_subscribe_per_s"] = round((clients - 1) / (time.perf_counter() - t0))
    time.sleep(0.5)
    after = rss_kib(proc.pid)
    out["rss_kib"] = {"before": before, "after": after, "per_sn_client": round((after - before) / (clients - 1), 1)}
    out["asleep"] = clients - 1 - len(awake)
    out[f"with_{clients}"] = sn_round_trips(probe, topic_id, sub, count)
    some = awake[len(awake) // 2][0]
    out[f"tcp_to_one_of_{clients}"] = to_one(pub, some, f"m/{socks.index(some)}", count)
    extra = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    extra.settimeout(10)
    extra.connect(("127.0.0.1", udp))
    sn(extra, 0x04, b"\x04\x01" + DURATION + b"one-too-many")
    code = sn_expect(extra, 0x05)[0]
    logged = "one-too-many refused: max_clients" in log.read_text()
    out["over_max_clients"] = {"connack": code, "logged": logged}
    if code != 0x01 or not logged:
        raise RuntimeError(f"over max_clients: CONNACK 0x{code:02x}, logged: {logged}")
    for s in [*socks, extra, probe]:
        s.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=1000, help="SN clients at once (max_clients)")
    ap.add_argument("--asleep", type=float, default=0.25, help="the share of them asleep")
    ap.add_argument("--count", type=int, default=1000, help="round trips per measure")
    ap.add_argument("--python", default=sys.executable, help="the broker's interpreter")
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < args.clients + 64:  # a socket per SN client
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, args.clients + 64), hard))
    room = args.clients + 100  # the broker's own limits above max_clients (default max_sessions: 2,000)
    extra = f"max_clients = {args.clients}\n[limits]\nmax_connections = {room}\nmax_sessions = {room}\n"
    with tempfile.TemporaryDirectory() as tmp:
        proc, ports, logf = start_broker(args.python, Path(tmp), extra)
        try:
            result = run(proc, ports[0], ports[1], Path(tmp) / "log", args.clients, args.asleep, args.count)
        finally:
            procgroup.kill(proc)
            logf.close()
    print(json.dumps({"clients": args.clients, "count": args.count, "broker": args.python, **result}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""MQTT-SN beside MQTT on one host broker: sequential QoS 1 round trips.

    python -m tools.bench.sn_rtt [--count 2000] [--python pypy3]

Starts the host broker (a plain MQTT and an MQTT-SN listener on loopback,
memory only) and measures, one message at a time, 64 B payloads:

- sn->mqtt: an SN client's PUBLISH QoS 1 until a TCP subscriber has it and
  until the SN client has its PUBACK;
- tcp->mqtt: the same from a TCP MQTT 3.1.1 client (PUBLISH QoS 1, PUBACK);
- mqtt->sn: a TCP client's PUBLISH QoS 1 until the SN subscriber has it
  (the SN client PUBACKs it).

Then throughput, WINDOW QoS 1 PUBLISHes in flight, COUNT of them:
sn->mqtt (SN client to the TCP subscriber) and tcp->mqtt the same from a
TCP client, in msg/s until the subscriber has them all and every PUBACK
came.

Prints one JSON line of percentiles in ms and rates in msg/s. The datagrams are hand-made
(v1.2 §5.4), not our codec's.
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from tools import procgroup
from tools.bench.mqtt import do_subscribe, open_client, publish, recv_exact

REPO = Path(__file__).resolve().parent.parent.parent
PAYLOAD = bytes(64)


def read_packet(sock: socket.socket) -> tuple[int, bytes]:
    first = recv_exact(sock, 1)[0]
    length, mult = 0, 1
    while True:
        b = recv_exact(sock, 1)[0]
        length += (b & 0x7F) * mult
        mult *= 128
        if b < 0x80:
            break
    return first, recv_exact(sock, length)


def sn(sock: socket.socket, mtype: int, body: bytes) -> None:
    sock.send(bytes([len(body) + 2, mtype]) + body)


def sn_expect(sock: socket.socket, mtype: int) -> bytes:
    data = sock.recv(65536)
    if data[1] != mtype:
        raise RuntimeError(f"wanted 0x{mtype:02x}, got {data.hex()}")
    return data[2:]


def sn_client(
    port: int, client_id: str, host: str = "127.0.0.1", timeout: float = 10, duration: int = 60
) -> socket.socket:
    """A UDP socket whose SN client CONNECTed (clean, `duration` s) and got CONNACK accepted."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(timeout)
    s.connect((host, port))
    sn(s, 0x04, b"\x04\x01" + duration.to_bytes(2, "big") + client_id.encode())  # CONNECT clean
    if sn_expect(s, 0x05) != b"\x00":
        raise RuntimeError("CONNACK refused")
    return s


def pct(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    return {p: round(s[min(len(s) - 1, int(len(s) * q))] * 1000, 3) for p, q in (("p50", 0.5), ("p99", 0.99))}


def sn_round_trips(snc: socket.socket, topic_id: bytes, sub: socket.socket, count: int) -> dict[str, Any]:
    """`count` SN PUBLISH QoS 1, one at a time: until the TCP subscriber has it, until its PUBACK."""
    deliver: list[float] = []
    acked: list[float] = []
    for i in range(1, count + 1):
        t0 = time.perf_counter()
        sn(snc, 0x0C, b"\x20" + topic_id + (i & 0xFFFF or 1).to_bytes(2, "big") + PAYLOAD)
        read_packet(sub)
        deliver.append(time.perf_counter() - t0)
        if sn_expect(snc, 0x0D)[4] != 0:
            raise RuntimeError("PUBACK refused")
        acked.append(time.perf_counter() - t0)
    return {"delivered": pct(deliver), "puback": pct(acked)}


WINDOW = 32  # QoS 1 PUBLISHes in flight in the throughput runs


def drain_sub(sub: socket.socket, n: int) -> None:
    """Read `n` PUBLISHes (QoS 0 subscription) from the TCP subscriber."""
    for _ in range(n):
        read_packet(sub)


def throughput(sub: socket.socket, send: Any, ack: Any, count: int) -> float:
    """msg/s: `count` messages, WINDOW in flight (`send(i)`, `ack()` waits one PUBACK)."""
    t0 = time.perf_counter()
    done = threading.Thread(target=drain_sub, args=(sub, count))
    done.start()
    for i in range(1, count + 1):
        if i > WINDOW:
            ack()
        send(i & 0xFFFF or 1)
    for _ in range(min(WINDOW, count)):
        ack()
    done.join()
    return round(count / (time.perf_counter() - t0))


def bench_clients(tcp: int, udp: int) -> tuple[socket.socket, socket.socket, socket.socket, bytes]:
    """The TCP subscriber to b/#, a TCP publisher, an SN client with b/sn REGISTERed, its topic id."""
    sub = open_client(tcp, "bench-sub")
    do_subscribe(sub, "b/#", 0)
    pub = open_client(tcp, "bench-pub")
    snc = sn_client(udp, "bench-sn")
    sn(snc, 0x0A, b"\x00\x00\x00\x01b/sn")  # REGISTER
    return sub, pub, snc, sn_expect(snc, 0x0B)[0:2]


def run(tcp: int, udp: int, count: int) -> dict[str, Any]:
    sub, pub, snc, topic_id = bench_clients(tcp, udp)
    out: dict[str, Any] = {"sn->mqtt": sn_round_trips(snc, topic_id, sub, count)}
    deliver: list[float] = []
    acked: list[float] = []
    for i in range(1, count + 1):
        t0 = time.perf_counter()
        pub.sendall(publish("b/tcp", PAYLOAD, 1, i & 0xFFFF or 1))
        read_packet(sub)
        deliver.append(time.perf_counter() - t0)
        read_packet(pub)
        acked.append(time.perf_counter() - t0)
    out["tcp->mqtt"] = {"delivered": pct(deliver), "puback": pct(acked)}
    rates = {
        "sn->mqtt": throughput(
            sub,
            lambda i: sn(snc, 0x0C, b"\x20" + topic_id + i.to_bytes(2, "big") + PAYLOAD),
            lambda: sn_expect(snc, 0x0D),
            count,
        ),
        "tcp->mqtt": throughput(
            sub, lambda i: pub.sendall(publish("b/tcp", PAYLOAD, 1, i)), lambda: read_packet(pub), count
        ),
    }
    sn(snc, 0x12, b"\x20\x00\x02d/+")  # SUBSCRIBE d/+ QoS 1
    sn_expect(snc, 0x13)
    deliver = []
    for i in range(1, count + 1):
        t0 = time.perf_counter()
        pub.sendall(publish("d/x", PAYLOAD, 1, i & 0xFFFF or 1))
        data = snc.recv(65536)
        if data[1] == 0x0A:  # the gateway's REGISTER first (§6.10)
            sn(snc, 0x0B, data[2:6] + b"\x00")
            data = snc.recv(65536)
        deliver.append(time.perf_counter() - t0)
        sn(snc, 0x0D, data[3:7] + b"\x00")  # PUBACK: topic id, msg id
        read_packet(pub)
    out["mqtt->sn"] = {"delivered": pct(deliver)}
    return {"round_trip_ms": out, "msg_per_s": rates}


def start_broker(python: str, tmp: Path, extra: str = "") -> tuple[subprocess.Popen[bytes], list[int], Any]:
    """The host broker on loopback, memory only: a plain MQTT and an MQTT-SN
    listener (`extra`: more lines of the SN listener's table, then other
    tables); (process, [tcp port, udp port], its log file, to close)."""
    cfg = tmp / "sn.toml"
    cfg.write_text(
        '[server]\nwarm_up = false\n[[listener]]\nport = 0\n[[listener]]\nprotocol = "mqtt-sn"\nport = 0\n' + extra
    )
    log = tmp / "log"
    logf = log.open("wb")
    proc = procgroup.spawn(
        [python, "-m", "cpython_host", "--config", str(cfg)], cwd=REPO, stdout=logf, stderr=subprocess.STDOUT
    )
    ports: list[int] = []
    deadline = time.monotonic() + 20
    while len(ports) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
        ports = [int(p) for p in re.findall(r"listening on [0-9.]+:(\d+)", log.read_text())]
    if len(ports) < 2:
        procgroup.kill(proc)
        logf.close()
        raise RuntimeError("the broker did not start: " + log.read_text())
    return proc, ports, logf


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--python", default=sys.executable, help="the broker's interpreter")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        proc, ports, logf = start_broker(args.python, Path(tmp))
        try:
            result = run(ports[0], ports[1], args.count)
        finally:
            procgroup.kill(proc)
            logf.close()
    print(json.dumps({"count": args.count, "broker": args.python, "window": WINDOW, **result}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

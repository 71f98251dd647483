"""Connection churn vs. a bystander: does a storm of connects hurt other clients?

    python -m tools.churn                          built-in defaults, no store
    python -m tools.churn --config boards/linux.toml --data-dir
    python -m tools.churn --event-loop asyncio --connects 2000 --takeovers 2000
    python -m tools.churn --broker mosquitto       the same storms against Mosquitto

Theory of operation
-------------------
The broker runs as its own process (`python -m cpython_host`, as a user
starts it). A bystander, in another process so that neither the storm's
CPU nor its event loop is in its way, publishes a QoS 1 message to its own
subscription every `--interval` ms, whatever happened to the previous ones
(open loop: a broker that stalls for 300 ms delays every message sent in
those 300 ms, so the stall weighs in the percentiles as long as it lasted),
and times each from its PUBLISH to its delivery back. Meanwhile this
process, on one event loop, runs two storms:

  connect    `--connects` clients open TCP connections and send CONNECT all
             at once, each with its own client id; every one must be
             answered: CONNACK 0x00, or beyond max_connections a refusal
             (3.1.1 0x03, v5 0x89) or a close without CONNACK (the
             documented answer once the few refusal slots are taken).
             Then they all DISCONNECT.
  takeover   `--takeovers` connections, `--parallel` opening at a time,
             all with ONE client id and a persistent session (3.1.1 clean
             session 0, v5 Session Expiry 300 s): each must get CONNACK
             0x00 and then lose its connection to the next [MQTT-3.1.4-2]
             (v5: DISCONNECT 0x8E session taken over first); exactly one
             is left connected at the end.

Clients alternate between MQTT 3.1.1 and 5 (`--level` picks one). The
bystander's latencies are reported per phase (baseline, connect: until
every storm client is answered, disconnect: until they are all gone,
takeover, after; p50, p99, max, and about how many messages were not back
in time), with the storms' rates and the broker's open file descriptors
before and after (a leaked connection keeps its socket). The
exit code is 1 if a storm client got a wrong answer, the bound is missed
(`--bound-ms`, 100 by default, on the p99) or a descriptor leaked.

tests/host/test_server_churn.py runs the same code, smaller, in `make test`
(every check but the bound); tests/soak/test_timing_bounds.py holds
the bound in `make soak`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import resource
import select
import socket
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cpython_host import compat
from tools.bench import mqtt
from tools.bench.brokers import REPO_ROOT, BrokerProc, Mosquitto, siskin_python

SHARED_ID = "churn-shared"
BYSTANDER_TOPIC = "churn/bystander"
_STAMP = struct.Struct(">Q")


# ---------------------------------------------------------------- packets


def connect_packet(client_id: str, level: int, clean: bool, expiry: int = 0) -> bytes:
    """A CONNECT of MQTT 3.1.1 (level 4) or 5; v5 with a Session Expiry Interval if `expiry`."""
    flags = 0x02 if clean else 0
    props = b""
    if level == 5:
        p = b"\x11" + expiry.to_bytes(4, "big") if expiry else b""
        props = mqtt.vbi(len(p)) + p
    body = mqtt.mqtt_str("MQTT") + bytes([level, flags]) + (0).to_bytes(2, "big") + props + mqtt.mqtt_str(client_id)
    return b"\x10" + mqtt.vbi(len(body)) + body


def disconnect_packet(level: int) -> bytes:
    return b"\xe0\x01\x00" if level == 5 else mqtt.DISCONNECT


# --------------------------------------------------------------- bystander


def bystander(port: int, interval_ms: float, conn: Any) -> None:
    """Publish QoS 1 to its own subscription every `interval_ms`; time each delivery.

    Runs in its own process. Sends "ready" on `conn` once subscribed; on
    "stop" sends back (samples, sent), samples being (send ns, latency ns)
    of every message that came back.
    """
    sock = mqtt.open_client(port, f"bystander-{os.getpid()}")
    mqtt.do_subscribe(sock, BYSTANDER_TOPIC, 1)
    sock.setblocking(False)
    conn.send("ready")
    samples: list[tuple[int, int]] = []
    sent = 0
    buf = bytearray()
    packets: list[tuple[int, int, int]] = []
    period = int(interval_ms * 1e6)
    next_at = time.monotonic_ns()
    pid = 0
    while True:
        now = time.monotonic_ns()
        if now >= next_at:
            pid = pid % 65535 + 1
            sock.sendall(mqtt.publish(BYSTANDER_TOPIC, _STAMP.pack(now), 1, pid))
            sent += 1
            next_at += period
            if next_at < now:  # this process was not scheduled: no burst to catch up
                next_at = now + period
        wait = max(next_at - time.monotonic_ns(), 0) / 1e9
        readable, _, _ = select.select([sock, conn], [], [], wait)
        if conn in readable and conn.recv() == "stop":
            break
        if sock not in readable:
            continue
        try:
            chunk = sock.recv(65536)
        except BlockingIOError:
            continue
        if not chunk:
            raise ConnectionError("the broker closed the bystander's connection")
        buf += chunk
        del packets[:]
        used = mqtt.parse(buf, 0, packets)
        got = time.monotonic_ns()
        acks = []
        for first, start, _end in packets:
            if first & 0xF0 != 0x30:
                continue  # the PUBACKs for its own PUBLISHes
            n = int.from_bytes(buf[start : start + 2], "big")
            i = start + 2 + n
            if first & 0x06:
                acks.append(mqtt.ack(mqtt.PUBACK, int.from_bytes(buf[i : i + 2], "big")))
                i += 2
            stamp = _STAMP.unpack_from(buf, i)[0]
            samples.append((stamp, got - stamp))
        del buf[:used]
        if acks:
            sock.setblocking(True)
            sock.sendall(b"".join(acks))
            sock.setblocking(False)
    sock.setblocking(True)
    sock.sendall(mqtt.DISCONNECT)
    sock.close()
    conn.send((samples, sent))


class Bystander:
    """The bystander process, started and stopped from this one."""

    def __init__(self, port: int, interval_ms: float) -> None:
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=bystander, args=(port, interval_ms, child), daemon=True)
        self.proc.start()
        if not self.conn.poll(30) or self.conn.recv() != "ready":
            self.proc.kill()
            raise RuntimeError("the bystander did not connect and subscribe")

    def stop(self) -> tuple[list[tuple[int, int]], int]:
        """Every (send ns, latency ns) and the number of messages sent."""
        self.conn.send("stop")
        if not self.conn.poll(30):
            self.proc.kill()
            raise RuntimeError("the bystander did not stop")
        result: tuple[list[tuple[int, int]], int] = self.conn.recv()
        self.proc.join(10)
        return result


def latency_stats(samples: list[tuple[int, int]], sent_in: int, t0: float, t1: float) -> dict[str, Any]:
    """p50/p99/max (ms) of the deliveries of messages sent in [t0, t1] (monotonic s)."""
    lo, hi = int(t0 * 1e9), int(t1 * 1e9)
    ms = sorted(lat / 1e6 for stamp, lat in samples if lo <= stamp <= hi)
    if not ms:
        return {"n": 0, "lost": sent_in, "p50": None, "p99": None, "max": None}

    def pick(q: float) -> float:
        return round(ms[min(len(ms) - 1, int(q * len(ms)))], 2)

    return {
        "n": len(ms),
        "lost": max(sent_in - len(ms), 0),
        "p50": pick(0.5),
        "p99": pick(0.99),
        "max": round(ms[-1], 2),
    }


# ------------------------------------------------------------ storm clients


class StormClient(asyncio.Protocol):
    """One storm connection: sends its CONNECT, notes what comes back."""

    def __init__(self, packet: bytes, level: int) -> None:
        self.packet = packet
        self.level = level
        self.transport: Any = None
        self.buf = bytearray()
        self.connack: bytes | None = None  # (flags, code)
        self.disconnect: int | None = None  # v5 DISCONNECT reason code
        self.other: list[int] = []  # first bytes of anything else
        self.answered = asyncio.get_running_loop().create_future()  # CONNACK or close
        self.closed = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        transport.write(self.packet)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        packets: list[tuple[int, int, int]] = []
        used = mqtt.parse(self.buf, 0, packets)
        for first, start, end in packets:
            if first == 0x20 and self.connack is None:
                self.connack = bytes(self.buf[start : start + 2])
                if not self.answered.done():
                    self.answered.set_result(True)
                if self.connack[1]:
                    self.transport.close()  # refused: gone, as a real client goes
            elif first == 0xE0:
                self.disconnect = self.buf[start] if end > start else 0
            else:
                self.other.append(first)
        del self.buf[:used]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.answered.done():
            self.answered.set_result(False)
        if not self.closed.done():
            self.closed.set_result(True)

    def code(self) -> int | None:
        return None if self.connack is None else self.connack[1]


async def _open(port: int, packet: bytes, level: int) -> StormClient | str:
    loop = asyncio.get_running_loop()
    try:
        _, client = await loop.create_connection(lambda: StormClient(packet, level), "127.0.0.1", port)
    except OSError as e:
        return type(e).__name__
    return client


async def connect_storm(
    port: int,
    count: int,
    levels: tuple[int, ...],
    phases: list[tuple[str, float, float]],
    persistent: bool = False,
    timeout: float = 60,
) -> dict[str, Any]:
    """`count` clients CONNECT at once; every answer, then all DISCONNECT.

    `persistent`: each with a persistent session (3.1.1 clean session 0, v5
    Session Expiry 300 s), as after a gateway restart; else clean ones.
    Appends the phases "connect" (until every client is answered) and
    "disconnect" (until the broker closed them all) to `phases`."""
    t0 = time.monotonic()
    opened = await asyncio.gather(
        *(
            _open(
                port,
                connect_packet(f"churn-{i}", levels[i % len(levels)], not persistent, 300 if persistent else 0),
                levels[i % len(levels)],
            )
            for i in range(count)
        )
    )
    clients = [c for c in opened if isinstance(c, StormClient)]
    errors: dict[str, int] = {}
    for c in opened:
        if isinstance(c, str):
            errors[c] = errors.get(c, 0) + 1
    if clients:
        await asyncio.wait([c.answered for c in clients], timeout=timeout)
    t1 = time.monotonic()
    phases.append(("connect", t0, t1))
    answers: dict[str, int] = {}
    for c in clients:
        if c.connack is not None:
            key = f"v{c.level if c.level == 5 else 3} 0x{c.code():02x}"
        elif c.answered.done():
            key = "closed without CONNACK"
        else:
            key = "no answer"
        answers[key] = answers.get(key, 0) + 1
    accepted = [c for c in clients if c.code() == 0]
    for c in clients:
        if c.code() == 0:
            c.transport.write(disconnect_packet(c.level))
        if c.transport is not None:
            c.transport.close()
    if clients:
        await asyncio.wait([c.closed for c in clients], timeout=timeout)
    phases.append(("disconnect", t1, time.monotonic()))
    wrong = _wrong_connect_answers(clients, answers)
    return {
        "clients": count,
        "accepted": len(accepted),
        "answers": dict(sorted(answers.items())),
        "tcp_errors": errors,
        "answered_in_s": round(t1 - t0, 3),
        "connects_per_s": round(len(accepted) / max(t1 - t0, 1e-9)),
        "answers_per_s": round(sum(answers.values()) / max(t1 - t0, 1e-9)),
        "wrong": wrong,
    }


def _wrong_connect_answers(clients: list[StormClient], answers: dict[str, int]) -> list[str]:
    wrong = []
    if answers.get("no answer"):
        wrong.append(f"{answers['no answer']} clients got no answer")
    for c in clients:
        code = c.code()
        if code is None:
            continue
        ok = (0x00, 0x89) if c.level == 5 else (0x00, 0x03)
        if code not in ok:
            wrong.append(f"v{c.level} CONNACK 0x{code:02x}")
    return sorted(set(wrong))


async def takeover_storm(
    port: int, count: int, parallel: int, levels: tuple[int, ...], timeout: float = 60
) -> dict[str, Any]:
    """`count` connections with one client id, `parallel` opening at a time."""
    clients: list[StormClient] = []
    errors: dict[str, int] = {}
    next_i = [0]

    async def worker() -> None:
        while next_i[0] < count:
            i = next_i[0]
            next_i[0] += 1
            level = levels[i % len(levels)]
            c = await _open(port, connect_packet(SHARED_ID, level, False, 300), level)
            if isinstance(c, str):
                errors[c] = errors.get(c, 0) + 1
                continue
            clients.append(c)
            await asyncio.wait_for(c.answered, timeout)

    t0 = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(parallel)))
    t1 = time.monotonic()
    # Every one but the last to be accepted is taken over: wait for their closes.
    deadline = time.monotonic() + timeout
    while sum(1 for c in clients if not c.closed.done()) > 1 and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    survivors = [c for c in clients if not c.closed.done()]
    wrong = []
    codes: dict[str, int] = {}
    for c in clients:
        key = "closed without CONNACK" if c.connack is None else f"0x{c.connack[1]:02x}"
        codes[key] = codes.get(key, 0) + 1
        if c.connack != b"\x01\x00" and c.connack != b"\x00\x00":
            wrong.append(f"CONNACK {c.connack!r}")
        if c.other:
            wrong.append(f"unexpected packets {c.other}")
        if c in survivors:
            continue
        if c.level == 5 and c.disconnect != 0x8E:
            wrong.append(f"v5 taken over with DISCONNECT {c.disconnect!r}, not 0x8e")  # [MQTT-3.1.4-2]
        if c.level == 4 and c.disconnect is not None:
            wrong.append("3.1.1 client got a DISCONNECT")
    if len(survivors) != 1:
        wrong.append(f"{len(survivors)} connections left connected, not 1")
    for c in survivors:
        c.transport.write(disconnect_packet(c.level))
        c.transport.close()
    if survivors:
        await asyncio.wait([c.closed for c in survivors], timeout=timeout)
    taken = sum(1 for c in clients if c.level == 5 and c.disconnect == 0x8E)
    return {
        "connections": count,
        "parallel": parallel,
        "connack": dict(sorted(codes.items())),
        "session_present": sum(1 for c in clients if c.connack == b"\x01\x00"),
        "v5_disconnect_0x8e": taken,
        "tcp_errors": errors,
        "took_s": round(t1 - t0, 3),
        "takeovers_per_s": round(len(clients) / max(t1 - t0, 1e-9)),
        "wrong": sorted(set(wrong)),
    }


def session_present(port: int, client_id: str) -> bool:
    """Resume `client_id`'s persistent 3.1.1 session: True if the broker still holds it."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        sock.sendall(connect_packet(client_id, 4, False))
        connack = mqtt.recv_exact(sock, 4)
        sock.sendall(mqtt.DISCONNECT)
    finally:
        sock.close()
    if connack[0] != 0x20 or connack[3] != 0:
        raise RuntimeError(f"CONNACK {connack.hex()} resuming {client_id}")
    return connack[2] == 1


# ------------------------------------------------------------------ brokers


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def wait_fds(pid: int, target: int, timeout: float) -> int:
    """Poll the broker's open descriptors until at most `target`; the last count."""
    deadline = time.monotonic() + timeout
    while True:
        n = open_fds(pid)
        if n <= target or time.monotonic() > deadline:
            return n
        time.sleep(0.05)


class SiskinProc(BrokerProc):
    """`python -m cpython_host` as a user runs it: a config file or none, a store or none."""

    name = "siskin"

    def __init__(self, workdir: Path, config: str | None, data_dir: bool, loop: str, log_level: str) -> None:
        super().__init__(workdir)
        self.config = config
        self.data_dir = workdir / "data" if data_dir else None
        self.loop = loop
        self.log_level = log_level

    def command(self) -> list[str]:
        cmd = [siskin_python(), "-m", "cpython_host", "--host", "127.0.0.1", "--port", str(self.port)]
        if self.config:
            cmd += ["--config", self.config]
        if self.data_dir:
            cmd += ["--data-dir", str(self.data_dir)]
        return [*cmd, "--event-loop", self.loop, "--log-level", self.log_level]

    def version(self) -> str:
        return f"siskin ({self.loop}, {'--config ' + self.config if self.config else 'built-in defaults'})"


# --------------------------------------------------------------------- run


def raise_nofile(want: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def run(
    port: int,
    pid: int,
    connects: int,
    takeovers: int,
    parallel: int,
    levels: tuple[int, ...],
    interval_ms: float,
    persistent: bool = False,
    settle: float = 1.0,
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
) -> dict[str, Any]:
    """Both storms against the broker on `port` (process `pid`), with a bystander; the figures."""
    by = Bystander(port, interval_ms)
    time.sleep(0.2)  # its first messages out of the way
    fds0 = open_fds(pid)
    phases: list[tuple[str, float, float]] = []
    results: dict[str, Any] = {}

    async def storms() -> None:
        t = time.monotonic()
        await asyncio.sleep(settle)
        phases.append(("baseline", t, time.monotonic()))
        if connects:
            results["connect"] = await connect_storm(port, connects, levels, phases, persistent)
            results["connect"]["fds_after"] = await asyncio.to_thread(wait_fds, pid, fds0, 10)
        if takeovers:
            t = time.monotonic()
            results["takeover"] = await takeover_storm(port, takeovers, parallel, levels)
            phases.append(("takeover", t, time.monotonic()))
            results["takeover"]["fds_after"] = await asyncio.to_thread(wait_fds, pid, fds0, 10)
            results["takeover"]["session_kept"] = await asyncio.to_thread(session_present, port, SHARED_ID)
        t = time.monotonic()
        await asyncio.sleep(settle)
        phases.append(("after", t, time.monotonic()))

    try:
        compat.run(storms(), loop_factory)
    finally:
        samples, _sent = by.stop()
    interval_s = interval_ms / 1000
    latency = {}
    for name, t0, t1 in phases:
        sent_in = int((t1 - t0) / interval_s)  # about; "lost" is a hint, n is exact
        latency[name] = latency_stats(samples, sent_in, t0, t1)
    results["bystander_ms"] = latency
    results["fds_before"] = fds0
    return results


def client_loop() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def failures(res: dict[str, Any], bound_ms: float | None) -> list[str]:
    """What in a run's figures breaks the promise (empty: none); the bystander's
    p99 is held to `bound_ms` unless None (a figure then, not a verdict)."""
    out = []
    fds0 = res["fds_before"]
    for storm in ("connect", "takeover"):
        r = res.get(storm)
        if r is None:
            continue
        out += [f"{storm}: {w}" for w in r["wrong"]]
        if r["tcp_errors"]:
            out.append(f"{storm}: TCP errors {r['tcp_errors']}")
        if r["fds_after"] > fds0:
            out.append(f"{storm}: broker holds {r['fds_after'] - fds0} more descriptors than before")
    for phase, lat in res["bystander_ms"].items() if bound_ms is not None else ():
        if lat["p99"] is None or lat["p99"] >= bound_ms:
            out.append(f"{phase}: bystander p99 {lat['p99']} ms, bound {bound_ms} ms")
    if "takeover" in res and not res["takeover"]["session_kept"]:
        out.append("takeover: the shared client id's session is gone")
    return out


def report(label: str, res: dict[str, Any]) -> str:
    lines = [f"== {label}"]
    for name, lat in res["bystander_ms"].items():
        lines.append(
            f"  bystander {name:9s} n={lat['n']:5d}  p50 {lat['p50']} ms  p99 {lat['p99']} ms  max {lat['max']} ms"
            + (f"  (~{lat['lost']} not back)" if lat["lost"] > 2 else "")
        )
    if "connect" in res:
        c = res["connect"]
        lines.append(
            f"  connect storm: {c['clients']} clients, answered in {c['answered_in_s']} s "
            f"({c['connects_per_s']} accepted/s, {c['answers_per_s']} answers/s): {c['answers']}"
            + (f" TCP errors {c['tcp_errors']}" if c["tcp_errors"] else "")
        )
    if "takeover" in res:
        t = res["takeover"]
        lines.append(
            f"  takeover storm: {t['connections']} connections x1 client id, {t['parallel']} at a time, "
            f"{t['took_s']} s ({t['takeovers_per_s']}/s); CONNACK {t['connack']}, session present "
            f"{t['session_present']}, v5 DISCONNECT 0x8E {t['v5_disconnect_0x8e']}; session kept: {t['session_kept']}"
        )
    fds = [res[s]["fds_after"] for s in ("connect", "takeover") if s in res]
    lines.append(f"  broker descriptors: {res['fds_before']} before, {fds} after each storm")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tools.churn",
        description=__doc__.split("Theory of operation")[0].strip(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Prints one block of figures per run; --json adds one JSON line each. Exit 1 if a check fails.",
    )
    p.add_argument(
        "--broker",
        choices=("siskin", "mosquitto"),
        default="siskin",
        help="the broker under test (mosquitto: /usr/sbin/mosquitto, persistence false, as tools/bench starts it)",
    )
    p.add_argument("--config", metavar="FILE", help="the broker's --config (default: none, the built-in defaults)")
    p.add_argument(
        "--data-dir", action="store_true", help="give the broker a store (--data-dir in a temporary directory)"
    )
    p.add_argument("--event-loop", choices=("uvloop", "asyncio"), default="uvloop", help="the broker's event loop")
    p.add_argument("--log-level", default="info", help="the broker's log level (default info, as a user runs it)")
    p.add_argument("--connects", type=int, default=2000, metavar="N", help="clients in the connect storm (0: skip it)")
    p.add_argument(
        "--takeovers", type=int, default=2000, metavar="N", help="connections in the takeover storm (0: skip)"
    )
    p.add_argument("--parallel", type=int, default=8, metavar="K", help="takeover connections opening at a time")
    p.add_argument(
        "--persistent",
        action="store_true",
        help="connect storm clients ask for persistent sessions (a restart's reconnect)",
    )
    p.add_argument("--level", choices=("4", "5", "both"), default="both", help="MQTT level of the storm clients")
    p.add_argument("--interval", type=float, default=2.0, metavar="MS", help="the bystander's publish interval (ms)")
    p.add_argument("--bound-ms", type=float, default=100.0, metavar="MS", help="the bystander's p99 bound")
    p.add_argument("--json", action="store_true", help="also print the figures as one JSON line")
    args = p.parse_args(argv)
    raise_nofile(max(4 * (args.connects + args.parallel), 4096))
    levels = (4, 5) if args.level == "both" else (int(args.level),)
    workdir = Path(tempfile.mkdtemp(prefix="siskin-churn-"))
    broker: BrokerProc
    if args.broker == "mosquitto":
        if args.data_dir or args.config:
            p.error("--data-dir and --config are Siskin's")
        broker = Mosquitto(workdir)
        label = "mosquitto (persistence false)"
    else:
        config = str(REPO_ROOT / args.config) if args.config and not os.path.isabs(args.config) else args.config
        broker = SiskinProc(workdir, config, args.data_dir, args.event_loop, args.log_level)
        label = broker.version() + (", --data-dir" if args.data_dir else ", no store")
    broker.start()
    try:
        res = run(
            broker.port,
            broker.pid,
            args.connects,
            args.takeovers,
            args.parallel,
            levels,
            args.interval,
            args.persistent,
            loop_factory=client_loop(),
        )
    finally:
        broker.stop()
    print(report(label, res))
    bad = failures(res, args.bound_ms)
    for line in bad:
        print(f"  FAIL {line}")
    if args.json:
        print(json.dumps({"broker": label, **res}))
    print(f"  (broker log: {broker.log_path})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

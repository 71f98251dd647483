"""Durable sessions: fan-in to a persistent subscriber, with and without a store.

The scenario is fan-in (tools/bench/scenarios.py: 4 publishers -> 1
subscriber, flow-controlled batches, everything acknowledged) at QoS 1 or 2,
with a subscriber whose session outlives its connection:

    durable_v3_qos1/2   MQTT 3.1.1, clean session 0
    durable_v5_qos1/2   MQTT 5, Clean Start 1 and Session Expiry Interval 3600 s

Every message then belongs to a persistent session, so a broker with a store
must make it durable before it acknowledges the publisher. The same scenario
runs against:

    siskin, siskin-uvloop,         no --data-dir: nothing stored
    siskin-pypy
    siskin-store,                  --data-dir in the bench's work dir,
    siskin-uvloop-store,           [limits] store_sync = "always"
    siskin-pypy-store
    mosquitto                      persistence false
    mosquitto-persist              persistence true, persistence_location in
                                   the work dir. Mosquitto only snapshots its
                                   state (every autosave_interval, 1800 s by
                                   default, and at shutdown): nothing is
                                   durable per message, a kill -9 loses
                                   everything since the last snapshot.

The stored brokers only run these scenarios (the others measure nothing a
store changes).

fsyncs per message: the stored brokers run under
`strace -f -qq --seccomp-bpf -e trace=fsync,fdatasync -o FILE`: only those
two system calls stop the process (seccomp filter), each one writes a line,
and the lines written during a scenario divided by the messages sent is the
figure (every fsync of the process: the store's syncs, its compactions and
directory syncs). Without strace the figure is left out (None).

After each run the subscriber's session is ended (a clean connect), so no
later scenario routes to it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

from . import brokers, mqtt, scenarios

STRACE = shutil.which("strace")
SESSION_EXPIRY = 3600

# The scenarios (name -> (protocol level, QoS)), in the order they run.
STEPS = {
    "durable_v3_qos1": (4, 1),
    "durable_v3_qos2": (4, 2),
    "durable_v5_qos1": (5, 1),
    "durable_v5_qos2": (5, 2),
}

# A broker with persistence on -> the same broker without it.
STORED = {
    "siskin-store": "siskin",
    "siskin-uvloop-store": "siskin-uvloop",
    "siskin-pypy-store": "siskin-pypy",
    "mosquitto-persist": "mosquitto",
}

# broker pid -> the strace output that counts its fsyncs
_FSYNC_LOGS: dict[int, Path] = {}

# Rows of tools/bench/__main__.py's table (its Figure layout).
FIGURES = [
    (
        f"durable {'3.1.1' if level == 4 else 'v5'} QoS {qos}, 4→1 persistent",
        name,
        ("msg_per_s",),
        "msg/s",
        True,
        "",
        "",
    )
    for name, (level, qos) in STEPS.items()
]


# ------------------------------------------------------------------ packets


def connect(client_id: str, level: int, clean: bool, expiry: int) -> bytes:
    """CONNECT: 3.1.1 (clean session flag) or 5 (Clean Start, Session Expiry Interval)."""
    flags = bytes([0x02 if clean else 0])
    if level == 4:
        body = mqtt.mqtt_str("MQTT") + bytes([4]) + flags + b"\0\0" + mqtt.mqtt_str(client_id)
    else:
        props = b"\x11" + expiry.to_bytes(4, "big") if expiry else b""
        body = mqtt.mqtt_str("MQTT") + bytes([5]) + flags + b"\0\0" + mqtt.vbi(len(props)) + props
        body += mqtt.mqtt_str(client_id)
    return b"\x10" + mqtt.vbi(len(body)) + body


def read_packet(sock: socket.socket) -> bytes:
    """One whole packet (fixed header included)."""
    head = mqtt.recv_exact(sock, 2)
    length = head[1] & 0x7F
    mult = 128
    more = head[1] & 0x80
    raw = bytearray(head)
    while more:
        b = mqtt.recv_exact(sock, 1)[0]
        raw.append(b)
        length += (b & 0x7F) * mult
        mult *= 128
        more = b & 0x80
    return bytes(raw) + mqtt.recv_exact(sock, length)


def open_session(port: int, client_id: str, level: int, clean: bool, expiry: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(connect(client_id, level, clean, expiry))
    connack = read_packet(sock)
    if connack[0] != 0x20 or connack[3] != 0:
        raise RuntimeError(f"CONNACK refused for {client_id}: {connack.hex()}")
    return sock


def persistent_opener(level: int) -> scenarios.Opener:
    """scenarios.fan_in's subscriber opener: a persistent session, subscribed."""

    def opener(port: int, client_id: str, topic_filter: str, qos: int) -> socket.socket:
        # 3.1.1: clean session 0 resumes what an earlier run left, so that is ended first.
        end_session(port, client_id, level)
        sock = open_session(port, client_id, level, level == 5, SESSION_EXPIRY)
        props = b"\0" if level == 5 else b""
        body = (1).to_bytes(2, "big") + props + mqtt.mqtt_str(topic_filter) + bytes([qos])
        sock.sendall(b"\x82" + mqtt.vbi(len(body)) + body)
        suback = read_packet(sock)
        if suback[0] != 0x90 or suback[-1] >= 0x80:
            raise RuntimeError(f"SUBACK refused for {topic_filter}: {suback.hex()}")
        return sock

    return opener


def end_session(port: int, client_id: str, level: int) -> None:
    """Connect clean (v5: Session Expiry 0) and disconnect: the session is gone."""
    sock = open_session(port, client_id, level, True, 0)
    sock.sendall(mqtt.DISCONNECT)
    sock.close()


# ------------------------------------------------------------------ scenario


def fsyncs(pid: int | None) -> int | None:
    """fsync + fdatasync calls so far of a broker run under strace (None: not counted)."""
    path = _FSYNC_LOGS.get(pid or 0)
    if path is None:
        return None
    with path.open(errors="replace") as f:
        return sum(1 for line in f if "fsync(" in line or "fdatasync(" in line)


def durable(
    port: int, level: int, qos: int, duration: float, idle: float, pid: int | None = None, tag: str = ""
) -> dict[str, Any]:
    """fan_in to a persistent subscriber; adds fsyncs and fsyncs per message."""
    tag = tag or f"{os.getpid()}-{os.urandom(3).hex()}"
    before = fsyncs(pid)
    res = scenarios.fan_in(port, qos, duration=duration, idle=idle, pid=pid, tag=tag, opener=persistent_opener(level))
    after = fsyncs(pid)
    end_session(port, f"fi-sub-{tag}", level)
    res["scenario"] = f"durable_v{3 if level == 4 else 5}_qos{qos}"
    res["protocol"] = level
    res["fsyncs"] = None if before is None or after is None else after - before
    res["fsyncs_per_msg"] = round(res["fsyncs"] / res["sent"], 4) if res["fsyncs"] is not None and res["sent"] else None
    return res


def retained_publish(port: int, count: int, pid: int | None = None, tag: str = "") -> dict[str, Any]:
    """scenarios.retained_publish; adds fsyncs per message (a stored broker under strace)."""
    before = fsyncs(pid)
    res = scenarios.retained_publish(port, count, pid=pid, tag=tag)
    after = fsyncs(pid)
    res["fsyncs_per_msg"] = None if before is None or after is None else round((after - before) / count, 4)
    return res


def steps(duration: float, idle: float) -> list[tuple[str, Any]]:
    """tools/bench/__main__.py plan() entries: (name, run(port, pid, tag))."""

    def one(level: int, qos: int) -> Any:
        return lambda port, pid, tag: durable(port, level, qos, duration, idle, pid, tag)

    return [(name, one(level, qos)) for name, (level, qos) in STEPS.items()]


def applies(step: str, broker: str) -> bool:
    """A stored broker runs the durable scenarios only, and the retained publish rate
    (a retained message is durable before its PUBACK)."""
    return broker not in STORED or step in STEPS or step == "retained_pub"


# ------------------------------------------------------------------ brokers


def _traced(cmd: list[str], log: Path) -> list[str]:
    if STRACE is None:
        return cmd
    log.write_bytes(b"")
    return [
        STRACE,
        "-f",
        "-qq",
        "--seccomp-bpf",
        "-e",
        "trace=fsync,fdatasync",
        "-e",
        "signal=none",
        "-o",
        str(log),
        *cmd,
    ]


class Traced(brokers.BrokerProc):
    """A broker run under strace (when there is one), its fsyncs counted."""

    fsync_log = Path()

    @property
    def pid(self) -> int:
        """The broker's pid (strace's child), for its CPU figures and the fsync count."""
        assert self.proc is not None
        if STRACE is None:
            return self.proc.pid
        try:
            with open(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children") as f:
                child = int(f.read().split()[0])
        except (OSError, IndexError, ValueError):
            return self.proc.pid
        _FSYNC_LOGS[child] = self.fsync_log
        return child


class SiskinStore(Traced, brokers.Siskin):
    """Siskin with --data-dir (fresh at each start) and store_sync = "always"."""

    def __init__(self, workdir: Path, python: str | None, root: str | None, name: str, loop: str) -> None:
        brokers.Siskin.__init__(self, workdir, python, root, name, loop)
        self.config.write_text(self.config.read_text().replace("[limits]\n", '[limits]\nstore_sync = "always"\n', 1))
        self.data_dir = workdir / f"{name}-data"
        self.fsync_log = workdir / f"{name}.fsyncs"

    def command(self) -> list[str]:
        shutil.rmtree(self.data_dir, ignore_errors=True)
        return _traced([*super().command(), "--data-dir", str(self.data_dir)], self.fsync_log)


class MosquittoPersist(Traced, brokers.Mosquitto):
    """Mosquitto with `persistence true` (snapshots only; see the module's text)."""

    name = "mosquitto-persist"

    def __init__(self, workdir: Path) -> None:
        brokers.Mosquitto.__init__(self, workdir)
        self.data_dir = workdir / "mosquitto-persist-data"
        self.fsync_log = workdir / "mosquitto-persist.fsyncs"

    def command(self) -> list[str]:
        cmd = super().command()
        shutil.rmtree(self.data_dir, ignore_errors=True)
        self.data_dir.mkdir()
        conf = self.workdir / "mosquitto-persist.conf"
        text = Path(cmd[-1]).read_text()
        conf.write_text(
            text.replace("persistence false\n", f"persistence true\npersistence_location {self.data_dir}/\n")
        )
        return _traced([*cmd[:-1], str(conf)], self.fsync_log)


def broker_classes(python: str | None, root: str | None, pypy: str | None) -> dict[str, Any]:
    """name -> factory(workdir), for tools/bench/__main__.py's classes (`pypy`: PyPy's interpreter)."""
    return {
        "siskin-store": lambda wd: SiskinStore(wd, python, root, "siskin-store", "asyncio"),
        "siskin-uvloop-store": lambda wd: SiskinStore(wd, python, root, "siskin-uvloop-store", "uvloop"),
        "siskin-pypy-store": lambda wd: SiskinStore(wd, pypy, root, "siskin-pypy-store", "asyncio"),
        "mosquitto-persist": MosquittoPersist,
    }


# ------------------------------------------------------------------ report


def report(medians: dict[str, dict[str, dict[str, Any]]], names: list[str]) -> str:
    """The durable table: each stored broker next to itself without a store."""
    lines = [
        "| scenario | broker | msg/s | fsyncs/msg | without store (msg/s) | ratio to without | target ≥ 0.6 |",
        "|---|---|---|---|---|---|---|",
    ]
    for step in STEPS:
        for n in names:
            res = medians.get(n, {}).get(step)
            if n not in STORED or res is None:
                continue
            base = medians.get(STORED[n], {}).get(step)
            rate = res.get("msg_per_s")
            per = res.get("fsyncs_per_msg")
            plain = base.get("msg_per_s") if base else None
            ratio = round(rate / plain, 2) if rate and plain else None
            aim = "" if ratio is None or n.startswith("mosquitto") else ("met" if ratio >= 0.6 else "NOT met")
            lines.append(
                f"| {step} | {n} | {rate:,.0f} | {'—' if per is None else f'{per:.4f}'} | "
                f"{'—' if plain is None else f'{plain:,.0f}'} | {'—' if ratio is None else f'{ratio:.2f}'} | {aim} |"
            )
    return "\n".join(lines) if len(lines) > 2 else ""


def strace_version() -> str:
    if STRACE is None:
        return "no strace: fsyncs not counted"
    r = subprocess.run([STRACE, "-V"], capture_output=True, text=True)
    return (r.stdout.splitlines() or ["strace"])[0]

"""Run the real host server (`python -m cpython_host`) as a subprocess.

    with BrokerProcess(tmp_path, limits={"connect_timeout": 1}) as broker:
        sock = socket.create_connection(("127.0.0.1", broker.port))

The server listens on port 0 (the OS picks a free loopback port, so parallel
runs never collide) and the helper reads the real port from the server's
"listening on" log line. The log goes to a file (`broker.log_path`), not a
pipe, so a chatty server can never block on a full pipe; `log_text()` reads
it. `stop()` sends SIGTERM and returns the exit code; the context manager
kills the process if it is still running. The server leads a process group
of its own (tools/procgroup.py): stopped or killed, nothing it started stays.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from cpython_host.compat import tomllib
from tools import procgroup
from tools.bench import mqtt as raw

REPO_ROOT = Path(__file__).resolve().parent.parent.parent

_LISTENING = re.compile(r"listening on ([0-9.]+):(\d+)")

# The interpreter a BrokerProcess runs the host broker on when none is
# given: this one, or SISKIN_BROKER_PYTHON's (the broker_runtime fixture sets
# it to PyPy's for the tests of the PyPy leg; a developer can set it for any
# test run).
BROKER_PYTHON = "SISKIN_BROKER_PYTHON"

T = TypeVar("T")


def wait_until(condition: Callable[[], T | None], timeout: float, what: str | Callable[[], str]) -> T:
    """Poll `condition` until it returns a true value, and return that value.

    The one way the host tests wait for something to happen: no fixed sleep
    that is too short under load and too long otherwise. After `timeout` s,
    AssertionError with `what` (or what it returns: e.g. the log's tail).
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what() if callable(what) else what}")
        time.sleep(0.02)


def connect_when_served(port: int, client_id: str, timeout: float = 5.0) -> RawClient:
    """A client accepted with CONNACK 0x00, retrying while the broker refuses (slots not yet released)."""

    def attempt() -> RawClient | None:
        c = RawClient(port)
        try:
            if c.connect(client_id) == b"\x00\x00":
                return c
        except (AssertionError, OSError):
            pass
        c.close()
        return None

    return wait_until(attempt, timeout, f"{client_id} never got CONNACK 0x00")


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):  # an inline table
        return "{" + ", ".join(f"{toml_value(str(k))} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no TOML form for {value!r}")


def write_config(
    path: Path,
    limits: dict[str, Any] | None = None,
    server: dict[str, Any] | None = None,
    listeners: list[dict[str, Any]] | None = None,
    security: dict[str, Any] | None = None,
    base: str | None = None,
    http: dict[str, Any] | None = None,
    bridges: list[dict[str, Any]] | None = None,
) -> Path:
    """A config file: `base` (a shipped settings file, e.g. "boards/linux.toml";
    None: the built-in defaults) with `limits` and `server` set over it, and
    `listeners` (if given) as its [[listener]] tables; `bridges`: [[bridge]]
    tables, each with its rules as a list under "topic"."""
    doc: dict[str, Any] = {}
    if base is not None:
        with (REPO_ROOT / base).open("rb") as f:
            doc = tomllib.load(f)
    tables = {
        "limits": {**doc.get("limits", {}), **(limits or {})},
        # No JIT warm-up unless a test asks for it: on PyPy it would add
        # seconds to each start (cpython_host/runtime/warmup.py; test_pypy.py tests it).
        "server": {**doc.get("server", {}), "warm_up": False, **(server or {})},
    }
    if "log" in doc:
        tables["log"] = doc["log"]
    lines = []
    for name, values in tables.items():
        lines.append(f"[{name}]")
        lines += [f"{k} = {toml_value(v)}" for k, v in values.items()]
    for table in doc.get("listener", []) if listeners is None else listeners:
        lines.append("[[listener]]")
        lines += [f"{k} = {toml_value(v)}" for k, v in table.items()]
    if http is not None:
        lines.append("[http]")
        lines += [f"{k} = {toml_value(v)}" for k, v in http.items()]
    for bridge in bridges or []:
        lines.append("[[bridge]]")
        lines += [f"{k} = {toml_value(v)}" for k, v in bridge.items() if k != "topic"]
        for rule in bridge.get("topic", []):
            lines.append("[[bridge.topic]]")
            lines += [f"{k} = {toml_value(v)}" for k, v in rule.items()]
    if security:  # last, so that a test can append keys to it
        lines.append("[security]")
        lines += [f"{k} = {toml_value(v)}" for k, v in security.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def run_cli(*args: str, timeout: float = 20, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run `python -m cpython_host ARGS` to completion (for --help, bad configs); in `cwd`
    (the tree on its path) for a command whose relative file names matter."""
    return subprocess.run(
        [sys.executable, "-m", "cpython_host", *args],
        cwd=REPO_ROOT if cwd is None else cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=None if cwd is None else dict(os.environ, PYTHONPATH=str(REPO_ROOT)),
    )


class BrokerProcess:
    def __init__(
        self,
        workdir: Path,
        limits: dict[str, Any] | None = None,
        server: dict[str, Any] | None = None,
        log_level: str = "debug",
        extra_args: tuple[str, ...] = (),
        listeners: list[dict[str, Any]] | None = None,
        security: dict[str, Any] | None = None,
        base: str | None = None,
        http: dict[str, Any] | None = None,
        bridges: list[dict[str, Any]] | None = None,
        python: str | None = None,
    ) -> None:
        """`listeners`: [[listener]] tables; the first one's address is --host 127.0.0.1 --port 0.
        `base`: a shipped settings file the config starts from (None: the
        built-in defaults); `limits`, `server` and `listeners` are set over it.
        `http`: the [http] table (then http_url() is the HTTP listener's URL).
        `python`: the interpreter the broker runs on (default: BROKER_PYTHON's, else this one)."""
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.python = python or os.environ.get(BROKER_PYTHON) or sys.executable
        self.config_path = write_config(
            self.workdir / "siskin.toml", limits, server, listeners, security, base, http, bridges
        )
        self.log_path = self.workdir / "broker.log"
        self.log_level = log_level
        self.extra_args = extra_args
        self.proc: subprocess.Popen[bytes] | None = None
        self.host = "127.0.0.1"
        self.port = 0

    # ------------------------------------------------------------ lifecycle

    def start(self, timeout: float = 60.0) -> BrokerProcess:
        # (A guard: it returns once the broker listens. A repeat run on a
        # loaded VM saw a broker write nothing for 15 s after its start.)
        cmd = [
            self.python,
            "-m",
            "cpython_host",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--config",
            str(self.config_path),
            "--data-dir",
            str(self.workdir / "data"),
            "--log-level",
            self.log_level,
            *self.extra_args,
        ]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with self.log_path.open("wb") as logf:
            self.proc = procgroup.spawn(cmd, cwd=REPO_ROOT, stdout=logf, stderr=subprocess.STDOUT, env=env)
        proc = self.proc

        def listening() -> re.Match[str] | None:
            if proc.poll() is not None:
                raise RuntimeError(f"broker exited with {proc.returncode} at start:\n{self.log_text()}")
            return _LISTENING.search(self.log_text())

        try:
            m = wait_until(listening, timeout, lambda: f"broker did not start listening:\n{self.log_text()}")
        except AssertionError as e:
            self.kill()
            raise RuntimeError(str(e)) from None
        self.host, self.port = m.group(1), int(m.group(2))
        return self

    def stop(self, timeout: float = 15.0, sig: int = signal.SIGTERM) -> int:
        """`sig`, wait; the exit code (the process is killed on timeout)."""
        assert self.proc is not None
        if not procgroup.stop(self.proc, timeout, sig):
            raise RuntimeError(f"broker ignored {signal.Signals(sig).name} for {timeout} s:\n{self.log_text()}")
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL, to the server and anything it started."""
        if self.proc is not None:
            procgroup.kill(self.proc)

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()

    # --------------------------------------------------------------- probes

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def ports(self) -> list[int]:
        """Every listener's port, in the config's order (from the start-up log)."""
        return [int(port) for _, port in _LISTENING.findall(self.log_text())]

    def http_url(self) -> str:
        """The [http] listener's URL, from the start-up log ("http://127.0.0.1:PORT")."""
        return self.wait_log(r"HTTP listener on (https?://[0-9.]+:\d+)").group(1)

    def rss(self) -> int:
        """The broker's resident set size in bytes (Linux /proc)."""
        with open(f"/proc/{self.pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def wait_log(self, pattern: str, timeout: float = 10.0) -> re.Match[str]:
        """Wait until the log matches the regular expression `pattern`."""
        rx = re.compile(pattern)
        return wait_until(
            lambda: rx.search(self.log_text()),
            timeout,
            lambda: f"log never matched {pattern!r}:\n{self.log_text()[-4000:]}",
        )


# ---------------------------------------------------------------------------
# Raw MQTT 3.1.1 bytes, written out by hand (not with common/'s encoder, so
# the server is tested against an independent reading of the spec): the load
# generator's builders (tools/bench/mqtt.py), plus what only the tests need.

vbi = raw.vbi
mqtt_str = raw.mqtt_str
publish_packet = raw.publish
subscribe_packet = raw.subscribe
DISCONNECT = raw.DISCONNECT


def connect_packet(
    client_id: str,
    clean: bool = True,
    keep_alive: int = 0,
    will: tuple[str, bytes, int, bool] | None = None,
    username: str | None = None,
    password: bytes | None = None,
) -> bytes:
    flags = 0x02 if clean else 0
    payload = mqtt_str(client_id)
    if will is not None:
        topic, message, qos, retain = will
        flags |= 0x04 | (qos << 3) | (0x20 if retain else 0)
        payload += mqtt_str(topic) + mqtt_str(message)
    if username is not None:
        flags |= 0x80
        payload += mqtt_str(username)
    if password is not None:
        flags |= 0x40
        payload += len(password).to_bytes(2, "big") + password
    body = mqtt_str("MQTT") + bytes([4, flags]) + keep_alive.to_bytes(2, "big") + payload
    return b"\x10" + vbi(len(body)) + body


def puback_packet(packet_id: int) -> bytes:
    return b"\x40\x02" + packet_id.to_bytes(2, "big")


class RawClient:
    """A plain TCP socket speaking hand-made MQTT; parses what comes back."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 5.0, rcvbuf: int = 0) -> None:
        """`rcvbuf`: a small SO_RCVBUF, for a client that reads slowly or never."""
        import socket

        self.sock = socket.create_connection((host, port), timeout=timeout)
        if rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.buf = b""

    @classmethod
    def over(cls, sock: Any) -> RawClient:
        """One over a socket connected already (a test's own server side)."""
        c = cls.__new__(cls)
        c.sock = sock
        c.buf = b""
        return c

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_packet(self, timeout: float = 5.0) -> tuple[int, bytes] | None:
        """(first byte, body) of the next packet, or None if the server closed."""
        self.sock.settimeout(timeout)
        while True:
            parsed = self._parse()
            if parsed is not None:
                return parsed
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buf += chunk

    def _parse(self) -> tuple[int, bytes] | None:
        buf = self.buf
        if len(buf) < 2:
            return None
        n = 0
        mult = 1
        i = 1
        while True:
            if i >= len(buf):
                return None
            b = buf[i]
            n += (b & 0x7F) * mult
            mult *= 128
            i += 1
            if not b & 0x80:
                break
        if len(buf) < i + n:
            return None
        self.buf = buf[i + n :]
        return buf[0], buf[i : i + n]

    def connect(
        self,
        client_id: str,
        clean: bool = True,
        keep_alive: int = 0,
        will: Any = None,
        username: str | None = None,
        password: bytes | None = None,
    ) -> bytes:
        """CONNECT and return the CONNACK body (2 bytes: flags, return code)."""
        self.send(connect_packet(client_id, clean, keep_alive, will, username, password))
        pkt = self.read_packet()
        assert pkt is not None, "closed instead of CONNACK"
        assert pkt[0] == 0x20, f"expected CONNACK, got {pkt[0]:#x}"
        return pkt[1]

    def subscribe(self, topic_filter: str, qos: int, packet_id: int = 1) -> int:
        self.send(subscribe_packet(packet_id, topic_filter, qos))
        pkt = self.read_packet()
        assert pkt is not None and pkt[0] == 0x90, f"expected SUBACK, got {pkt!r}"
        return pkt[1][2]

    def closed_within(self, seconds: float) -> bool:
        """True if the server closes (EOF or reset) within `seconds`; input is discarded."""
        import time as _time

        deadline = _time.monotonic() + seconds
        while True:
            left = deadline - _time.monotonic()
            if left <= 0:
                return False
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                return False
            except (ConnectionResetError, BrokenPipeError):
                return True
            if not chunk:
                return True

    def close(self) -> None:
        self.sock.close()


def parse_publish(first: int, body: bytes) -> tuple[str, bytes, int, bool, bool, int]:
    """(topic, payload, qos, retain, dup, packet_id) of a PUBLISH body."""
    n = int.from_bytes(body[:2], "big")
    topic = body[2 : 2 + n].decode()
    qos = (first >> 1) & 3
    i = 2 + n
    pid = 0
    if qos:
        pid = int.from_bytes(body[i : i + 2], "big")
        i += 2
    return topic, body[i:], qos, bool(first & 1), bool(first & 8), pid


# ---------------------------------------------------------------------------
# paho-mqtt 2.2 (CallbackAPIVersion.VERSION2, MQTT 3.1.1) with blocking helpers.


# How long a Paho wrapper waits for its CONNACK, a PUBACK/PUBCOMP or a
# message by default: a guard, not a decider (it returns as soon as the packet comes).
# A repeat run on a loaded 2-core VM saw a broker's loop stand still for
# seconds (its bridge's upstream closed it twice in one test for a missed
# 1 s keep-alive; a store sync on the busy disk is the likely cause), and a
# publish that waited 5 s for its PUBACK was failed while it was on its way.
PAHO_WAIT = 30.0


class Paho:
    def __init__(
        self,
        port: int,
        client_id: str = "",
        clean: bool = True,
        keep_alive: int = 60,
        username: str | None = None,
        password: str | None = None,
        protocol: int = 4,
        host: str = "127.0.0.1",
    ) -> None:
        import queue
        import threading

        import paho.mqtt.client as mqtt
        from paho.mqtt.enums import CallbackAPIVersion

        self.port = port
        self.host = host
        self.messages: queue.Queue[Any] = queue.Queue()
        self.connected = threading.Event()
        self.disconnected = threading.Event()
        self.subscribed: dict[int, Any] = {}
        self.sub_event = threading.Condition()
        self.session_present: bool | None = None
        self.connack_rc: Any = None
        self.connack_props: Any = None
        self.keep_alive = keep_alive
        c = mqtt.Client(
            CallbackAPIVersion.VERSION2,
            client_id=client_id,
            clean_session=clean if protocol == 4 else None,
            protocol=mqtt.MQTTv311 if protocol == 4 else mqtt.MQTTv5,
        )
        if username is not None:
            c.username_pw_set(username, password)
        c.on_connect = self._on_connect
        c.on_disconnect = self._on_disconnect
        c.on_message = self._on_message
        c.on_subscribe = self._on_subscribe
        self.client = c

    def _on_connect(self, client: Any, userdata: Any, flags: Any, rc: Any, props: Any) -> None:
        self.session_present = bool(flags.session_present)
        self.connack_rc = rc
        self.connack_props = props
        self.connected.set()

    def _on_disconnect(self, client: Any, userdata: Any, flags: Any, rc: Any, props: Any) -> None:
        self.disconnected.set()

    def _on_message(self, client: Any, userdata: Any, msg: Any) -> None:
        self.messages.put(msg)

    def _on_subscribe(self, client: Any, userdata: Any, mid: int, reasons: Any, props: Any) -> None:
        with self.sub_event:
            self.subscribed[mid] = reasons
            self.sub_event.notify_all()

    def connect(self, timeout: float = PAHO_WAIT) -> Paho:
        self.client.connect(self.host, self.port, keepalive=self.keep_alive)
        self.client.loop_start()
        if not self.connected.wait(timeout):
            raise AssertionError("paho client did not get CONNACK")
        if self.connack_rc != 0:
            raise AssertionError(f"CONNACK refused: {self.connack_rc}")
        return self

    def subscribe(self, topic: str, qos: int = 0, timeout: float = 5.0) -> Any:
        rc, mid = self.client.subscribe(topic, qos)
        assert rc == 0 and mid is not None
        with self.sub_event:
            if not self.sub_event.wait_for(lambda: mid in self.subscribed, timeout):
                raise AssertionError(f"no SUBACK for {topic}")
            return self.subscribed[mid]

    @classmethod
    def fast_publisher(cls, port: int, client_id: str) -> Paho:
        """Connected, with 1,000 QoS 1/2 messages in flight and no queue
        limit of its own: it publishes as fast as the broker reads."""
        pub = cls(port, client_id)
        pub.client.max_inflight_messages_set(1000)
        pub.client.max_queued_messages_set(0)
        return pub.connect()

    def publish(
        self, topic: str, payload: bytes, qos: int = 0, retain: bool = False, timeout: float = PAHO_WAIT
    ) -> None:
        info = self.client.publish(topic, payload, qos, retain)
        info.wait_for_publish(timeout)
        assert info.is_published(), f"publish to {topic} not completed"

    def get(self, timeout: float = PAHO_WAIT) -> Any:
        import queue

        try:
            return self.messages.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError("no message arrived") from None

    def get_nothing(self, wait: float = 0.3) -> None:
        import queue

        try:
            msg = self.messages.get(timeout=wait)
        except queue.Empty:
            return
        raise AssertionError(f"unexpected message on {msg.topic}: {msg.payload!r}")

    def close(self) -> None:
        try:
            self.client.disconnect()
        finally:
            self.client.loop_stop()


# ---------------------------------------------------------------------------
# A QoS 1/2 load with its acknowledgements recorded, and a draining
# subscriber: the kill -9 tests (tests/host/test_persist_crash.py) and
# tools/crashloss.py.


def pubrel_packet(pid: int) -> bytes:
    return b"\x62\x02" + pid.to_bytes(2, "big")


def pubrec_packet(pid: int) -> bytes:
    return b"\x50\x02" + pid.to_bytes(2, "big")


def pubcomp_packet(pid: int) -> bytes:
    return b"\x70\x02" + pid.to_bytes(2, "big")


WINDOW = 32  # unacknowledged PUBLISHes the publisher keeps in flight


class Publisher:
    """Floods numbered QoS 1/2 messages, WINDOW at a time; a reader thread records the acks."""

    def __init__(self, port: int, client_id: str = "storm-pub") -> None:
        self.client = RawClient(port)
        self.client.connect(client_id, clean=True)
        self.acked: dict[int, set[int]] = {1: set(), 2: set()}  # qos -> message numbers
        self.pid_to_msg: dict[int, tuple[int, int]] = {}
        self.lock = threading.Lock()
        self.window = threading.Semaphore(WINDOW)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        try:
            while True:
                pkt = self.client.read_packet(timeout=30)
                if pkt is None:
                    return
                first, body = pkt
                pid = int.from_bytes(body[:2], "big")
                with self.lock:
                    qos_n = self.pid_to_msg.get(pid)
                if qos_n is None:
                    continue
                if first == 0x40 and qos_n[0] == 1:  # PUBACK
                    with self.lock:
                        self.acked[1].add(qos_n[1])
                    self.window.release()
                elif first == 0x50 and qos_n[0] == 2:  # PUBREC: the broker owns the message
                    with self.lock:
                        self.acked[2].add(qos_n[1])
                    self.client.send(pubrel_packet(pid))
                elif first == 0x70:  # PUBCOMP: the packet id is free again
                    self.window.release()
        except OSError:
            return

    def flood(self, count: int, stop: threading.Event, qos: int = 0, topic: str = "storm") -> None:
        """Publish `count` numbered messages to `topic`/QOS, at `qos` (0:
        alternately 1 and 2), until `stop` is set."""
        alternate = not qos
        try:
            for n in range(count):
                while not self.window.acquire(timeout=0.1):
                    if stop.is_set():
                        return
                if stop.is_set():
                    return
                if alternate:
                    qos = 1 + n % 2
                pid = n % 60000 + 1
                with self.lock:
                    self.pid_to_msg[pid] = (qos, n)
                self.client.send(publish_packet(f"{topic}/{qos}", b"%08d" % n, qos=qos, packet_id=pid))
        except OSError:
            return


def offline_subscriber(broker: BrokerProcess, client_id: str, topic_filter: str, qos: int = 1) -> None:
    """A persistent subscriber (3.1.1 clean session 0) to `topic_filter`, then gone:
    what is published to it from here on queues for it."""
    sub = RawClient(broker.port)
    assert sub.connect(client_id, clean=False)[1] == 0
    assert sub.subscribe(topic_filter, qos) == qos
    sub.send(DISCONNECT)
    broker.wait_log(client_id + " disconnected")


class Receiver:
    """A persistent subscriber (3.1.1 clean session 0, QoS 2 subscription) as
    an application sees one, online while messages flow and across a
    broker restart: each QoS 1 PUBLISH is delivered; a QoS 2 one is
    delivered once per packet id, which it keeps until its PUBREL (the
    receiver's side of [MQTT-4.3.3-9]: a PUBLISH with that id again is
    acknowledged, not delivered), and those ids outlive a connection as its
    session does. `delivered[qos]`: the message numbers (payloads) in the
    order they were delivered; a QoS 2 number there twice is a duplicate
    the broker caused. One reader thread per connection."""

    def __init__(self, client_id: str, topic_filter: str) -> None:
        self.client_id = client_id
        self.topic_filter = topic_filter
        self.delivered: dict[int, list[int]] = {1: [], 2: []}
        self.awaiting: set[int] = set()  # QoS 2 ids acknowledged with PUBREC, no PUBREL yet
        self.resent = 0  # QoS 2 PUBLISHes with an id still awaited: not delivered again
        self.lock = threading.Lock()
        self.client: RawClient | None = None
        self.reader: threading.Thread | None = None

    def attach(self, port: int, subscribe: bool) -> bytes:
        """Connect (clean session 0) and start reading; the CONNACK body.
        `subscribe`: the first connection (later ones resume the session)."""
        client = RawClient(port)
        connack = client.connect(self.client_id, clean=False)
        if subscribe:
            assert client.subscribe(self.topic_filter, 2) == 2
        self.client = client
        self.reader = threading.Thread(target=self._read, args=(client,), daemon=True)
        self.reader.start()
        return connack

    def _read(self, client: RawClient) -> None:
        try:
            while True:
                pkt = client.read_packet(timeout=60)
                if pkt is None:
                    return
                first, body = pkt
                if first >> 4 == 3:
                    _topic, payload, qos, _retain, _dup, pid = parse_publish(first, body)
                    with self.lock:
                        if qos == 2 and pid in self.awaiting:
                            self.resent += 1
                        elif qos:
                            self.delivered[qos].append(int(payload))
                            if qos == 2:
                                self.awaiting.add(pid)
                    client.send(pubrec_packet(pid) if qos == 2 else puback_packet(pid))
                elif first == 0x62:  # PUBREL
                    pid = int.from_bytes(body[:2], "big")
                    with self.lock:
                        self.awaiting.discard(pid)
                    client.send(pubcomp_packet(pid))
        except OSError:
            return

    def wait_for(self, expected: dict[int, set[int]], patience: float = 60.0, quiet: float = 1.0) -> None:
        """Until every number of `expected` (qos -> numbers) was delivered, or
        `patience` s without progress; then until `quiet` s pass without a
        delivery (what comes late, a duplicate, is counted too)."""
        last = -1
        stalled = time.monotonic()
        while True:
            with self.lock:
                n = len(self.delivered[1]) + len(self.delivered[2])
                done = all(expected[q] <= set(self.delivered[q]) for q in expected)
            if n != last:
                last = n
                stalled = time.monotonic()
            elif time.monotonic() - stalled > (quiet if done else patience):
                return
            time.sleep(0.02)

    def detach(self) -> None:
        if self.client is not None:
            try:
                self.client.send(DISCONNECT)
            except OSError:
                pass
            self.client.close()
        if self.reader is not None:
            self.reader.join(5)


Drained = list[tuple[str, bytes, int, bool, int]]  # (topic, payload, qos, dup, packet id) of each PUBLISH


def drain(
    client: RawClient, quiet: float = 1.0, until: Callable[[Drained], bool] | None = None, patience: float = 60.0
) -> Drained:
    """Every PUBLISH until `quiet` s pass without one; acknowledges each (QoS 2 fully).

    `until(got)`, asked after each PUBLISH: what must have come (e.g.
    `arrived(...)`); until it says so, a pause of up to `patience` s is waited
    out (a loaded machine can hold a broker's delivery back for seconds), so
    that what is missing then has not come, rather than not come yet."""
    got: Drained = []
    done = until is None or until(got)
    while True:
        try:
            pkt = client.read_packet(timeout=quiet if done else patience)
        except TimeoutError:
            return got
        if pkt is None:
            return got
        first, body = pkt
        if first >> 4 == 3:
            topic, payload, qos, _retain, dup, pid = parse_publish(first, body)
            got.append((topic, payload, qos, dup, pid))
            done = done or until is None or until(got)
            if qos == 1:
                client.send(puback_packet(pid))
            elif qos == 2:
                client.send(pubrec_packet(pid))
        elif first == 0x62:  # PUBREL
            client.send(pubcomp_packet(int.from_bytes(body[:2], "big")))


def arrived(expected: dict[str, set[int]]) -> Callable[[Drained], bool]:
    """drain's `until`: True once each number of `expected` (topic -> numbers,
    the payloads as integers) has come; looks at the newest PUBLISH only."""
    missing = {topic: set(numbers) for topic, numbers in expected.items()}

    def until(got: Drained) -> bool:
        if got:
            topic, payload = got[-1][0], got[-1][1]
            if topic in missing:
                missing[topic].discard(int(payload))
        return not any(missing.values())

    return until

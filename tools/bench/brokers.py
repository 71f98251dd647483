"""Start and stop the brokers under test on free loopback ports.

- Siskin: `<python> -m cpython_host --port P --config <tmp.toml>` (no
  --data-dir: persistence off), limits raised so the bench never hits them;
  on CPython (.venv) or PyPy (.venv-pypy, make's PyPy venv).
- Mosquitto: /usr/sbin/mosquitto -c <tmp.conf> with `listener P 127.0.0.1`,
  `allow_anonymous true`, `persistence false` and the same queue/inflight
  limits as Siskin's.
- amqtt: `amqtt -c <tmp.yaml>` from the separate .venv-bench.

Every broker logs at warning level or less (per-connection info lines cost
the same I/O in all of them) and publishes $SYS every 10 s, as by default.

Each broker leads a process group of its own (tools/procgroup.py): stop()
ends it with whatever it started (strace's tracee: scenarios_durable.py).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tools import procgroup

from . import mqtt

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
MOSQUITTO = "/usr/sbin/mosquitto"

# Limits raised in every broker so that only speed is measured: the fan-in
# scenarios queue up to a few hundred thousand messages for one subscriber.
SISKIN_LIMITS = {
    "max_connections": 5000,
    "max_sessions": 10000,
    "max_subscriptions": 100000,
    "max_messages": 2000000,
    "max_queued_messages": 2000000,
    "max_queued_bytes": 1 << 30,
    "max_queued_total_bytes": 1 << 31,
    "max_retained": 100000,
    "max_retained_bytes": 1 << 30,
    # Mosquitto's default max_inflight_messages, and a bridge's max_inflight:
    # the tests' and tools' Mosquitto is also a bridge's upstream, and
    # Mosquitto 2.0 drops the QoS 2 messages a 3.1.1 client sends beyond it
    # while it acknowledges them (docs/bridge.md, "The window").
    "max_inflight": 20,
}


_RECENT_PORTS: list[int] = []  # the last ports free_port handed out, newest last
_RECENT_KEPT = 256


def free_port() -> int:
    """A loopback TCP port free now, for a server started next. Never one of
    the last 256 this process handed out: the kernel may give a port it just
    gave back, so two picks in a row (a NATS node's HTTP and cluster ports
    once) could be the same port and the second server fail to bind."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
        if port not in _RECENT_PORTS:
            _RECENT_PORTS.append(port)
            del _RECENT_PORTS[:-_RECENT_KEPT]
            return port


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


class BrokerProc:
    name = "?"

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / f"{self.name}.log"
        self.cwd = REPO_ROOT
        self.env: dict[str, str] = {}  # set over this process's environment

    def command(self) -> list[str]:
        raise NotImplementedError

    def version(self) -> str:
        raise NotImplementedError

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 30.0) -> BrokerProc:
        self.port = free_port()
        cmd = self.command()
        with self.log_path.open("ab") as logf:
            self.proc = procgroup.spawn(
                cmd,
                cwd=self.cwd,
                stdout=logf,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **self.env},
            )
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode} at start: {self.log_tail()}")
            try:
                s = mqtt.open_client(self.port, f"probe-{os.getpid()}", timeout=2)
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"{self.name} did not answer on port {self.port}: {self.log_tail()}") from None
                time.sleep(0.05)
                continue
            s.sendall(mqtt.DISCONNECT)
            s.close()
            return self

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM to the broker (`pid`), then its group ends: SIGKILL after `timeout` s."""
        if self.proc is not None:
            procgroup.stop(self.proc, timeout, pid=self.pid)

    def log_tail(self, size: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-size:]
        except FileNotFoundError:
            return ""


class Siskin(BrokerProc):
    name = "siskin"

    def __init__(
        self,
        workdir: Path,
        python: str | None = None,
        root: str | None = None,
        name: str = "siskin",
        loop: str = "auto",
        nursery: str | None = None,
        limits: dict[str, object] | None = None,
    ) -> None:
        """`nursery`: PYPY_GC_NURSERY for a broker on PyPy (None: Siskin's pin,
        cpython_host/runtime/pypy_heap.py; "0": PyPy's own size, from /proc/cpuinfo).
        `limits`: [limits] keys over SISKIN_LIMITS (tools/bench/scenarios_limits.py)."""
        self.name = name
        self.loop = loop  # --event-loop
        super().__init__(workdir)
        if nursery is not None:
            self.env["PYPY_GC_NURSERY"] = nursery
        if root:
            self.cwd = Path(root)  # another checkout (an A/B comparison)
        self.python = python or siskin_python()
        self.config = workdir / f"{name}.toml"
        lines = ["[limits]"] + [f"{k} = {_toml(v)}" for k, v in {**SISKIN_LIMITS, **(limits or {})}.items()]
        lines += ["[server]", "backlog = 4096"]
        self.config.write_text("\n".join(lines) + "\n")

    def command(self) -> list[str]:
        return [
            self.python,
            "-m",
            "cpython_host",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--config",
            str(self.config),
            "--log-level",
            "warning",
            "--event-loop",
            self.loop,
        ]

    def event_loop(self) -> str:
        if self.loop != "auto":
            return self.loop
        return "uvloop" if has_uvloop(self.python) else "asyncio"

    def version(self) -> str:
        r = subprocess.run(
            [self.python, "-c", VERSION_CODE],
            cwd=self.cwd,
            capture_output=True,
            text=True,
        )
        version, _, python = r.stdout.strip().partition(" ")
        return f"siskin {version} ({python}, {self.event_loop()})"


# The version of the checkout a Siskin runs from; one from before Core v3
# (an A/B comparison, --siskin-root) kept it in common/broker/broker.py.
VERSION_CODE = """import platform
try:
    from common import VERSION
except ImportError:
    from common.broker.broker import VERSION
print(VERSION, platform.python_implementation(), platform.python_version())
"""


def siskin_python() -> str:
    """The test venv's interpreter (it has uvloop), else this one."""
    venv = REPO_ROOT / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def pypy_python() -> str | None:
    """make's PyPy venv interpreter (make bench makes it where pypy3 is installed), or None."""
    venv = REPO_ROOT / ".venv-pypy" / "bin" / "python"
    return str(venv) if venv.exists() else None


def has_uvloop(python: str) -> bool:
    """True if `python` exists and can import uvloop (cpython_host then uses it)."""
    if not os.access(python, os.X_OK):
        return False
    r = subprocess.run([python, "-c", "import uvloop"], capture_output=True)
    return r.returncode == 0


class Mosquitto(BrokerProc):
    name = "mosquitto"

    def __init__(self, workdir: Path, extra: list[str] | None = None) -> None:
        super().__init__(workdir)
        # More config lines after the plain listener (more listeners, each
        # with its own settings: per_listener_settings is on when given).
        self.extra = extra or []

    @staticmethod
    def available() -> bool:
        return os.access(MOSQUITTO, os.X_OK)

    def command(self) -> list[str]:
        conf = self.workdir / "mosquitto.conf"
        conf.write_text(
            "\n".join(
                [
                    *(["per_listener_settings true"] if self.extra else []),
                    f"listener {self.port} 127.0.0.1",
                    "allow_anonymous true",
                    "persistence false",
                    "set_tcp_nodelay true",
                    "log_dest stderr",
                    "log_type error",
                    "log_type warning",
                    "sys_interval 10",
                    f"max_queued_messages {SISKIN_LIMITS['max_queued_messages']}",
                    f"max_queued_bytes {SISKIN_LIMITS['max_queued_bytes']}",
                    f"max_inflight_messages {SISKIN_LIMITS['max_inflight']}",
                    *self.extra,
                    "",
                ]
            )
        )
        return [MOSQUITTO, "-c", str(conf)]

    def version(self) -> str:
        r = subprocess.run([MOSQUITTO, "-h"], capture_output=True, text=True)
        first = (r.stdout or r.stderr).strip().splitlines()
        return first[0] if first else "mosquitto"


class Amqtt(BrokerProc):
    name = "amqtt"
    VENV = REPO_ROOT / ".venv-bench"

    @classmethod
    def exe(cls) -> str | None:
        beside = cls.VENV / "bin" / "amqtt"
        if beside.exists():
            return str(beside)
        return shutil.which("amqtt")

    @classmethod
    def available(cls) -> bool:
        return cls.exe() is not None

    def command(self) -> list[str]:
        conf = self.workdir / "amqtt.yaml"
        conf.write_text(
            "\n".join(
                [
                    "---",
                    "listeners:",
                    "  default:",
                    "    type: tcp",
                    f"    bind: 127.0.0.1:{self.port}",
                    "plugins:",
                    "  amqtt.plugins.authentication.AnonymousAuthPlugin:",
                    "    allow_anonymous: true",
                    "  amqtt.plugins.sys.broker.BrokerSysPlugin:",
                    "    sys_interval: 10",
                    "",
                ]
            )
        )
        exe = self.exe()
        assert exe is not None
        return [exe, "-c", str(conf)]

    def version(self) -> str:
        exe = self.exe()
        assert exe is not None
        r = subprocess.run([exe, "--version"], capture_output=True, text=True)
        return "amqtt " + (r.stdout or r.stderr).strip().split()[-1] if (r.stdout or r.stderr).strip() else "amqtt"


class WorkDir:
    """A run's directory for the brokers' configs, logs and data (a new one
    under the temporary directory): removed when the run ends well, kept and
    named when a scenario failed, a broker died or the run was cut short, so
    that its logs say why (one bench run leaves about 1 MB)."""

    def __init__(self) -> None:
        self.path = Path(tempfile.mkdtemp(prefix="siskin-bench-"))
        self.keep = False

    def __enter__(self) -> WorkDir:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.keep = self.keep or exc_type is not None
        self.close()

    def close(self) -> None:
        if self.keep:
            print(f"bench: the brokers' configs and logs are kept in {self.path}", file=sys.stderr)
        else:
            shutil.rmtree(self.path, ignore_errors=True)

"""A local NATS JetStream cluster with the MQTT listener on every node.

    python -m tools.nats_cluster                    3 nodes in a temporary directory
    python -m tools.nats_cluster --nodes 1          one node
    python -m tools.nats_cluster --dir ./nats-data  keep configs, stores and logs there

For trying the bridge by hand (docs/bridge.md) and for the tests
(tests/host/nats_cluster.py): both start the cluster with `NatsCluster`.

Theory of operation
-------------------
Each node is a Debian `nats-server` (2.9.10 in Debian 12) started with a
config written here: its own `server_name` (the MQTT listener refuses to
start without one) and JetStream `store_dir` (MQTT sessions, retained
messages and QoS 1 queues live in JetStream streams), a client port, an
MQTT port, an HTTP monitoring port and, with more than one node, a
cluster port with routes to every node. All listen on 127.0.0.1 on ports
picked free at start-up; a restarted node keeps its ports and its store,
so a client's list of addresses stays valid.

Ready means: every node answers an MQTT CONNECT with CONNACK 0x00. The
first CONNACK per node comes 1-4 s after launch, because the first MQTT
client of an account makes the node create the account's MQTT streams
(3 replicas in a 3-node cluster) and that needs the JetStream meta leader.
A CONNECT sent too early is not refused at once: the node waits 4 s for
its stream lookup to time out and then closes the connection, which made
a fresh start take ~6 s. So each node is first polled on its monitoring
port until /jsz names the meta leader, and only then probed over MQTT,
one node at a time (the first probe creates the streams; probes in
parallel raced their creation and sometimes lost the 4 s again).
A restarted node knows the leader at once from its store, but its first
stream lookup goes out before its routes are in place and still loses
the 4 s: a restart takes 2-10 s. Neither /healthz (it can stay "consumer
not current" for a minute) nor overlapping probes (the node holds them
all until it is ready) shortened that.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from tools import procgroup
from tools.bench.brokers import free_port
from tools.bench.mqtt import DISCONNECT, connect

NATS_SERVER = "/usr/sbin/nats-server"  # the Debian package's path; often not on a user's PATH
HINT = "apt-get install nats-server"


def nats_server_path() -> str | None:
    """The nats-server binary (PATH first, then the Debian location), or None."""
    found = shutil.which("nats-server")
    if found:
        return found
    return NATS_SERVER if os.access(NATS_SERVER, os.X_OK) else None


def nats_server_version(binary: str) -> str:
    """`nats-server --version`, e.g. "nats-server: v2.9.10"."""
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10)
    return out.stdout.strip()


def mqtt_connack(port: int, client_id: str, timeout: float) -> int | None:
    """The CONNACK return code for a clean MQTT 3.1.1 CONNECT, or None if
    the port is closed or the node hung up (or said nothing) before one."""
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    except OSError:
        return None
    with sock:
        try:
            sock.sendall(connect(client_id, keep_alive=60))
            data = b""
            while len(data) < 4:
                chunk = sock.recv(4 - len(data))
                if not chunk:
                    return None
                data += chunk
            if data[:2] != b"\x20\x02":
                return None
            sock.sendall(DISCONNECT)
        except OSError:
            return None
    return data[3]


class NatsNode:
    """One nats-server process: its ports, config, store and log."""

    def __init__(self, binary: str, workdir: Path, name: str) -> None:
        self.binary = binary
        self.name = name
        self.dir = workdir / name
        self.store_dir = self.dir / "store"
        self.config_path = self.dir / "nats.conf"
        self.log_path = self.dir / "nats.log"
        self.client_port = free_port()
        self.mqtt_port = free_port()
        self.http_port = free_port()
        self.cluster_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def write_config(self, cluster_name: str, routes: Sequence[int]) -> None:
        lines = [
            f"server_name: {self.name}",
            f"listen: 127.0.0.1:{self.client_port}",
            f"http: 127.0.0.1:{self.http_port}",
            f'jetstream {{ store_dir: "{self.store_dir}" }}',
            f"mqtt {{ listen: 127.0.0.1:{self.mqtt_port} }}",
        ]
        if routes:
            urls = ", ".join(f"nats-route://127.0.0.1:{port}" for port in routes)
            lines.append(f"cluster {{ name: {cluster_name}, listen: 127.0.0.1:{self.cluster_port}, routes: [{urls}] }}")
        self.dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text("\n".join(lines) + "\n")

    def launch(self) -> None:
        with self.log_path.open("ab") as logf:
            self.proc = procgroup.spawn(
                [self.binary, "-c", str(self.config_path)],
                stdout=logf,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"nats node {self.name} exited with {self.proc.returncode}:\n{self.log_tail()}")

    def kill(self) -> None:
        """kill -9: no goodbye to the cluster, no flush of the store."""
        if self.proc is not None:
            procgroup.kill(self.proc)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (a clean shutdown); SIGKILL if it takes longer than `timeout`."""
        if self.proc is not None:
            procgroup.stop(self.proc, timeout)

    def meta_leader(self) -> str | None:
        """The JetStream meta leader this node knows of (its /jsz), or None."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/jsz", timeout=2) as r:
                info = json.load(r)
        except (OSError, ValueError, urllib.error.URLError):
            return None
        leader = (info.get("meta_cluster") or {}).get("leader")
        return str(leader) if leader else None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_text()[-chars:]


class NatsCluster:
    """`size` nats-server nodes (n1, n2, ...) in `workdir`, JetStream and MQTT on each.

    with NatsCluster(tmp_path) as cluster:
        port = cluster.mqtt_ports[0]
        cluster.kill(0); ...; cluster.restart(0)
    """

    def __init__(self, workdir: Path, size: int = 3, binary: str | None = None, name: str = "siskin") -> None:
        binary = binary or nats_server_path()
        if binary is None:
            raise RuntimeError(f"nats-server not found ({HINT})")
        self.workdir = Path(workdir)
        self.nodes = [NatsNode(binary, self.workdir, f"n{i + 1}") for i in range(size)]
        routes = [n.cluster_port for n in self.nodes] if size > 1 else []
        for node in self.nodes:
            node.write_config(name, routes)
        self.startup_seconds = 0.0

    @property
    def mqtt_ports(self) -> list[int]:
        return [n.mqtt_port for n in self.nodes]

    def start(self, timeout: float = 60.0) -> NatsCluster:
        """Launch every node and wait until each gives a CONNACK 0x00."""
        t0 = time.monotonic()
        for node in self.nodes:
            node.launch()
        try:
            self._wait_ready(self.nodes, t0 + timeout)
        except BaseException:
            self.close()
            raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def kill(self, index: int) -> None:
        """kill -9 node `index` (0-based)."""
        self.nodes[index].kill()

    def stop(self, index: int) -> None:
        """Stop node `index` cleanly (SIGTERM)."""
        self.nodes[index].stop()

    def restart(self, index: int, timeout: float = 60.0) -> None:
        """Start a stopped or killed node again (same ports, same store); wait until it serves MQTT."""
        node = self.nodes[index]
        node.kill()
        node.launch()
        self._wait_ready([node], time.monotonic() + timeout)

    def close(self) -> None:
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> NatsCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _wait_ready(self, nodes: list[NatsNode], deadline: float) -> None:
        for node in nodes:
            while len(self.nodes) > 1 and node.meta_leader() is None:
                self._poll_wait(node, deadline, "never learnt of a JetStream meta leader")
        for node in nodes:
            # One probe at a time: connections sent while the node is not
            # ready are all held until it is, and then leave session records
            # behind ("unable to delete session"). 10 s outlasts NATS's own 4 s
            # stream lookup; a hang-up without CONNACK means "not yet".
            while mqtt_connack(node.mqtt_port, f"ready-{node.name}", timeout=10) != 0:
                self._poll_wait(node, deadline, f"gave no MQTT CONNACK 0x00 on port {node.mqtt_port}")

    @staticmethod
    def _poll_wait(node: NatsNode, deadline: float, what: str) -> None:
        node.check_alive()
        if time.monotonic() > deadline:
            raise RuntimeError(f"nats node {node.name} {what} in time:\n{node.log_tail()}")
        time.sleep(0.05)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.nats_cluster",
        description=(
            "Start a local NATS JetStream cluster with the MQTT listener on every node "
            "(nats-server from Debian, on 127.0.0.1, free ports), print the MQTT addresses "
            "for the bridge's upstream, and run until Ctrl-C or SIGTERM, then stop every node."
        ),
    )
    parser.add_argument("--nodes", type=int, default=3, help="number of nodes (default 3; 1: no cluster)")
    parser.add_argument(
        "--dir",
        type=Path,
        help="where configs, JetStream stores and logs go (default: a temporary directory, removed on exit)",
    )
    parser.add_argument("--nats-server", help="the nats-server binary (default: PATH, then /usr/sbin/nats-server)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for every node's CONNACK")
    args = parser.parse_args(argv)
    if args.nodes < 1:
        parser.error("--nodes must be at least 1")
    binary = args.nats_server or nats_server_path()
    if binary is None:
        print(f"nats-server not found: {HINT}, or give --nats-server", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="nats-cluster-") as tmp:
        workdir = args.dir.resolve() if args.dir else Path(tmp)
        cluster = NatsCluster(workdir, args.nodes, binary)
        signal.signal(signal.SIGTERM, _interrupt)  # leaves like Ctrl-C, through the clean-up below
        try:
            cluster.start(args.timeout)
            print(f"{nats_server_version(binary)}, {args.nodes} node(s) ready in {cluster.startup_seconds:.1f} s")
            for node in cluster.nodes:
                print(
                    f"  {node.name}: mqtt 127.0.0.1:{node.mqtt_port}  nats 127.0.0.1:{node.client_port}"
                    f"  monitor http://127.0.0.1:{node.http_port}  pid {node.proc.pid if node.proc else '-'}"
                )
                print(f"      restart after kill -9: {node.binary} -c {node.config_path}")
            print(f"  configs, stores, logs: {workdir}")
            addresses = ", ".join(f'"127.0.0.1:{p}"' for p in cluster.mqtt_ports)
            print(f"  bridge upstream addresses = [{addresses}]")
            print("Ctrl-C stops the cluster (a node restarted by hand is not stopped).", flush=True)
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
        finally:
            cluster.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

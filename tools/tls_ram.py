"""Measure the RAM a TLS client and the TLS set-up take on the firmware (unix port).

    python -m tools.tls_ram                 # 12 clients, plain then TLS
    python -m tools.tls_ram --clients 20 --heaptrack

Theory of operation
-------------------
firmware/main.py runs under the MicroPython unix port (`micropython`, whose
`ssl` is mbedTLS as on the ESP32 and the Pico W) with the Pico W settings,
widened so that `--clients` clients fit, and prints its heap every second.
The same run is made twice, plain and over TLS (certificates made here by
trustme, installed as DER by tools.deploy.der_files); in each, N clients
connect one after the other (MQTT CONNECT, CONNACK) and stay. Two heaps
are read:

  MicroPython heap  gc.mem_alloc() after gc.collect() (the firmware's heap
                    line): the SSLContext, SSLSocket objects, the shell's
                    bookkeeping. On the Pico W mbedTLS allocates here too.
  C heap            on the unix port mbedTLS allocates with malloc, outside
                    the MicroPython heap: the process's resident set
                    (VmRSS) delta, or with --heaptrack the malloc peak
                    from heaptrack. (The PyPI `micropython` runs the port
                    inside a CPython process, idle meanwhile: its share
                    is the same in every run and cancels out.)

Per TLS client = (TLS run with N clients - TLS run with 0) / N minus the same
for plain clients; at start = TLS run with 0 clients - plain run with 0.
The peak of a handshake (ECDHE, the certificate parse) shows as the first
client costing more than the next ones in the C heap (freed memory stays
in the process) and as the heaptrack peak. The figures are 64-bit; the
boards' mbedTLS structures are smaller, its record buffers (16 KB in, 4 KB
out: MBEDTLS_SSL_IN/OUT_CONTENT_LEN of MicroPython's config) the same.
Prints one JSON object at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
_HEAP = re.compile(rb"^heap t=\d+ free=(\d+) alloc=(\d+) open=(\d+)", re.M)


def _connect_packet(client_id: str) -> bytes:
    cid = client_id.encode()
    body = b"\x00\x04MQTT\x04\x02\x00\x3c" + len(cid).to_bytes(2, "big") + cid
    return bytes([0x10, len(body)]) + body


class Firmware:
    def __init__(self, work: Path, device: dict[str, Any], clients: int, heaptrack: bool) -> None:
        self.work = work
        self.log = work / "broker.log"
        limits = {"max_connections": clients + 1, "max_sessions": clients + 4, "connect_timeout": 30}
        device = {
            "board": "rp2040_picow",
            "host": "127.0.0.1",
            "storage": "none",
            "limits": limits,
            "server": {"max_sockets": clients + 4, "heap_report": 1},
            **device,
        }
        (work / "siskin.json").write_text(json.dumps(device))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        exe = shutil.which("micropython", path=str(Path(sys.executable).parent)) or "micropython"
        cmd = [exe, "-X", "heapsize=2M", str(REPO_ROOT / "firmware" / "main.py"), "--config", str(work / "siskin.json")]
        cmd += ["--port", str(self.port)]
        self.heaptrack_out = work / "heaptrack"
        if heaptrack:
            cmd = ["heaptrack", "-o", str(self.heaptrack_out), *cmd]
        with self.log.open("wb") as logf:
            self.proc = subprocess.Popen(
                cmd, stdout=logf, stderr=subprocess.STDOUT, env=dict(os.environ, MICROPYPATH=".frozen")
            )
        self.pid = self.proc.pid
        deadline = time.monotonic() + 30
        while b"listening on" not in self.log.read_bytes():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"tls_ram: the firmware did not start:\n{self.log.read_text()}")
            time.sleep(0.05)
        if heaptrack:  # heaptrack runs micropython as its child
            out = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True, text=True).stdout.split()
            for pid in out:
                if b"micropython" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    self.pid = int(pid)

    def heap(self, open_count: int) -> int:
        """The MicroPython heap in use (a heap line after `open_count` connections are open)."""
        seen = len(_HEAP.findall(self.log.read_bytes()))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            lines = _HEAP.findall(self.log.read_bytes())
            if len(lines) > seen + 1 and int(lines[-1][2]) == open_count:
                return int(lines[-1][1])
            time.sleep(0.1)
        raise SystemExit(f"tls_ram: no heap line with open={open_count}")

    def rss(self) -> int:
        status = Path(f"/proc/{self.pid}/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) * 1024  # type: ignore[union-attr]

    def stop(self) -> dict[str, int]:
        os.kill(self.pid, 2)  # SIGINT: a graceful stop (the micropython process, under heaptrack too)
        self.proc.wait(60)
        if not self.heaptrack_out.parent.exists():
            return {}
        traces = list(self.work.glob("heaptrack*"))
        if not traces:
            return {}
        massif = self.work / "massif.out"
        subprocess.run(["heaptrack_print", "-M", str(massif), str(traces[0])], capture_output=True, check=True)
        heap = [int(v) for v in re.findall(r"^mem_heap_B=(\d+)", massif.read_text(), re.M)]
        return {"c_heap_peak": max(heap)} if heap else {}


def run(
    work: Path, device: dict[str, Any], clients: int, ctx: ssl.SSLContext | None, heaptrack: bool
) -> dict[str, Any]:
    fw = Firmware(work, device, clients, heaptrack)
    out: dict[str, Any] = {"heap0": fw.heap(0), "rss0": fw.rss()}
    socks = []
    try:
        for i in range(clients):
            sock = socket.create_connection(("127.0.0.1", fw.port), timeout=10)
            if ctx is not None:
                sock = ctx.wrap_socket(sock, server_hostname="localhost")
            sock.sendall(_connect_packet(f"ram-{i}"))
            if sock.recv(4) != b"\x20\x02\x00\x00":
                raise SystemExit(f"tls_ram: client {i} refused:\n{fw.log.read_text()[-2000:]}")
            socks.append(sock)
            if i == 0:
                out["heap1"], out["rss1"] = fw.heap(1), fw.rss()
        out["heapN"], out["rssN"] = fw.heap(clients), fw.rss()
    finally:
        for sock in socks:
            sock.close()
        if heaptrack:
            time.sleep(1)
        out.update(fw.stop())
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tools/tls_ram", description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=12, help="clients connected in each run (default 12)")
    ap.add_argument("--heaptrack", action="store_true", help="also run the TLS firmware under heaptrack (C heap peak)")
    args = ap.parse_args(argv)
    import trustme

    from tools.deploy import der_files

    n = args.clients
    with tempfile.TemporaryDirectory(prefix="siskin-tls-ram-") as tmp:
        root = Path(tmp)
        ca = trustme.CA()
        leaf = ca.issue_cert("localhost", "127.0.0.1")
        leaf.cert_chain_pems[0].write_to_path(str(root / "cert.pem"))
        leaf.private_key_pem.write_to_path(str(root / "key.pem"))
        der = der_files({"certfile": root / "cert.pem", "keyfile": root / "key.pem"}, root)
        tls_device = {"certfile": str(der["certfile"]), "keyfile": str(der["keyfile"])}
        ctx = ssl.create_default_context()
        ca.configure_trust(ctx)
        for name in ("plain", "plain0", "tls", "tls0", "tls1"):
            (root / name).mkdir()
        plain = run(root / "plain", {}, n, None, False)
        tls = run(root / "tls", tls_device, n, ctx, args.heaptrack)
        result: dict[str, Any] = {
            "clients": n,
            "key": "ECDSA P-256 (trustme)",
            "start_upy_heap": tls["heap0"] - plain["heap0"],
            "start_rss": tls["rss0"] - plain["rss0"],
            "per_client_upy_heap": (tls["heapN"] - tls["heap0"] - plain["heapN"] + plain["heap0"]) // n,
            "per_client_rss": (tls["rssN"] - tls["rss0"] - plain["rssN"] + plain["rss0"]) // n,
            "per_client_rss_after_first": (tls["rssN"] - tls["rss1"] - plain["rssN"] + plain["rss1"]) // max(n - 1, 1),
            "first_client_rss": (tls["rss1"] - tls["rss0"]) - (plain["rss1"] - plain["rss0"]),
        }
        if args.heaptrack and n > 1:
            # The malloc peak is the last handshake's: peak(k) = peak(0) + k x steady + the handshake's extra.
            peaks = [run(root / f"tls{k}", tls_device, k, ctx, True)["c_heap_peak"] for k in (0, 1)]
            steady = (tls["c_heap_peak"] - peaks[1]) // (n - 1)
            result["start_c_heap"] = peaks[0] - run(root / "plain0", {}, 0, None, True)["c_heap_peak"]
            result["c_heap_peak_0_1_n"] = [*peaks, tls["c_heap_peak"]]
            result["c_heap_per_client"] = steady
            result["c_heap_handshake_extra"] = peaks[1] - peaks[0] - steady
        print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The real image on a wire: an emulated board whose UART0 is a PPP link to a
peer on the host, in a network namespace of its own (tests/emu/test_emu_ppp.py,
tools/emu/heap.py; root: `ip netns`, /dev/net/tun).

    with ServedBoard(tmp_path, uf2, layout, config) as s:   # dialled, PPP up
        s.in_ns(lambda: ...)          # code run in the namespace (paho clients)
        s.ns("mosquitto_pub", ...)    # a command run in the namespace
        s.hang_up()                   # the peer cuts the link (LCP Terminate, NO CARRIER)
        s.power_cut()                 # the emulator killed: its flash as it was, restarted

The namespace holds the peer's TUN device (10.0.0.1, the board 10.0.0.2) and
nothing else: no route leaves it. While the block runs, a thread keeps the
emulator running (`serve`, 50 emulated ms at a time), so host clients talk to
the chip; every wait is for a state (a console line, a peer event, a client's
callback), bounded only by a wall-clock guard against a hang.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from tools.emu.board import EmuBoard
from tools.emu.fsimage import LAYOUTS

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
BOARD_IP = "10.0.0.2"
PEER_IP = "10.0.0.1"
GUARD_S = 600.0  # wall-clock guard against a hang (a loaded machine runs the chip slowly)
CLONE_NEWNET = 0x40000000
T = TypeVar("T")
TLS_PORT = 8883
# The Pico W's shape with TLS (docs/boards.md "TLS on a board"): a TLS
# connection takes ~24 KB of the heap, so 3 clients and the refusal slot.
TLS_LIMITS = {"max_connections": 3}
TLS_SERVER = {"max_sockets": 5}


def board_tls(tmp: Path) -> tuple[dict[str, Any], dict[str, bytes], ssl.SSLContext]:
    """A CA and the board's certificate for BOARD_IP (ECDSA P-256): the device
    config's TLS keys, its files for the board (DER, as tools/deploy writes
    them) and a client's context that trusts the CA."""
    import trustme

    from tools.deploy import der_files

    ca = trustme.CA()
    cert = ca.issue_cert(BOARD_IP)
    cert.cert_chain_pems[0].write_to_path(str(tmp / "board.crt.pem"))
    cert.private_key_pem.write_to_path(str(tmp / "board.key.pem"))
    der = der_files({"certfile": tmp / "board.crt.pem", "keyfile": tmp / "board.key.pem"}, tmp)
    files = {"board.crt.der": der["certfile"].read_bytes(), "board.key.der": der["keyfile"].read_bytes()}
    config = {"port": TLS_PORT, "certfile": "board.crt.der", "keyfile": "board.key.der", "limits": TLS_LIMITS}
    ctx = ssl.create_default_context(cadata=ca.cert_pem.bytes().decode())
    return config, files, ctx


class ServedBoard:
    def __init__(
        self,
        tmp_path: Path,
        uf2: Path,
        bootrom: Path,
        layout: str,
        config: dict[str, Any],
        files: dict[str, bytes] | None = None,
    ) -> None:
        self.tmp = tmp_path
        self.uf2 = uf2
        self.bootrom = bootrom
        self.layout = layout
        self.ns_name = f"siskin-emu-{os.getpid()}"
        self.sock = tmp_path / "uart0.sock"
        self.peer_events: list[str] = []
        self.files = {"siskin.json": json.dumps(config).encode(), **(files or {})}  # (the board's file system)
        self.board: EmuBoard | None = None
        self.peer: subprocess.Popen[str] | None = None
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        self.failure: BaseException | None = None
        self.consoles: list[str] = []  # the console of each power-on before this one

    # ------------------------------------------------------------ set-up

    def __enter__(self) -> ServedBoard:
        subprocess.run(["ip", "netns", "del", self.ns_name], capture_output=True)
        subprocess.run(["ip", "netns", "add", self.ns_name], check=True)
        try:
            self._power_on(None)
        except BaseException:
            self.__exit__()
            raise
        return self

    def _start_peer(self) -> None:
        # SISKIN_PPP_TRACE=1: the peer logs every IP packet (peer_events).
        trace = ["--trace"] if os.environ.get("SISKIN_PPP_TRACE") else []
        peer = [sys.executable, "-m", "tools.emu.ppp_peer", "--socket", str(self.sock), *trace]
        self.peer = subprocess.Popen(
            ["ip", "netns", "exec", self.ns_name, *peer, "--local", PEER_IP, "--remote", BOARD_IP],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.peer.stdout is not None
        assert self.peer.stdout.readline().strip() == "ready"
        threading.Thread(target=self._read_peer, args=(self.peer,), daemon=True).start()

    def _read_peer(self, peer: subprocess.Popen[str]) -> None:
        assert peer.stdout is not None
        for line in peer.stdout:
            self.peer_events.append(line.strip())

    def _power_on(self, flash: Path | None) -> None:
        self._start_peer()
        files = self.files if flash is None else None
        self.board = EmuBoard(
            self.uf2, self.bootrom, LAYOUTS[self.layout], files=files, flash=flash, workdir=self.tmp, uart0=self.sock
        )
        self.stop.clear()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        assert self.board is not None
        try:
            while not self.stop.is_set():
                self.board.serve(50)
        except BaseException as e:  # reported by the next wait
            self.failure = e

    def _halt(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join()
            self.thread = None

    def __exit__(self, *exc: object) -> None:
        self._halt()
        if self.board is not None:
            self.board.close()
        if self.peer is not None:
            self.peer.terminate()
            self.peer.wait()
        subprocess.run(["ip", "netns", "del", self.ns_name], capture_output=True)

    # ------------------------------------------------------------- waits

    def console(self) -> str:
        assert self.board is not None
        return self.board.console()

    def wait_console(self, pattern: str, after: int = 0) -> re.Match[str]:
        """The first match of `pattern` in the console from offset `after` (wall-clock guard only)."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + GUARD_S
        while time.monotonic() < deadline:
            if self.failure is not None:
                raise AssertionError(f"the emulator failed: {self.failure!r}\n{self.console()[-3000:]}")
            m = rx.search(self.console(), after)
            if m is not None:
                return m
            time.sleep(0.05)
        raise AssertionError(f"no {pattern!r} on the console:\n{self.console()[-3000:]}")

    def wait_peer(self, event: str, count: int = 1) -> None:
        deadline = time.monotonic() + GUARD_S
        while self.peer_events.count(event) < count:
            assert time.monotonic() < deadline, (event, self.peer_events)
            time.sleep(0.05)

    def recv_exact(self, sock: socket.socket, n: int) -> bytes:
        """`n` bytes from a client's socket; fails at once if the chip resets
        (its watchdog: a hang on the chip) or the emulator fails meanwhile."""
        assert self.board is not None
        resets = self.board.resets
        data = bytearray()
        deadline = time.monotonic() + GUARD_S
        sock.settimeout(0.5)
        while len(data) < n:
            if self.failure is not None or self.board.resets != resets:
                why = f"the emulator failed: {self.failure!r}" if self.failure else "the chip reset (its watchdog)"
                raise AssertionError(f"{why}, {len(data)} of {n} B received:\n{self.console()[-3000:]}")
            assert time.monotonic() < deadline, f"{len(data)} of {n} B received"
            try:
                chunk = sock.recv(n - len(data))
            except TimeoutError:
                continue
            assert chunk, f"connection closed, {len(data)} of {n} B received:\n{self.console()[-3000:]}"
            data += chunk
        return bytes(data)

    def emulated_ms(self) -> int:
        assert self.board is not None
        return self.board.t_ms

    # ----------------------------------------------------------- actions

    def ns(self, *cmd: str, timeout: float = GUARD_S) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ip", "netns", "exec", self.ns_name, *cmd], capture_output=True, text=True, timeout=timeout
        )

    def popen_ns(self, *cmd: str) -> subprocess.Popen[str]:
        return subprocess.Popen(["ip", "netns", "exec", self.ns_name, *cmd], stdout=subprocess.PIPE, text=True)

    def in_ns(self, fn: Callable[[], T]) -> T:
        """fn() in a thread that entered the namespace (threads it starts stay there)."""
        result: list[Any] = []

        def run() -> None:
            libc = ctypes.CDLL(None, use_errno=True)
            with open("/run/netns/" + self.ns_name) as f:
                if libc.setns(f.fileno(), CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "setns")
            try:
                result.append(("ok", fn()))
            except BaseException as e:
                result.append(("error", e))

        t = threading.Thread(target=run)
        t.start()
        t.join()
        kind, value = result[0]
        if kind == "error":
            raise value
        return value  # type: ignore[no-any-return]

    def hang_up(self) -> None:
        assert self.peer is not None
        self.peer.send_signal(10)  # SIGUSR1: tools/emu/ppp_peer.py cuts the link

    def power_cut(self) -> None:
        """The power goes: the emulator stops at this emulated instant (its flash
        as the chip left it) and the peer loses the line; then power comes back."""
        assert self.board is not None and self.peer is not None
        self._halt()
        flash = self.tmp / "flash.bin"
        self.board.save_flash(flash)
        self.consoles.append(self.console())
        self.board.proc.kill()
        self.board.proc.wait()
        self.board.close()
        self.peer.terminate()
        self.peer.wait()
        self.peer_events.clear()
        self._power_on(flash)

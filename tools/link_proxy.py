"""A TCP proxy on loopback that a test or a tool drives to break a link on purpose.

    with LinkProxy(mosquitto_port) as link:   # listens on link.port
        ...                                   # point the bridge at link.port
        link.reset()     # every connection gets a TCP RST now; new ones go through
        link.down()      # every connection reset, and each new one too, until up()
        link.stall()     # sockets stay open, nothing moves either way (a hung
                         # peer, a dead route): new ones are accepted and left hanging
        link.up()        # back to forwarding (a stalled connection resumes)

    LinkProxy(port, delay=0.02)               # a link of 20 ms each way (40 ms round trip)

With a delay, what is read from one side is held for `delay` s (the time
on the wire) before it is written to the other: a round trip costs twice
the delay, as over a WAN; the bandwidth stays the loopback's.

It runs in a thread of its own (a selector over non-blocking sockets, with
a buffer per direction), so the process that drives it keeps its own
clients going meanwhile. Used by tests/host/test_bridge_outages.py and
tools/bridge_outage.py (`--cut proxy`).
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import struct
import threading
import time
from collections import deque
from typing import Any

READ = 65536


class _Pair:
    """One proxied connection: the client's socket and the target's."""

    def __init__(self, client: socket.socket, target: socket.socket | None) -> None:
        self.client = client
        self.target = target
        self.out: dict[socket.socket, bytearray] = {client: bytearray()}
        # (due time, bytes) on the wire to each socket: released into out then
        self.wire: dict[socket.socket, deque[tuple[float, bytes]]] = {client: deque()}
        if target is not None:
            self.out[target] = bytearray()
            self.wire[target] = deque()
        self.stalled = target is None

    def other(self, s: socket.socket) -> socket.socket | None:
        return self.target if s is self.client else self.client


class LinkProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1", delay: float = 0.0) -> None:
        """`delay`: s each way (0: none)."""
        self.target = (target_host, target_port)
        self.delay = delay
        self.on_wire: set[_Pair] = set()  # pairs with bytes on the wire
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.listener.setblocking(False)
        self.port: int = self.listener.getsockname()[1]
        self.mode = "up"
        self.accepted = 0  # connections accepted so far
        self.resets = 0  # connections reset so far
        self.sel = selectors.DefaultSelector()
        self.pairs: dict[socket.socket, _Pair] = {}
        self.lock = threading.Lock()
        self.wake_r, self.wake_w = socket.socketpair()
        self.wake_r.setblocking(False)
        self.pending: tuple[str, threading.Event | None] = ("", None)
        self.running = True
        self.thread = threading.Thread(target=self._run, name="link-proxy", daemon=True)

    # ----------------------------------------------------------- control

    def start(self) -> LinkProxy:
        self.sel.register(self.listener, selectors.EVENT_READ)
        self.sel.register(self.wake_r, selectors.EVENT_READ)
        self.thread.start()
        return self

    def reset(self) -> None:
        """A TCP RST on every connection now; new ones go through."""
        self._command("reset")

    def down(self) -> None:
        """Reset every connection, and each new one, until up()."""
        self._command("down")

    def stall(self) -> None:
        """Nothing moves either way; connections stay open; new ones hang."""
        self._command("stall")

    def up(self) -> None:
        self._command("up")

    def connections(self) -> int:
        with self.lock:
            return len({id(p) for p in self.pairs.values()})

    def close(self) -> None:
        self.running = False
        self._command("close")
        self.thread.join(5)
        for pair in list({id(p): p for p in self.pairs.values()}.values()):
            self._drop(pair, False)
        for s in (self.listener, self.wake_r, self.wake_w):
            with contextlib.suppress(OSError):
                s.close()
        self.sel.close()

    def __enter__(self) -> LinkProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _command(self, what: str) -> None:
        done = threading.Event()
        with self.lock:
            self.pending = (what, done)
        with contextlib.suppress(OSError):
            self.wake_w.send(b"x")
        if threading.current_thread() is not self.thread:
            done.wait(5)

    # ------------------------------------------------------------ thread

    def _run(self) -> None:
        while self.running:
            timeout = 0.5
            if self.on_wire:
                due = min(w[0][0] for p in self.on_wire for w in p.wire.values() if w)
                timeout = min(timeout, max(0.0, due - time.monotonic()))
            for key, events in self.sel.select(timeout):
                s: Any = key.fileobj
                if s is self.wake_r:
                    with contextlib.suppress(OSError):
                        self.wake_r.recv(4096)
                    self._apply()
                elif s is self.listener:
                    self._accept()
                else:
                    pair = self.pairs.get(s)
                    if pair is None:
                        continue
                    if events & selectors.EVENT_WRITE:
                        self._flush(pair, s)
                    if events & selectors.EVENT_READ and s in self.pairs:
                        self._read(pair, s)
            if self.on_wire:
                self._arrive()

    def _arrive(self) -> None:
        """What has been on the wire for `delay` s reaches its socket."""
        now = time.monotonic()
        for pair in list(self.on_wire):
            for s, wire in pair.wire.items():
                if wire and wire[0][0] <= now:
                    while wire and wire[0][0] <= now:
                        pair.out[s] += wire.popleft()[1]
                    if s in self.pairs:
                        self._flush(pair, s)
            if not any(pair.wire.values()):
                self.on_wire.discard(pair)

    def _apply(self) -> None:
        with self.lock:
            what, done = self.pending
            self.pending = ("", None)
        pairs = list({id(p): p for p in self.pairs.values()}.values())
        if what in ("reset", "down"):
            for pair in pairs:
                self._drop(pair, True)
        if what in ("down", "stall", "up"):
            self.mode = what
        if what == "stall":
            for pair in pairs:
                pair.stalled = True
                self._interest(pair)
        if what == "up":
            for pair in pairs:
                if pair.target is None:  # accepted while stalled: never reached the target
                    self._drop(pair, False)
                    continue
                pair.stalled = False
                self._interest(pair)
        if done is not None:
            done.set()

    def _accept(self) -> None:
        try:
            client, _ = self.listener.accept()
        except OSError:
            return
        self.accepted += 1
        client.setblocking(False)
        if self.mode == "down":
            self._rst(client)
            self.resets += 1
            return
        target = None
        if self.mode == "up":
            try:
                target = socket.create_connection(self.target, timeout=5)
            except OSError:
                self._rst(client)
                return
            target.setblocking(False)
        pair = _Pair(client, target)
        with self.lock:
            self.pairs[client] = pair
            if target is not None:
                self.pairs[target] = pair
        if not pair.stalled:
            self.sel.register(client, selectors.EVENT_READ)
        if target is not None:
            self.sel.register(target, selectors.EVENT_READ)

    def _interest(self, pair: _Pair) -> None:
        for s in (pair.client, pair.target):
            if s is None:
                continue
            events = 0
            if not pair.stalled:
                events = selectors.EVENT_READ | (selectors.EVENT_WRITE if pair.out[s] else 0)
            try:
                if events:
                    try:
                        self.sel.modify(s, events)
                    except KeyError:
                        self.sel.register(s, events)
                else:
                    with contextlib.suppress(KeyError):
                        self.sel.unregister(s)
            except (OSError, ValueError):
                pass

    def _read(self, pair: _Pair, s: socket.socket) -> None:
        try:
            data = s.recv(READ)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._drop(pair, False)
            return
        other = pair.other(s)
        if other is None:
            return
        if self.delay:
            pair.wire[other].append((time.monotonic() + self.delay, data))
            self.on_wire.add(pair)
            return
        pair.out[other] += data
        self._flush(pair, other)

    def _flush(self, pair: _Pair, s: socket.socket) -> None:
        buf = pair.out[s]
        if buf and not pair.stalled:
            try:
                n = s.send(buf)
                del buf[:n]
            except BlockingIOError:
                pass
            except OSError:
                self._drop(pair, False)
                return
        self._interest(pair)

    def _drop(self, pair: _Pair, rst: bool) -> None:
        self.on_wire.discard(pair)
        with self.lock:
            for s in (pair.client, pair.target):
                if s is not None:
                    self.pairs.pop(s, None)
        for s in (pair.client, pair.target):
            if s is None:
                continue
            with contextlib.suppress(KeyError, ValueError, OSError):
                self.sel.unregister(s)
            if rst:
                self._rst(s)
            else:
                with contextlib.suppress(OSError):
                    s.close()
        if rst:
            self.resets += 1

    @staticmethod
    def _rst(s: socket.socket) -> None:
        """Close with a TCP RST (SO_LINGER on, 0 s)."""
        with contextlib.suppress(OSError):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        with contextlib.suppress(OSError):
            s.close()

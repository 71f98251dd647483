"""Plain MQTT listeners on an epoll of the host's own, without asyncio's transports.

Theory of operation
-------------------
A connection's life on asyncio's transports costs more Python than the
core's whole CONNECT: a Task per accepted socket, a transport with its
futures and handles, a call_soon per event (docs/benchmarks.md, the
connect path's profiles). On PyPy that code is interpreted until the JIT
has seen it thousands of times; on CPython it is most of a connect's CPU.
So a plain listener (TCP, no TLS, no WebSocket) puts its listening socket
and every socket it accepts into one `select.epoll` of its own, whose file
descriptor is the one thing the event loop watches (`loop.add_reader`:
uvloop's loop). On asyncio's own loop (`shared_selector.new_event_loop()`: always on
PyPy) there is one epoll, not two: the loop's selector is a
`SharedEpollSelector`, the hub registers its sockets in the selector's
epoll, and the selector hands their events to the hub from the same
`epoll_wait` that serves the loop (one system call per loop turn instead of
the loop's wait and then the hub's). Either way, `dispatch()` takes every
ready event at once and does what a transport would, with nothing per
event but the system call:

- a listening socket: accept until the backlog is empty (at most
  ACCEPT_BATCH per poll), each socket non-blocking with TCP_NODELAY,
  registered for reading, handed to the driver (a `PlainConnection` is its
  handle);
- a readable socket: `recv_into` one buffer the hub shares between all its
  connections, handed to the server's input path (events.py's input:
  server.py, common/turns.py) as a memoryview: the core copies what it keeps
  (FrameReader.keep, Turns put off);
- a writable one: what the kernel did not take before goes now.

A write is a `send` from the core's buffer at once; what the kernel does
not take is copied and waits for EPOLLOUT. Above `write_buffer_high`
bytes waiting, the driver is told (set_paused), and again at or below
`write_buffer_low`: the water marks of a transport. A half-close is
shutdown(SHUT_WR) once the output drained (reading goes on: the driver
discards it); a close waits for the output, an abort does not. Sockets are
level-triggered; a socket that wants neither reading nor writing is
unregistered, so that a hang-up it cannot act on does not spin the loop.
The loss of a connection reaches the driver on the next loop turn
(call_soon), never from inside a write the driver made: asyncio's order.
The fd -> connection table drops a socket when it is closed, so an event
left for its number in the same poll finds a newer socket at most, which
the event's read or write then finds not ready (EAGAIN): no event is acted
on by its flags alone.

Where there is no epoll (not Linux), listeners.py keeps asyncio's server
for plain listeners too. The selector that shares asyncio's epoll, and the
private fields it reads, are cpython_host/transports/shared_selector.py's.
"""

from __future__ import annotations

import asyncio
import logging
import select
import socket
from typing import Any

from cpython_host.transports.events import ConnectionEvents
from cpython_host.transports.shared_selector import MAX_EVENTS, SharedEpollSelector, raw_accept

log = logging.getLogger("siskin.host")

AVAILABLE = hasattr(select, "epoll")

# Bytes one read takes at most (asyncio's selector transports: 256 KiB).
RECV_SIZE = 262144
# Sockets accepted per listener per poll: a storm of connections is taken
# in batches, the established clients' events in between.
ACCEPT_BATCH = 256
_IN = select.EPOLLIN if AVAILABLE else 1
_OUT = select.EPOLLOUT if AVAILABLE else 4
_TCP_NODELAY = getattr(socket, "TCP_NODELAY", 1)
_AGAIN = (BlockingIOError, InterruptedError)

# PlainConnection.state
_OPEN = 0
_SHUT_AFTER = 1  # half-close once the output drained
_SHUT = 2  # half-closed (FIN sent): reading until the peer's EOF
_CLOSE_AFTER = 3  # close once the output drained; not read any more
_CLOSED = 4


class PlainConnection:
    """One accepted socket: the driver's handle (common/driver.py)."""

    __slots__ = ("cid", "fd", "hub", "mask", "out", "paused", "peer", "reading", "sock", "state")

    def __init__(self, hub: EpollHub, sock: socket.socket, fd: int, peer: str) -> None:
        self.hub = hub
        self.sock = sock
        self.fd = fd
        self.peer = peer
        self.cid = -1
        self.out: bytearray | None = None  # what the kernel did not take yet
        self.paused = False  # above the high-water mark (the driver was told)
        self.reading = True
        self.mask = _IN  # as registered with the epoll; 0 = not registered
        self.state = _OPEN

    # ------------------------------------------------ the driver's handle

    def write(self, data: Any) -> None:
        # `data` is the core's buffer, valid during the call: sent from it,
        # and only what the kernel leaves is copied.
        if self.state >= _CLOSE_AFTER or self.state == _SHUT:
            return
        out = self.out
        if out is not None:
            out += data
        else:
            try:
                n = self.sock.send(data)
            except _AGAIN:
                n = 0
            except OSError as e:
                self.hub.failed(self, e)
                return
            if n == len(data):
                return
            self.out = out = bytearray(memoryview(data)[n:])
            self.hub.watch(self)
        if not self.paused and len(out) > self.hub.high:
            self.paused = True
            self.hub.events.set_paused(self.cid, True)

    def half_close(self) -> None:
        if self.state != _OPEN:
            return
        self.reading = True  # read (and discard) until the peer's EOF
        if self.out is None:
            self._shut()
        else:
            self.state = _SHUT_AFTER
        self.hub.watch(self)

    def close(self) -> None:
        if self.state >= _CLOSE_AFTER:
            return
        if self.out is None:
            self.hub.closed(self)
        else:
            self.state = _CLOSE_AFTER
            self.reading = False
            self.hub.watch(self)

    def abort(self) -> None:
        if self.state != _CLOSED:
            self.out = None
            self.hub.closed(self)

    def pending(self) -> int:
        out = self.out
        return 0 if out is None else len(out)

    def pause_reading(self) -> None:
        if self.reading and self.state < _CLOSE_AFTER:
            self.reading = False
            self.hub.watch(self)

    def resume_reading(self) -> None:
        if not self.reading and self.state < _CLOSE_AFTER:
            self.reading = True
            self.hub.watch(self)

    # --------------------------------------------------------- the hub's

    def _shut(self) -> None:
        self.state = _SHUT
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError as e:
            self.hub.failed(self, e)

    def writable(self) -> None:
        out = self.out
        if out is None:
            return
        try:
            n = self.sock.send(out)
        except _AGAIN:
            return
        except OSError as e:
            self.hub.failed(self, e)
            return
        del out[:n]
        hub = self.hub
        if self.paused and len(out) <= hub.low:
            self.paused = False
            hub.events.set_paused(self.cid, False)
            hub.events.flush_soon()
        if out:
            return
        self.out = None
        if self.state == _CLOSE_AFTER:
            hub.closed(self)
            return
        if self.state == _SHUT_AFTER:
            self._shut()
        hub.watch(self)


class EpollHub:
    """The plain listeners' sockets and their connections, in one epoll."""

    def __init__(self, events: ConnectionEvents, loop: asyncio.AbstractEventLoop) -> None:
        self.events = events
        self.loop = loop
        self.high = events.write_high
        self.low = events.write_low
        self.by_fd: dict[int, Any] = {}  # fd -> PlainConnection, or (Listening, listening socket)
        self.buf = bytearray(RECV_SIZE)
        self.view = memoryview(self.buf)
        self.lost: list[tuple[PlainConnection, Exception | None]] = []  # closed, not yet reported
        shared = getattr(loop, "shared_selector", None)
        if shared is not None and shared.hub is None:
            self.shared: SharedEpollSelector | None = shared
            self.epoll = shared.epoll
            shared.hub = self
        else:
            self.shared = None
            self.epoll = select.epoll()
            loop.add_reader(self.epoll.fileno(), self.poll)

    def listen(self, listening: Any, sock: socket.socket) -> None:
        """Accept on `sock` (bound, listening, non-blocking) for `listening`."""
        fd = sock.fileno()
        # (its family as an int: socket.family converts to an enum at each read)
        self.by_fd[fd] = (listening, sock, int(sock.family))
        self.epoll.register(fd, _IN)

    def unlisten(self, sock: socket.socket) -> None:
        """Stop accepting on `sock` (the caller closes it)."""
        fd = sock.fileno()
        if self.by_fd.pop(fd, None) is not None:
            self.epoll.unregister(fd)

    def close(self) -> None:
        """The end of serving: the hub's own epoll goes (every socket is closed by now)."""
        if self.shared is not None:
            self.shared.hub = None  # the loop's epoll is the loop's to close
            return
        self.loop.remove_reader(self.epoll.fileno())
        self.epoll.close()

    # ------------------------------------------------------------- events

    def poll(self) -> None:
        """The hub's own epoll is readable (uvloop's loop): take its events."""
        self.dispatch(self.epoll.poll(0, MAX_EVENTS))

    def dispatch(self, ready: list[tuple[int, int]]) -> None:
        """Act on `ready`, (fd, events) of the hub's sockets from one epoll_wait."""
        by_fd = self.by_fd
        for fd, events in ready:
            c = by_fd.get(fd)
            if c is None:
                continue  # closed earlier in this poll
            if type(c) is tuple:
                self.accept(c[0], c[1], c[2])
                continue
            if events & _OUT:
                c.writable()
            if c.reading and c.state != _CLOSED:
                self.readable(c)

    def readable(self, c: PlainConnection) -> None:
        try:
            n = c.sock.recv_into(self.buf)
        except _AGAIN:
            return
        except OSError as e:
            self.failed(c, e)
            return
        events = self.events
        if n:
            if c.state == _OPEN:
                events.input(c.cid, self.view[:n])
            # else half-closed: what comes until the EOF is discarded, as the driver would
            return
        # The peer's EOF.
        if c.state == _OPEN and events.eof(c.cid, True):
            c.reading = False  # input still waits for its turn (common/turns.py); closed after it
            self.watch(c)
            return
        c.close()

    def accept(self, listening: Any, lsock: socket.socket, family: int) -> None:
        events = self.events
        for _ in range(ACCEPT_BATCH):
            try:
                # The system call alone: socket.accept() would read the
                # listening socket's type and family as enums, and ask the
                # new socket for its own.
                fd, addr = raw_accept(lsock)
            except _AGAIN:
                return
            except ConnectionAbortedError:
                continue
            except OSError as e:  # out of file descriptors: let some close
                log.error("accept on %s failed: %s; retrying in 1 s", listening.name, e.strerror or e)
                self.unlisten(lsock)
                self.loop.call_later(1.0, self._relisten, listening, lsock)
                return
            host = addr[0]
            peer = f"[{host}]:{addr[1]}" if ":" in host else f"{host}:{addr[1]}"
            sock = socket.socket(family, socket.SOCK_STREAM, 0, fd)
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, _TCP_NODELAY, 1)
                self.epoll.register(fd, _IN)
            except OSError:  # gone already
                sock.close()
                continue
            c = PlainConnection(self, sock, fd, peer)
            self.by_fd[fd] = c
            cid = events.connection_made(c, (peer, None, listening.local, listening.config.key))
            if cid < 0:
                # Far beyond max_connections: not even a polite CONNACK.
                log.warning("refused connection from %s: too many connections", peer)
                del self.by_fd[fd]
                c.state = _CLOSED
                sock.close()
                continue
            c.cid = cid
            if events.debug:
                log.debug("connection #%d from %s opened", cid, peer)

    def _relisten(self, listening: Any, lsock: socket.socket) -> None:
        if lsock.fileno() >= 0 and lsock in listening.sockets:
            self.listen(listening, lsock)

    # ------------------------------------------------------------ helpers

    def watch(self, c: PlainConnection) -> None:
        """Register `c` for what it wants now: reading, writing, neither."""
        if c.state == _CLOSED:
            return
        mask = (_IN if c.reading else 0) | (_OUT if c.out is not None else 0)
        if mask == c.mask:
            return
        try:
            if not c.mask:
                self.epoll.register(c.fd, mask)
            elif not mask:
                self.epoll.unregister(c.fd)
            else:
                self.epoll.modify(c.fd, mask)
        except OSError as e:
            self.failed(c, e)
            return
        c.mask = mask

    def failed(self, c: PlainConnection, e: Exception) -> None:
        """A system call on `c` failed (reset, broken pipe): it is closed."""
        c.out = None
        self.closed(c, e)

    def closed(self, c: PlainConnection, exc: Exception | None = None) -> None:
        """Close `c`'s socket now; the driver hears of it on the next loop turn."""
        if c.state == _CLOSED:
            return
        c.state = _CLOSED
        c.reading = False
        if self.by_fd.get(c.fd) is c:
            del self.by_fd[c.fd]
        try:
            c.sock.close()  # (closing the socket takes it out of the epoll)
        except OSError:
            pass
        if not self.lost:
            self.loop.call_soon(self._report_lost)
        self.lost.append((c, exc))

    def _report_lost(self) -> None:
        lost = self.lost
        self.lost = []
        events = self.events
        for c, exc in lost:
            if c.cid >= 0:
                cid = c.cid
                c.cid = -1
                events.lost(cid, c.peer, exc)

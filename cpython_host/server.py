"""The asyncio server: a socket adapter for the core's connection driver.

Theory of operation
-------------------
Every decision lives in the core: the Broker (common/broker/broker.py) makes the
MQTT ones, the Driver (common/driver.py) those of the connection's life
(flush, half-close, linger, abort, containment of a core bug, shutdown,
timers, batch sync, $SYS). This module moves bytes and time. Each accepted
socket gets a `ClientProtocol` (asyncio.Protocol: callbacks, no streams, no
per-read task), which is also the driver's handle for that connection:
write / half_close / close / abort / pending / pause_reading are transport
calls.

Flush coalescing (the one decision kept here, because it is about asyncio's
loop): output produced during a loop turn, from any number of inputs, goes
out in ONE transport.write per connection at the end of the turn
(call_soon); after an input that was the turn's last callback on asyncio's
own loop, the flush runs at once instead (see flush_after_input).

Turns (the other one): a loop turn handles at most INPUT_PER_TURN inputs
as they are read, and as many from a queue of inputs put off. A storm of
connections (2,000 clients connecting, or leaving, at once) is read in a
few loop turns of up to a thousand sockets each; handled on the spot, that
batch of CONNECTs (session, CONNACK, log line) or DISCONNECTs would hold
every other client's input back for all of it. So a new connection's first
input (its CONNECT) waits in the queue whenever any input waits there, and
input beyond the turn's allowance joins it: each turn then costs at most
two allowances, and a
client that was not part of the storm is answered within a turn or two
(tests/host/test_server_churn.py, tools/churn.py). Two queues: input from a
connection whose previous input was handled at once goes before input from
one that waited last time too (a new connection, a storm's member, a
client sending more than its share), so a bystander put off once is not
queued behind the whole storm. Input of one connection is handled in the
order it came; its socket is not read while it has input waiting. With
nothing queued, a CONNECT is handled as it is read, like any input within
the allowance: a client reconnecting alone (or a takeover storm of a few
clients) does not pay a loop turn per connection.

Timer: one TimerHandle, re-armed to the delay driver.tick() returns.

Backpressure: the transport's write buffer has high/low water marks
([server] write_buffer_high/low); asyncio's pause_writing/resume_writing
become driver.set_paused (the driver pauses the core's output for that
client and stops reading it; docs/host.md).

Listeners: one per [[listener]] table. A plain one is an asyncio server.
A TLS one accepts in its own loop (sock_accept) and runs each handshake as
a task, loop.connect_accepted_socket bounded by connect_timeout: so the
shell sees a handshake fail (one log line; cpython_host/tls.py says why,
where asyncio's own TLS servers drop it silently) and knows when the
socket was accepted, which the driver uses to start the connect timeout
there, so the handshake spends it too. The ClientProtocol then registers
with the identity the client certificate proved. SIGHUP loads every TLS
listener's files into a new SSLContext for the handshakes that follow;
established connections keep theirs. It also re-reads the [security] users
and rules (reload_security), which apply to connected clients at once, and
the [log] level; one line then says what was reloaded (reload_all). Under
systemd (Type=notify) the shell reports READY=1 once every listener accepts,
RELOADING=1 around a SIGHUP and STOPPING=1 at shutdown (cpython_host/sdnotify.py).
A websockets listener (plain or TLS) gives each socket a WebSocketClient
(cpython_host/websocket.py): this module's ClientProtocol with wsproto in
front, to the same driver.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import os
import signal
import socket
import ssl
import sys
import time
from typing import Any

from common.broker.broker import VERSION, Broker
from common.driver import Driver
from common.store.store import Store
from common.store.storeboot import new_broker
from cpython_host import sdnotify
from cpython_host.config import HostConfig, Listener, loopback_name
from cpython_host.tls import handshake_failure, peer_identity, server_context, usable_identity

log = logging.getLogger("siskin.host")
core_log = logging.getLogger("siskin.core")

try:
    _PAGE = os.sysconf("SC_PAGE_SIZE")
except (ValueError, OSError, AttributeError):  # pragma: no cover - not Linux
    _PAGE = 4096


def rss_bytes() -> int | None:
    """Resident set size of this process from /proc/self/statm, or None ($SYS heap/current)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


# Inputs handled as they are read, and from the queue, per loop turn (see
# Turns above): 64 CONNECTs cost a few ms; fewer would cost a storm more
# loop turns (a poll each), more would let it hold others back longer.
INPUT_PER_TURN = 64


def ticks_ms() -> int:
    """The host's millisecond clock for the driver (it masks and wraps it)."""
    return int(time.monotonic() * 1000)


def address(peername: Any) -> str:
    """A socket's (host, port) as text for the log and the core ("192.0.2.7:50432", "[::1]:50432")."""
    if not peername:
        return "?"
    host = peername[0]
    return f"[{host}]:{peername[1]}" if ":" in host else f"{host}:{peername[1]}"


class ClientProtocol(asyncio.Protocol):
    """One accepted connection: asyncio's protocol and the driver's handle."""

    __slots__ = (
        "accepted",
        "admitted",
        "cid",
        "eof",
        "held",
        "listening",
        "paused",
        "peer",
        "server",
        "transport",
        "waited",
        "waiting",
    )

    def __init__(self, server: BrokerServer, listening: Listening, accepted: int | None = None) -> None:
        self.server = server
        self.listening = listening
        self.accepted = accepted  # ticks_ms() of the accept, when it came before a TLS handshake
        self.transport: Any = None
        self.cid = -1
        self.peer = "?"  # its address as text (for the log and the core), set at connection_made
        self.admitted = False  # its first input was handled (at once or from the queue: see Turns)
        self.waiting: bytes | None = None  # input put off, in the server's queue
        self.paused = False  # not read while input waits (more came meanwhile)
        self.held = False  # not read by the driver's choice (pause_reading)
        self.eof = False  # the peer's EOF came after input still waiting
        self.waited = True  # its last input was put off (a new one counts as such)

    # -------------------------------------------------------------- asyncio

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        server = self.server
        # Kept as the one string the core's peer tuple holds too, not as
        # asyncio's (host, port) tuple: 150 B less per connection.
        self.peer = address(transport.get_extra_info("peername"))
        identity = None
        if self.listening.identity_field is not None:
            identity = certificate_identity(self.listening, transport, self.peer)
            if identity is None:
                server.driver.tls_failed()  # the certificate gives no user name: refused as a handshake
                transport.abort()  # type: ignore[attr-defined]
                return
        cid = server.driver.connection_made(self, (self.peer, identity, self.listening.local), self.accepted)
        if cid < 0:
            # Far beyond max_connections: not even a polite CONNACK.
            log.warning("refused connection from %s: too many connections", self.peer)
            self.transport.abort()
            return
        self.cid = cid
        if self.accepted is not None:
            # After a handshake the connect deadline can be less than the
            # driver's one-second granularity away: let it arm the timer.
            server.rearm_timer()
        # No setsockopt(TCP_NODELAY) here: asyncio and uvloop both set it on
        # every TCP transport they make (checked on both), and a connection
        # storm pays for every system call.
        transport.set_write_buffer_limits(server.write_high, server.write_low)  # type: ignore[attr-defined]
        if server.debug:
            log.debug(
                "connection #%d from %s opened%s",
                cid,
                self.peer,
                "" if identity is None else f" (certificate identity {identity!r})",
            )

    def data_received(self, data: bytes) -> None:
        if self.cid >= 0:
            server = self.server
            if self.waiting is not None or server.spent >= INPUT_PER_TURN or not (self.admitted or server.idle()):
                server.put_off(self, data)
                return
            self.admitted = True
            server.spent += 1
            self.waited = False
            if server.spent == INPUT_PER_TURN:
                server.schedule_turn()  # the allowance is used up: renewed after this turn
            server.driver.data_received(self.cid, data)
            server.flush_after_input()

    def eof_received(self) -> bool:
        # The peer closed its sending side: whatever the core still has for
        # it goes out first, then asyncio closes the transport (False).
        if self.cid >= 0:
            if self.waiting is not None:
                if self.listening.context is None:
                    self.eof = True  # closed after that input, in its turn (next_turn)
                    return True
                self.take_waiting()  # TLS closes now whatever this returns: its input first
            if self.server.driver.wants_flush():
                self.server.flush()
        return False

    def take_waiting(self) -> None:
        """Hand the input put off to the driver now (its turn, or its end)."""
        data = self.waiting
        self.admitted = True
        if data is not None:
            self.waiting = None
            if self.paused:
                self.paused = False
                if not self.held and not self.transport.is_closing():
                    self.transport.resume_reading()
            self.server.driver.data_received(self.cid, data)

    def pause_writing(self) -> None:
        if self.cid >= 0:
            self.server.driver.set_paused(self.cid, True)

    def resume_writing(self) -> None:
        if self.cid >= 0:
            self.server.driver.set_paused(self.cid, False)
            self.server.schedule_flush()

    def connection_lost(self, exc: Exception | None) -> None:
        cid = self.cid
        if cid < 0:
            return
        self.take_waiting()
        self.cid = -1
        server = self.server
        server.driver.connection_lost(cid)
        if server.debug:
            log.debug("connection #%d from %s closed%s", cid, self.peer, f" ({exc})" if exc else "")
        if server.driver.wants_flush():
            server.schedule_flush()  # a will published, a throttled publisher released...
        if not server.driver.open:
            server.all_closed.set()

    # ------------------------------------------------ the driver's handle

    def write(self, data: bytes) -> None:
        # `data` is the core's output buffer, reused after the call: uvloop
        # keeps a view of what it cannot send at once, so it gets a copy.
        self.transport.write(bytes(data))

    def half_close(self) -> None:
        transport = self.transport
        if transport.is_closing():
            return
        transport.resume_reading()  # read (and discard) until the peer's EOF
        if transport.can_write_eof():
            transport.write_eof()
        else:  # TLS transports cannot half-close: close_notify, then close
            transport.close()

    def close(self) -> None:
        self.transport.close()

    def abort(self) -> None:
        self.transport.abort()

    def pending(self) -> int:
        return int(self.transport.get_write_buffer_size())

    def pause_reading(self) -> None:
        self.held = True
        self.transport.pause_reading()

    def resume_reading(self) -> None:
        self.held = False
        if not self.paused:
            self.transport.resume_reading()


IDENTITY_NAMES = {"cn": "CN", "san_dns": "DNS SAN", "san_email": "email SAN", "san_uri": "URI SAN"}


class Listening:
    """One [[listener]] at run time: its asyncio server and, for TLS, the SSLContext handshakes use now."""

    __slots__ = ("accepting", "client", "config", "context", "identity_field", "local", "name", "server", "sockets")

    def __init__(self, config: Listener, context: ssl.SSLContext | None) -> None:
        self.config = config
        self.context = context
        # What each accepted socket gets: MQTT over TCP, or over WebSockets
        # (imported only then: wsproto is needed only by such a listener).
        self.client: type[ClientProtocol] = ClientProtocol
        if config.websockets:
            from cpython_host.websocket import WebSocketClient

            self.client = WebSocketClient
        # the certificate field that is the user name (use_identity_as_username), or None
        self.identity_field = config.identity if config.use_identity_as_username else None
        self.server: asyncio.Server | None = None  # a plain listener's
        self.sockets: list[socket.socket] = []  # a TLS listener's, and their accept loops
        self.accepting: list[asyncio.Task[None]] = []
        self.local = True  # bound to loopback addresses only (set once bound)
        self.name = f"{config.host}:{config.port}"  # the bound address once bound

    def describe(self) -> str:
        """What the start-up log says of it."""
        cfg = self.config
        kind = "plain MQTT"
        if cfg.websockets:
            from cpython_host.websocket import url

            kind = f"MQTT over WebSocket at {url(self)}"
        if self.context is not None:
            tls = f"TLS ({'1.3' if cfg.tls_version == 'tlsv1.3' else '1.2'}+"
            if cfg.require_certificate:
                tls += f", mutual TLS: client certificate required, CA {cfg.cafile}"
                if cfg.use_identity_as_username:
                    tls += f"; its {IDENTITY_NAMES[cfg.identity]} is the user name"
            elif cfg.cafile:
                tls += f", client certificate optional (verified against {cfg.cafile} if sent)"
            tls += ")"
            kind = f"{kind} over {tls}" if cfg.websockets else f"MQTT over {tls}"
        return kind + ("; loopback only" if self.local else "; reachable from the network")


def certificate_identity(listening: Listening, transport: asyncio.BaseTransport, peer: str) -> str | None:
    """The user name the verified client certificate gives; None (logged: refuse the connection) if it gives none."""
    field = listening.identity_field
    assert field is not None
    identity = peer_identity(transport.get_extra_info("peercert"), field)
    if identity is not None and usable_identity(identity):
        return identity
    log.warning(
        "TLS client %s on %s refused: its certificate has %s %s to use as user name (use_identity_as_username)",
        peer,
        listening.name,
        "no" if identity is None else "an unusable",
        IDENTITY_NAMES[field],
    )
    return None


class BrokerServer:
    """Owns the listeners, the timer and the driver around the broker."""

    def __init__(self, driver: Driver, config: HostConfig, contexts: dict[int, ssl.SSLContext]) -> None:
        self.driver = driver
        self.broker = driver.broker
        self.config = config
        self.write_high = config.write_buffer_high
        self.write_low = config.write_buffer_low
        self.all_closed = asyncio.Event()
        self.flush_scheduled = False
        self.loop: asyncio.AbstractEventLoop | None = None
        # asyncio's queue of callbacks still to run in this loop turn (a
        # deque in BaseEventLoop); None for loops that do not expose it.
        self.ready: Any = None
        self.debug = log.isEnabledFor(logging.DEBUG)
        # The store syncs (fsync) before output leaves (store_sync = always).
        listener = driver.broker.listener
        self.syncing = listener if listener.durable and driver.broker.settings.store_sync == "always" else None
        self.listening = [Listening(lst, contexts.get(i)) for i, lst in enumerate(config.listeners())]
        self.handshakes: set[asyncio.Task[None]] = set()
        # Seconds a TLS handshake may take: the connect timeout, which the
        # handshake spends (asyncio wants a positive figure).
        self.handshake_timeout = float(max(self.broker.settings.connect_timeout, 1))
        # Seconds a closing TLS connection waits for the peer's close_notify
        # (asyncio's default, 30 s, would let a silent peer hold its slot):
        # the linger of a plain connection.
        self.tls_shutdown_timeout = max(config.close_linger, 0.1)
        self.timer: asyncio.TimerHandle | None = None
        self.stopping = asyncio.Event()
        # Inputs handled this turn as they were read, and the connections
        # whose input was put off, in order: those that did not wait last
        # time, then those that did (see Turns).
        self.spent = 0
        self.put_off_first: collections.deque[ClientProtocol] = collections.deque()
        self.put_off_queue: collections.deque[ClientProtocol] = collections.deque()
        self.turn_scheduled = False
        self.bridges: list[Any] = []  # cpython_host/bridge.py BridgeRunner, one per [[bridge]]

    # -------------------------------------------------------------- output

    def schedule_flush(self) -> None:
        if not self.flush_scheduled:
            self.flush_scheduled = True
            self.call_soon(self.flush)

    def flush_after_input(self) -> None:
        """End of a data_received: flush now if it was the loop turn's last callback.

        asyncio's loop runs the callbacks of one select() from its `_ready`
        deque; when that is empty, nothing else runs before the next select(),
        so flushing now writes exactly what a call_soon flush would, one loop
        iteration (a select() and a callback) sooner: about a tenth of the
        cost of a PUBLISH -> PUBACK round trip. Otherwise (more input in this
        turn) the flush waits for the end of the turn, so output from many
        inputs still goes out in one write per connection.

        On loops that hide their queue (uvloop), every input is flushed at
        once: libuv reads a readable socket up to 32 times in one go, so
        waiting for the end of the turn would let a firehose publisher pile
        megabytes into the subscribers' output lists before any write could
        report backpressure (pause_writing): tests/host/test_server_backpressure.py
        fails that way. uvloop's writes are cheap enough to pay per input.

        Input that changed the store (a persistent session connecting or
        leaving, a stored message) waits for the end of the turn either way:
        its flush costs an fsync, which one flush per turn shares between all
        of the turn's inputs (a storm of persistent sessions leaving at once
        would otherwise fsync once per client).
        """
        ready = self.ready
        syncing = self.syncing
        if syncing is not None and syncing.pending():
            self.schedule_flush()
        elif ready is None or (not ready and not self.flush_scheduled):
            self.flush()
        else:
            self.schedule_flush()

    def flush(self) -> None:
        self.flush_scheduled = False
        if self.driver.flush():
            # A retained replay can go on (its client's output drained):
            # again on the next loop turn, the other clients' I/O in between.
            self.schedule_flush()

    # ---------------------------------------------------------------- turns

    def put_off(self, proto: ClientProtocol, data: bytes) -> None:
        """Queue input for a later turn (a first input, or over the allowance)."""
        if proto.waiting is not None:
            # More input before its turn came: kept after the rest, and the
            # socket is not read until then.
            proto.waiting += data
            if not proto.paused:
                proto.paused = True
                proto.transport.pause_reading()
            return
        proto.waiting = data
        (self.put_off_queue if proto.waited else self.put_off_first).append(proto)
        proto.waited = True
        self.schedule_turn()

    def idle(self) -> bool:
        """No input waits: a new connection's first input (its CONNECT) may go at once."""
        return not self.put_off_first and not self.put_off_queue

    def schedule_turn(self) -> None:
        if not self.turn_scheduled:
            self.turn_scheduled = True
            self.call_soon(self.next_turn)

    def next_turn(self) -> None:
        # After the input read in this loop turn: a new allowance for the
        # next turn's, and up to INPUT_PER_TURN of the queue now; then again
        # next turn while the queue lasts.
        self.spent = 0
        n = INPUT_PER_TURN
        ended = []
        for queue in (self.put_off_first, self.put_off_queue):
            while queue and n:
                proto = queue.popleft()
                if proto.waiting is not None:  # (None: lost or ended meanwhile, handled then)
                    proto.take_waiting()
                    n -= 1
                    if proto.eof:
                        ended.append(proto)
        self.flush()  # one flush (and store sync) for them all
        for proto in ended:
            proto.transport.close()  # as asyncio would have after eof_received
        self.turn_scheduled = False
        if self.put_off_first or self.put_off_queue:
            self.schedule_turn()

    def call_soon(self, callback: Any) -> None:
        # The loop is cached: asyncio.get_running_loop() costs a getpid()
        # system call on every call.
        loop = self.loop
        if loop is None:
            loop = self.loop = asyncio.get_running_loop()
        loop.call_soon(callback)

    # ---------------------------------------------------------------- timer

    def _on_timer(self) -> None:
        delay = self.driver.tick()
        assert self.loop is not None
        self.timer = self.loop.call_later(delay / 1000, self._on_timer)

    def rearm_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self._on_timer()

    # ------------------------------------------------------------------ TLS

    async def _accept(self, listening: Listening, sock: socket.socket) -> None:
        """A TLS listener's accept loop: each socket's handshake runs as a task of its own."""
        loop = self.loop
        assert loop is not None
        while True:
            try:
                conn, peername = await loop.sock_accept(sock)
            except (ConnectionAbortedError, InterruptedError):
                continue
            except OSError as e:  # out of file descriptors: let some close
                log.error("accept on %s failed: %s; retrying in 1 s", listening.name, e.strerror or e)
                await asyncio.sleep(1)
                continue
            accepted = ticks_ms()
            if len(self.handshakes) >= self.broker.settings.max_connections:
                # Sockets that stall their handshake must not pile up beyond
                # what the broker would hold as connections.
                log.warning(
                    "refused TLS connection from %s: %d handshakes in progress (max_connections)",
                    address(peername),
                    len(self.handshakes),
                )
                conn.close()
                continue
            task = loop.create_task(self._handshake(listening, conn, address(peername), accepted))
            self.handshakes.add(task)
            task.add_done_callback(self.handshakes.discard)

    async def _handshake(self, listening: Listening, conn: socket.socket, peer: str, accepted: int) -> None:
        assert self.loop is not None and listening.context is not None
        try:
            protocol = functools.partial(listening.client, self, listening, accepted)
            if sys.version_info >= (3, 11):
                await self.loop.connect_accepted_socket(
                    protocol,
                    conn,
                    ssl=listening.context,
                    ssl_handshake_timeout=self.handshake_timeout,
                    ssl_shutdown_timeout=self.tls_shutdown_timeout,
                )
            else:  # PyPy 3.9: asyncio has no TLS shutdown timeout before 3.11
                await self.loop.connect_accepted_socket(
                    protocol, conn, ssl=listening.context, ssl_handshake_timeout=self.handshake_timeout
                )
        except Exception as e:  # the socket is closed
            why = handshake_failure(e, self.handshake_timeout)
            log.warning("TLS handshake from %s on %s failed: %s; closed", peer, listening.name, why)
            self.driver.tls_failed()

    def reload_certificates(self) -> int:
        """SIGHUP: every TLS listener's files into a new SSLContext; a bad file keeps the old one.

        The number of listeners whose certificate was reloaded."""
        done = 0
        for listening in self.listening:
            if listening.context is None:
                continue
            cfg = listening.config
            try:
                listening.context = server_context(cfg)
            except ValueError as e:  # ConfigError
                log.error("%s; listener %s keeps its previous certificate", e, listening.name)
                continue
            log.info("listener %s: certificate reloaded from %s", listening.name, cfg.certfile)
            done += 1
        return done

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Open every listener; OSError naming the one that failed (those opened are closed)."""
        loop = asyncio.get_running_loop()
        self.loop = loop
        ready = getattr(loop, "_ready", None)
        if isinstance(ready, collections.deque):
            self.ready = ready
        backlog = self.config.backlog
        for listening in self.listening:
            cfg = listening.config
            try:
                if listening.context is None:
                    listening.server = await loop.create_server(
                        functools.partial(listening.client, self, listening),
                        cfg.host,
                        cfg.port,
                        backlog=backlog,
                        reuse_address=True,
                    )
                    names = [sock.getsockname() for sock in listening.server.sockets]
                else:
                    listening.sockets = _bind(cfg.host, cfg.port, backlog)
                    names = [sock.getsockname() for sock in listening.sockets]
            except OSError as e:
                self.close_listeners()
                e.filename = f"{cfg.host}:{cfg.port}"
                raise
            listening.name = address(names[0])
            listening.local = all(loopback_name(name[0]) for name in names)
        for listening in self.listening:
            for sock in listening.sockets:
                listening.accepting.append(loop.create_task(self._accept(listening, sock)))
        self._on_timer()  # starts the uptime clock and the first $SYS
        if self.config.bridges:
            from cpython_host.bridge import start_bridges

            self.bridges = start_bridges(self, self.config.bridges)

    def close_listeners(self) -> None:
        for listening in self.listening:
            if listening.server is not None:
                listening.server.close()
            for task in listening.accepting:
                task.cancel()
            for sock in listening.sockets:
                sock.close()
            listening.accepting = []
            listening.sockets = []

    async def shutdown(self, reason: str) -> None:
        driver = self.driver
        log.info("shutting down (%s): closing the listeners and %d connection(s)", reason, driver.open)
        started = time.monotonic()
        self.close_listeners()
        for runner in self.bridges:
            await runner.stop()
        for task in list(self.handshakes):
            task.cancel()  # connect_accepted_socket closes its socket
        wait_ms = driver.shutdown()  # the timer keeps running: it ends the lingers
        if driver.open:
            self.all_closed.clear()
            try:
                await asyncio.wait_for(self.all_closed.wait(), wait_ms / 1000)
            except asyncio.TimeoutError:
                driver.abort_all()
                await asyncio.sleep(0)
        if self.timer is not None:
            self.timer.cancel()
        for listening in self.listening:
            if listening.server is not None:
                try:
                    await asyncio.wait_for(listening.server.wait_closed(), 1.0)
                except asyncio.TimeoutError:  # pragma: no cover - every connection is closed by now
                    pass
        log.info("shutdown complete in %.2f s", time.monotonic() - started)


def _bind(host: str, port: int, backlog: int) -> list[socket.socket]:
    """Listening sockets for a TLS listener, as loop.create_server makes them (every address `host` names)."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    socks: list[socket.socket] = []
    try:
        for family, kind, proto, _, sockaddr in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            socks.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(sockaddr)
            sock.listen(backlog)
            sock.setblocking(False)
    except OSError:
        for sock in socks:
            sock.close()
        raise
    return socks


def tls_contexts(config: HostConfig) -> dict[int, ssl.SSLContext]:
    """The SSLContext of each TLS listener, by its index; ConfigError (a clear message) for a bad file."""
    return {i: server_context(lst) for i, lst in enumerate(config.listeners()) if lst.tls}


def reload_security(config: HostConfig, driver: Driver) -> HostConfig | None:
    """SIGHUP: read the config file's [security] and its files again and
    apply them (connected clients are re-checked, common/broker/login.py); a
    file that cannot be used is logged and the rules in force are kept (None)."""
    from common.broker import login
    from cpython_host.config import ConfigError, load_config, load_security

    try:
        fresh = load_config(str(config.path), config.reader) if config.path is not None else config
        users, acl, allow = load_security(fresh)
    except ConfigError as e:
        log.error("SIGHUP: %s; keeping the users and rules in force", e)
        return None
    config.security = fresh.security
    driver.set_security(users, acl, allow)
    log.info("SIGHUP: security reloaded: %s", login.describe(driver.broker))
    return fresh


def set_log_level(level: str, driver: Driver | None = None) -> None:
    """The level of the host's log and, given the driver, of the core's (which caches it)."""
    logging.getLogger().setLevel(getattr(logging, level.upper()))
    if driver is not None:
        driver.broker.set_logger(_core_logger, core_log.getEffectiveLevel())


def reload_all(config: HostConfig, server: BrokerServer, web: Any) -> None:
    """SIGHUP: certificates (MQTT and HTTP listeners), [security] (users,
    ACL, anonymous access) and [log] level, then one line saying what was
    reloaded. A --log-level flag keeps beating the file's level, as at start."""
    parts = []
    certificates = server.reload_certificates()
    if certificates:
        parts.append(f"certificates of {certificates} TLS listener(s)")
    if web is not None and web.reload_certificate():
        parts.append("the HTTP listener's certificate")
    fresh = reload_security(config, server.driver)
    if fresh is not None:
        parts.append("users, ACL and anonymous access ([security])")
        level = config.log_level_flag or fresh.log_level
        if level != config.log_level:
            parts.append(f"log level {config.log_level} -> {level}")
            config.log_level = level
            set_log_level(level, server.driver)
            server.debug = log.isEnabledFor(logging.DEBUG)
        else:
            parts.append(f"log level {level} (unchanged{', set by --log-level' if config.log_level_flag else ''})")
    log.info("SIGHUP: reloaded %s", "; ".join(parts) if parts else "nothing (see the errors above)")


def _log_security(broker: Broker, listening: list[Listening]) -> None:
    """The start-up lines: users, ACL, and the anonymous decision with why."""
    from common.broker import login

    log.info("security: %s", login.describe(broker))
    if broker.users is not None or broker.allow_anonymous is not None:
        return
    for lst in listening:
        if lst.local:
            log.info("%s: no users configured: serving anonymous clients of this host only (loopback)", lst.name)
        else:
            log.warning(
                "%s is reachable from the network (not loopback-only) without users: anonymous clients are "
                "refused there (CONNACK 0x05 / 0x87). Set [security] password_file, or allow_anonymous = true "
                "to let anyone in",
                lst.name,
            )


def make_driver(config: HostConfig, broker: Broker) -> Driver:
    """The driver around `broker`, with the host's clock and [server] settings."""
    broker.set_logger(_core_logger, core_log.getEffectiveLevel())
    return Driver(broker, ticks_ms, config.close_linger, config.shutdown_timeout, rss_bytes)


def _core_logger(level: int, text: str) -> None:
    # As the core made it (escaped and bounded by its own boundary): no
    # arguments, so the host's filter does not escape its escapes again.
    core_log.log(level, text)


def make_broker(config: HostConfig, store: Store | None = None) -> Broker:
    """The core, sized from the settings; ValueError for settings it refuses.

    With a `store` (common/store/storeboot.py), call driver.restore() before serving.
    """
    broker: Broker = new_broker(config.settings, os.urandom, store)
    return broker


async def serve(config: HostConfig, driver: Driver, data_dir: str | None, contexts: dict[int, ssl.SSLContext]) -> int:
    """Run the broker until SIGINT/SIGTERM (SIGHUP reloads certificates and
    the [security] users and rules); the process exit code."""
    server = BrokerServer(driver, config, contexts)
    loop = asyncio.get_running_loop()
    web = None
    if config.http is not None:
        from cpython_host.config import ConfigError
        from cpython_host.status import tls_files
        from cpython_host.web import WebServer

        try:
            web = WebServer(
                config.http, driver, server.schedule_flush, data_dir, lambda: server.bridges, lambda: tls_files(server)
            )
        except ConfigError as e:  # its certificate or key
            log.error("config error: %s", e)
            return 2
    try:
        await server.start()
        if web is not None:
            await web.start()
    except OSError as e:
        server.close_listeners()
        log.error("cannot listen on %s: %s", e.filename, e.strerror or e)
        return 1
    stop_reason: list[str] = []

    def on_signal(name: str) -> None:
        if not stop_reason:
            stop_reason.append(name)
            server.stopping.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig.name)

    def on_hangup() -> None:
        sdnotify.reloading()
        reload_all(config, server, web)
        sdnotify.notify("READY=1", "STATUS=reloaded")

    loop.add_signal_handler(signal.SIGHUP, on_hangup)
    loop_name = type(loop).__module__.split(".")[0]
    first = server.listening[0]
    log.info(
        "siskin %s listening on %s (MQTT 3.1.1 + 5.0; settings: %s; event loop: %s): %s",
        VERSION,
        first.name,
        config.source,
        loop_name,
        first.describe(),
    )
    for listening in server.listening[1:]:
        log.info("also listening on %s: %s", listening.name, listening.describe())
    if data_dir is not None:
        log.info("persistent state in %s (store_sync = %s)", data_dir, driver.broker.settings.store_sync)
    _log_security(driver.broker, server.listening)
    # systemd (Type=notify): started once every listener accepts.
    sdnotify.notify("READY=1", f"STATUS=listening on {', '.join(lst.name for lst in server.listening)}")
    await server.stopping.wait()
    sdnotify.notify("STOPPING=1")
    if web is not None:
        await web.close()
    await server.shutdown(stop_reason[0])
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.remove_signal_handler(sig)
    return 0

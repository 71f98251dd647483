"""The asyncio server: a socket adapter for the core's connection driver.

Theory of operation
-------------------
Every decision lives in the core: the Broker (common/broker/broker.py)
makes the MQTT ones, the Driver (common/driver.py) those of the
connection's life, common/turns.py the fairness between connections. This
module moves bytes and time. Each accepted socket gets a `ClientProtocol`
(asyncio.Protocol: callbacks, no streams, no per-read task), which is also
the driver's handle for that connection (transport calls). Every read goes
through turns.input(); the shell flushes when it says so (as soon as an
input is handled: libuv reads a readable socket up to 32 times in one go,
and waiting for the end of the turn would let a firehose publisher pile
megabytes of output before a write could report backpressure) and runs
turns.end_turn() at the end of the loop turn when `turns.due`. It reads no
private field of the event loop. One TimerHandle is re-armed to the delay
driver.tick() returns. The transport's write buffer has high/low water
marks ([server] write_buffer_high/low): pause_writing/resume_writing become
driver.set_paused (docs/host.md).

Plain MQTT listeners are served without asyncio's transports, by
cpython_host/epoll_hub.py: its PlainConnection is their handle, and the
events of a connection both kinds share are BrokerServer's input, eof and
lost. The listeners (plain and TLS accept) are cpython_host/listeners.py's;
SIGHUP's reloads, reload.py's; running it all (signals, start-up lines,
systemd), serve.py's. A websockets listener gives each socket a
WebSocketClient (cpython_host/websocket.py): this ClientProtocol with
wsproto in front.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from typing import Any

from common.driver import Driver
from common.turns import Turns
from cpython_host.config import HostConfig, Listener
from cpython_host.epoll_hub import EpollHub
from cpython_host.listeners import (
    Listening,
    address,
    certificate_identity,
    close_listeners,
    listeners_closed,
    open_listeners,
)

log = logging.getLogger("siskin.host")


def ticks_ms() -> int:
    """The host's millisecond clock for the driver (it masks and wraps it)."""
    return int(time.monotonic() * 1000)


class ClientProtocol(asyncio.Protocol):
    """One accepted connection: asyncio's protocol and the driver's handle."""

    __slots__ = ("accepted", "cid", "listening", "peer", "server", "transport")

    def __init__(self, server: BrokerServer, listening: Listening, accepted: int | None = None) -> None:
        self.server = server
        self.listening = listening
        self.accepted = accepted  # ticks_ms() of the accept, when it came before a TLS handshake
        self.transport: Any = None
        self.cid = -1
        self.peer = "?"  # its address as text (for the log and the core), set at connection_made

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
            certified = "" if identity is None else f" (certificate identity {identity!r})"
            log.debug("connection #%d from %s opened%s", cid, self.peer, certified)

    def data_received(self, data: bytes) -> None:
        if self.cid >= 0:
            self.server.input(self.cid, data)

    def eof_received(self) -> bool:
        # True: keep the transport open (input waits; closed after it).
        return self.cid >= 0 and self.server.eof(self.cid, self.listening.context is None)

    def pause_writing(self) -> None:
        if self.cid >= 0:
            self.server.driver.set_paused(self.cid, True)

    def resume_writing(self) -> None:
        if self.cid >= 0:
            self.server.driver.set_paused(self.cid, False)
            self.server.schedule_flush()

    def connection_lost(self, exc: Exception | None) -> None:
        cid = self.cid
        if cid >= 0:
            self.cid = -1
            self.server.lost(cid, self.peer, exc)

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
        self.transport.pause_reading()

    def resume_reading(self) -> None:
        self.transport.resume_reading()


def client_class(config: Listener) -> type[ClientProtocol]:
    """What each socket a listener accepts gets: MQTT over TCP, or over
    WebSockets (imported only then: wsproto is needed only by such a listener)."""
    if config.websockets:
        from cpython_host.websocket import WebSocketClient

        return WebSocketClient
    return ClientProtocol


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
        self.debug = log.isEnabledFor(logging.DEBUG)
        self.turns = Turns(driver)  # fairness between connections (common/turns.py)
        self.turn_scheduled = False
        listeners = config.listeners()
        self.listening = [Listening(lst, contexts.get(i), client_class(lst)) for i, lst in enumerate(listeners)]
        self.ticks_ms = ticks_ms  # the clock of an accept (listeners.py)
        self.handshakes: set[asyncio.Task[None]] = set()  # TLS handshakes going on (listeners.py)
        self.timer: asyncio.TimerHandle | None = None
        self.stopping = asyncio.Event()
        self.bridges: Any = ()  # cpython_host/bridge.py Bridges: a Runner per [[bridge]] (common/bridge/runner.py)
        self.hub: EpollHub | None = None  # the plain listeners' epoll (listeners.py), when there is one

    # ------------------------------------------ a connection's events
    # (ClientProtocol's, and the plain listeners' in epoll_hub.py)

    def input(self, cid: int, data: Any) -> None:
        """Bytes read from connection `cid` (valid during the call)."""
        turns = self.turns
        if turns.input(cid, data):
            self.flush()
        if turns.due:
            self.schedule_turn()

    def eof(self, cid: int, can_wait: bool) -> bool:
        """The peer of `cid` closed its sending side: whatever the core still
        has for it goes out first. True: keep the socket open, its input
        waits for its turn and it is closed after it (`can_wait`: a socket
        that can stay half-open; a TLS one closes now, its input first)."""
        turns = self.turns
        if turns.waits(cid):
            if can_wait:
                turns.close_after(cid)
                return True
            turns.run_now(cid)
        if self.driver.wants_flush():
            self.flush()
        return False

    def lost(self, cid: int, peer: str, exc: Exception | None) -> None:
        """The socket of `cid` is closed."""
        turns = self.turns
        turns.run_now(cid)  # what it sent before it went is not lost
        driver = self.driver
        driver.connection_lost(cid)
        turns.forget(cid)
        if self.debug:
            log.debug("connection #%d from %s closed%s", cid, peer, f" ({exc})" if exc else "")
        if driver.wants_flush():
            self.schedule_flush()  # a will published, a throttled publisher released...
        if not driver.open:
            self.all_closed.set()

    # -------------------------------------------------------------- output

    def schedule_flush(self) -> None:
        if not self.flush_scheduled:
            self.flush_scheduled = True
            self.call_soon(self.flush)

    def flush(self) -> None:
        self.flush_scheduled = False
        if self.driver.flush():
            # A retained replay can go on (its client's output drained):
            # again on the next loop turn, the other clients' I/O in between.
            self.schedule_flush()

    # ---------------------------------------------------------------- turns

    def schedule_turn(self) -> None:
        if not self.turn_scheduled:
            self.turn_scheduled = True
            self.call_soon(self.next_turn)

    def next_turn(self) -> None:
        # After the input read in this loop turn (common/turns.py): the input
        # put off, one flush; again next turn while input waits.
        self.turn_scheduled = False
        if self.turns.end_turn():
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

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Open every listener (listeners.py; OSError naming the one that
        failed), start the timer and the bridges."""
        self.loop = asyncio.get_running_loop()
        await open_listeners(self)
        self._on_timer()  # starts the uptime clock and the first $SYS
        from cpython_host.bridge import Bridges  # (its code: the bridge's runner and client)

        self.bridges = Bridges(self)
        self.bridges.start(self.config.bridges)

    async def shutdown(self, reason: str) -> None:
        driver = self.driver
        log.info("shutting down (%s): closing the listeners and %d connection(s)", reason, driver.open)
        started = time.monotonic()
        close_listeners(self.listening)
        if self.bridges:
            await self.bridges.stop()
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
        await listeners_closed(self.listening)
        if self.hub is not None:
            self.hub.close()
        log.info("shutdown complete in %.2f s", time.monotonic() - started)

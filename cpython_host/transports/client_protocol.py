"""An accepted connection on asyncio's transports (TLS listeners; plain ones
with `[server] epoll_hub = false`): the protocol is also the driver's handle
for the connection. WebSocketClient (cpython_host/transports/websocket.py) is this with
wsproto in front. It reports to its server through events.py's interface.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from cpython_host.transports.events import ConnectionEvents
from cpython_host.transports.listeners import address, certificate_identity

if TYPE_CHECKING:
    from cpython_host.transports.listeners import Listening

log = logging.getLogger("siskin.host")


class ClientProtocol(asyncio.Protocol):
    """One accepted connection: asyncio's protocol and the driver's handle."""

    __slots__ = ("accepted", "cid", "listening", "peer", "server", "transport")

    def __init__(self, server: ConnectionEvents, listening: Listening, accepted: int | None = None) -> None:
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
                server.tls_failed()  # the certificate gives no user name: refused as a handshake
                transport.abort()  # type: ignore[attr-defined]
                return
        cid = server.connection_made(self, (self.peer, identity, self.listening.local, self.listening.config.key), self.accepted)
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
            self.server.set_paused(self.cid, True)

    def resume_writing(self) -> None:
        if self.cid >= 0:
            self.server.set_paused(self.cid, False)
            self.server.flush_soon()

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
        transport = self.transport
        if transport.is_closing():
            # Closed before and still here at the linger's end: a TLS
            # transport waiting for the peer's close_notify (PyPy's asyncio
            # has no ssl_shutdown_timeout), where close() does nothing more.
            transport.abort()
        else:
            transport.close()

    def abort(self) -> None:
        self.transport.abort()

    def pending(self) -> int:
        return int(self.transport.get_write_buffer_size())

    def pause_reading(self) -> None:
        self.transport.pause_reading()

    def resume_reading(self) -> None:
        self.transport.resume_reading()

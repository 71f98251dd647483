"""What a transport tells its server, and the little it reads of it.

The transports (client_protocol.py and websocket.py on asyncio's
transports, epoll_hub.py on the host's own epoll, listeners.py's accept
loops) are typed against this interface, which server.py's BrokerServer
implements; none of them imports server.py or writes into the server
(tests/host/test_rooms.py). A connection's events are the same for every
kind of socket: it was accepted (connection_made), bytes came (input), the
peer ended its side (eof), the socket is gone (lost); its write buffer
crossed a water mark (set_paused); output can go (flush_soon); a deadline
nearer than the timer's came in (rearm_timer).
"""

from __future__ import annotations

from typing import Any, Protocol


class ConnectionEvents(Protocol):
    # Read-only figures: the transports' write buffer water marks ([server]
    # write_buffer_high/low), whether connections are logged one by one
    # (debug), the broker's limits (limits.Limits: max_packet_size,
    # max_connections, connect_timeout) and the [server] settings.
    write_high: int
    write_low: int
    debug: bool
    settings: Any
    config: Any

    def ticks_ms(self) -> int:
        """The clock of an accept (the connect timeout counts from it)."""

    def connection_made(self, handle: Any, peer: tuple[str, str | None, bool, int], accepted: int | None = None) -> int:
        """A socket was accepted (`handle`: the driver's handle for it): its id, or -1 to abort it."""

    def tls_failed(self) -> None:
        """A TLS handshake failed or the certificate gave no user name (counted)."""

    def input(self, cid: int, data: Any) -> None:
        """Bytes read from connection `cid` (valid during the call)."""

    def eof(self, cid: int, can_wait: bool) -> bool:
        """The peer ended its sending side; True: keep the socket open (its input waits)."""

    def lost(self, cid: int, peer: str, exc: Exception | None) -> None:
        """The socket of `cid` is closed."""

    def end(self, cid: int) -> None:
        """The transport ends `cid` for a reason of its own (a WebSocket close):
        after the input still waiting, closed as the core's closes are."""

    def set_paused(self, cid: int, paused: bool) -> None:
        """Its write buffer went above the high / below the low water mark."""

    def flush_soon(self) -> None:
        """Output may go: flush on the next loop turn."""

    def rearm_timer(self) -> None:
        """A deadline may be nearer than the timer's: run the driver's tick now."""

    def websocket_refused(self) -> None:
        """A WebSocket upgrade refused or a connection closed for a bad frame (counted)."""

    def is_stopping(self) -> bool:
        """Whether the server is shutting down."""

"""MQTT over WebSockets (RFC 6455; MQTT 3.1.1 and 5.0 chapter 6): wsproto in front of the same driver.

Theory of operation
-------------------
A [[listener]] with protocol = "websockets" makes a WebSocketClient for each
accepted socket (after the TLS handshake on a wss:// listener): server.py's
ClientProtocol with wsproto, a sans-I/O WebSocket library, between the
socket and it. Everything MQTT stays where it was; this module only turns
frames into bytes and bytes into frames.

It registers with the driver at the accept, as any connection: the core's
connect timeout covers the HTTP upgrade as well as the CONNECT, and
max_connections counts sockets still upgrading.

In. The HTTP request head is collected (at most MAX_REQUEST_HEAD bytes),
checked (wsproto: GET and the upgrade headers; here: the path, the Origin
when the listener lists origins, the "mqtt" subprotocol) and answered with
101 and subprotocol "mqtt" [MQTT-6.0.0-4], or refused with an HTTP error and
a one-line reason (also logged). Bytes after the head are frames. Binary
message data is MQTT input, handed to ClientProtocol.data_received as if it
were read from TCP: a message may carry part of a packet or several
[MQTT-6.0.0-2], the core's frame reader does not care. A ping is answered
with a pong. A text frame [MQTT-6.0.0-1] (close code 1003), a message larger
than max_packet_size + MESSAGE_HEADROOM (1009) or a frame wsproto cannot
parse (1002, 1007) ends the connection. Refusals and these closes are
counted (stats.websocket_refused, $SYS/broker/clients/websocket_refused).

Out. Each write of the driver (one loop turn's MQTT output for the client)
becomes one binary message [MQTT-6.0.0-1]. A close of the broker's
(half_close, close) sends a WebSocket close frame after that output (1000;
1001 at shutdown), then the TCP half-close and linger as for MQTT over TCP.

Ends. The peer's close frame, and the errors above, go to Driver.close: for
the MQTT session the network connection is gone (its will is published) and
it closes as the broker's closes do, through half_close here, which answers
or sends the close frame. Input after that is discarded.

Bounds and flow. wsproto streams a data frame's payload out as it arrives
(it never holds a whole message), so what it buffers is at most one read
plus a frame header or a control frame (125 bytes); no extension is
negotiated (no permessage-deflate: nothing inflates). Backpressure is the
transport's, as for TCP: pause_writing/resume_writing and pause_reading/
resume_reading are untouched, and frames add a few bytes to the write
buffer's count.
"""

from __future__ import annotations

import logging
import re
from http import HTTPStatus
from typing import TYPE_CHECKING

from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    RejectConnection,
    Request,
    TextMessage,
)
from wsproto.utilities import RemoteProtocolError

from common.broker.clienttext import clip
from cpython_host.transports.client_protocol import ClientProtocol
from cpython_host.transports.events import ConnectionEvents

if TYPE_CHECKING:
    from cpython_host.transports.listeners import Listening

log = logging.getLogger("siskin.host")

SUBPROTOCOL = "mqtt"  # [MQTT-6.0.0-3] offered by the client, [MQTT-6.0.0-4] selected by the server
# The longest HTTP request head accepted (h11's own limit): a browser's,
# cookies included, fits; beyond it HTTP 431.
MAX_REQUEST_HEAD = 16384
# A message may carry several packets [MQTT-6.0.0-2]: one of the largest
# allowed (max_packet_size) plus this much of others.
MESSAGE_HEADROOM = 65536

# Close codes (RFC 6455 7.4.1).
NORMAL = 1000
GOING_AWAY = 1001
UNSUPPORTED_DATA = 1003
MESSAGE_TOO_BIG = 1009

# WebSocketClient.phase
_UPGRADING = 0  # reading the HTTP request
_OPEN = 1  # frames both ways
_ENDED = 2  # refused, closing or closed: input discarded, nothing more sent but a close frame

_METHOD_START = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ")


class WebSocketClient(ClientProtocol):
    """One connection of a websockets listener: asyncio's protocol and the driver's handle."""

    __slots__ = ("close_code", "close_reason", "head", "max_message", "message", "phase", "ws")

    def __init__(self, server: ConnectionEvents, listening: Listening, accepted: int | None = None) -> None:
        super().__init__(server, listening, accepted)
        self.ws = WSConnection(ConnectionType.SERVER)
        self.phase = _UPGRADING
        self.head = bytearray()  # the request head read so far
        self.message = 0  # bytes of the binary message being received
        self.max_message = server.settings.max_packet_size + MESSAGE_HEADROOM
        self.close_code = NORMAL  # what our close frame says
        self.close_reason = ""

    # -------------------------------------------------------------- asyncio

    def data_received(self, data: bytes) -> None:
        if self.cid < 0 or self.phase == _ENDED:
            return  # refused or closing: discarded, as the driver does
        if self.phase == _UPGRADING:
            data = self.upgrade(data)
            if not data:
                return
        ws = self.ws
        ws.receive_data(data)
        mqtt: list[bytes | bytearray] = []
        for event in ws.events():
            if isinstance(event, BytesMessage):
                size = self.message + len(event.data)
                if size > self.max_message:
                    self.fail(
                        mqtt,
                        MESSAGE_TOO_BIG,
                        f"a WebSocket message of more than {self.max_message} bytes "
                        f"(max_packet_size + {MESSAGE_HEADROOM})",
                    )
                    return
                self.message = 0 if event.message_finished else size
                mqtt.append(event.data)
            elif isinstance(event, Ping):
                self.transport.write(ws.send(event.response()))
            elif isinstance(event, TextMessage):
                # [MQTT-6.0.0-1] MQTT travels in binary frames only.
                self.fail(mqtt, UNSUPPORTED_DATA, "a text frame (MQTT travels in binary frames)")
                return
            elif isinstance(event, CloseConnection):
                if ws.state is ConnectionState.OPEN:
                    # wsproto's report of a frame it could not parse (the
                    # peer's close frame moves the state on).
                    self.fail(mqtt, event.code, f"WebSocket protocol error: {event.reason}")
                    return
                self.pass_on(mqtt)
                if self.server.debug:
                    log.debug(
                        "connection #%d from %s: WebSocket close %s from the client", self.cid, self.peer, event.code
                    )
                self.close_code = event.code  # echoed (RFC 6455 5.5.1)
                self.close_reason = ""
                self.end()
                return
            # (a Pong needs nothing)
        self.pass_on(mqtt)

    def pass_on(self, mqtt: list[bytes | bytearray]) -> None:
        """The MQTT bytes of this read to the driver, as one input."""
        if mqtt:
            # (wsproto's payloads are bytes, which bytes() returns as they are)
            super().data_received(bytes(mqtt[0]) if len(mqtt) == 1 else b"".join(mqtt))

    def fail(self, mqtt: list[bytes | bytearray], code: int, why: str) -> None:
        """End the connection for bad input: what came before it first, then a close frame with `code`."""
        self.pass_on(mqtt)
        log.warning(
            "connection #%d from %s on %s: %s; closed (WebSocket close %d)",
            self.cid,
            self.peer,
            self.listening.name,
            why,
            code,
        )
        self.server.websocket_refused()
        self.close_code = code
        self.close_reason = why[:100]  # a close frame's payload is at most 125 bytes
        self.end()

    def end(self) -> None:
        """Hand the close to the driver (Driver.close) after any input still waiting."""
        if self.cid >= 0:
            self.server.end(self.cid)
        else:
            self.server.flush_soon()
        self.phase = _ENDED

    # ------------------------------------------------------------- upgrade

    def upgrade(self, data: bytes) -> bytes:
        """Read the HTTP request: answer it once whole; what follows it (frames), if upgraded."""
        head = self.head
        searched = max(len(head) - 3, 0)  # (a request sent a byte at a time costs O(n), not O(n**2))
        head += data
        if head[0] not in _METHOD_START:
            hint = ""
            if head[0] == 0x10:
                hint = " (an MQTT CONNECT: plain MQTT sent to a WebSocket listener?)"
            elif head[0] == 0x16:
                hint = " (a TLS handshake: wss:// to a listener without certfile?)"
            self.refuse(400, "not an HTTP request" + hint)
            return b""
        end = head.find(b"\r\n\r\n", searched)
        if end < 0:
            if len(head) > MAX_REQUEST_HEAD:
                self.refuse(431, f"an HTTP request head of more than {MAX_REQUEST_HEAD} bytes")
            return b""
        end += 4
        if end > MAX_REQUEST_HEAD:
            self.refuse(431, f"an HTTP request head of more than {MAX_REQUEST_HEAD} bytes")
            return b""
        # The path first, before wsproto's checks: a browser sent to the wrong
        # URL (even a plain GET, not an upgrade) learns the right one.
        want = self.listening.config.path
        path = request_path(head)
        if want and path != want:
            self.refuse(404, f"path {clip(path)!r}: this listener serves {want!r}")
            return b""
        ws = self.ws
        try:
            ws.receive_data(bytes(head[:end]))
            request = next((e for e in ws.events() if isinstance(e, Request)), None)
        except RemoteProtocolError as e:
            answer = e.event_hint
            status = answer.status_code if isinstance(answer, RejectConnection) else 400
            extra = list(answer.headers) if isinstance(answer, RejectConnection) else []
            self.refuse(status, f"not a WebSocket upgrade: {e}", extra)
            return b""
        except UnicodeDecodeError:
            # (wsproto reads the WebSocket headers as ASCII)
            self.refuse(400, "a WebSocket header (Sec-WebSocket-Protocol, -Extensions) is not ASCII")
            return b""
        if request is None:  # pragma: no cover - h11 has the whole head
            self.refuse(400, "no HTTP request in the head")
            return b""
        why = self.check(request)
        if why is not None:
            self.refuse(*why)
            return b""
        # [MQTT-6.0.0-4] the subprotocol selected is "mqtt"; no extension.
        self.transport.write(ws.send(AcceptConnection(subprotocol=SUBPROTOCOL)))
        self.phase = _OPEN
        self.head = bytearray()  # (not kept for the connection's life)
        if self.server.debug:
            log.debug("connection #%d from %s: WebSocket upgrade on %s", self.cid, self.peer, request.target)
        return bytes(head[end:])

    def check(self, request: Request) -> tuple[int, str] | None:
        """(HTTP status, why) if the listener refuses this upgrade request, else None."""
        cfg = self.listening.config
        if cfg.origins:
            origin = next((v.decode("latin-1") for k, v in request.extra_headers if k == b"origin"), None)
            # No Origin header: not a browser, which is what origins guards against.
            if origin is not None and origin not in cfg.origins:
                return 403, f"Origin {clip(origin)!r} is not in this listener's origins"
        if SUBPROTOCOL not in request.subprotocols:
            # [MQTT-6.0.0-3] the client offers "mqtt"; without it the server
            # cannot select it [MQTT-6.0.0-4].
            offered = clip(", ".join(request.subprotocols)) or "none"
            return 400, f'the WebSocket subprotocol "mqtt" was not offered (offered: {offered})'
        return None

    def refuse(self, status: int, why: str, headers: list[tuple[bytes, bytes]] | None = None) -> None:
        """Answer the upgrade request with HTTP `status` and `why`, then close."""
        log.warning(
            "connection #%d from %s on %s: WebSocket upgrade refused: %s; answered HTTP %d",
            self.cid,
            self.peer,
            self.listening.name,
            why,
            status,
        )
        self.server.websocket_refused()
        body = (
            f"siskin: MQTT over WebSocket (subprotocol mqtt) refused this request: {why}\n"
            f"MQTT clients connect to {self.url_for_client()}\n"
        ).encode()
        # Written here, not by wsproto: its HTTP state machine cannot answer
        # a request it could not parse, or bytes that were no request at all.
        lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}".encode()]
        lines += [name + b": " + value for name, value in headers or ()]
        lines += [
            b"Content-Type: text/plain; charset=utf-8",
            b"Content-Length: %d" % len(body),
            b"Connection: close",
        ]
        self.transport.write(b"\r\n".join(lines) + b"\r\n\r\n" + body)
        self.end()

    def url_for_client(self) -> str:
        """This listener's URL as the client reached it: the Host of its request, if a plain one."""
        m = _HOST.search(self.head, 0, MAX_REQUEST_HEAD)
        host = m.group(1).decode("ascii") if m else self.listening.name
        path = self.listening.config.path or "/ (any path)"
        return f"{'wss' if self.listening.context is not None else 'ws'}://{host}{path}"

    # ------------------------------------------------ the driver's handle

    def write(self, data: bytes) -> None:
        # Until our close frame, or the peer's (not before the upgrade: the
        # broker has nothing to say before a CONNECT).
        if self.ws.state is ConnectionState.OPEN:
            self.transport.write(self.ws.send(BytesMessage(data=data)))

    def send_close(self) -> None:
        """Our close frame, once, after the output written so far (none before the upgrade)."""
        if self.phase == _UPGRADING:
            log.info(
                "connection #%d from %s on %s: closed before its WebSocket upgrade",
                self.cid,
                self.peer,
                self.listening.name,
            )
        elif self.ws.state in (ConnectionState.OPEN, ConnectionState.REMOTE_CLOSING):
            code = self.close_code
            if code == NORMAL and self.server.is_stopping():
                code = GOING_AWAY
            if not self.transport.is_closing():
                self.transport.write(self.ws.send(CloseConnection(code=code, reason=self.close_reason or None)))
        self.phase = _ENDED

    def half_close(self) -> None:
        self.send_close()
        super().half_close()

    def close(self) -> None:
        self.send_close()
        super().close()


# A Host header of a name or address and port only (what is echoed into the answer).
_HOST = re.compile(rb"\r\nhost:[ \t]*([A-Za-z0-9.:\[\]-]{1,260})[ \t]*\r\n", re.IGNORECASE)


def request_path(head: bytearray) -> str:
    """The path of an HTTP request line ("GET /mqtt?x=1 HTTP/1.1" -> "/mqtt"); "" if none."""
    parts = bytes(head[: head.find(b"\r\n")]).split(b" ")
    return parts[1].split(b"?", 1)[0].decode("latin-1") if len(parts) == 3 else ""

"""The host's listeners: one per [[listener]] table, plain or TLS, MQTT over
TCP or WebSockets; they hand each accepted socket to its listener's
protocol class (client_protocol.py, websocket.py) or to the epoll hub
(epoll_hub.py), all of which report to the server through events.py's
interface.

A plain listener is an asyncio server. A TLS one accepts in its own loop
(sock_accept) and runs each handshake as a task, loop.connect_accepted_socket
bounded by connect_timeout: so the shell sees a handshake fail (one log
line; cpython_host/tls.py says why, where asyncio's own TLS servers drop it
silently) and knows when the socket was accepted, which the driver uses to
start the connect timeout there, so the handshake spends it too. The
protocol then registers with the identity the client certificate proved.
SIGHUP loads every TLS listener's files into a new SSLContext for the
handshakes that follow (reload_certificates); established connections keep
theirs.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
import ssl
import sys
from typing import Any, Callable

from cpython_host.config import HostConfig, Listener, loopback_name
from cpython_host.hints import explain_listen_failure
from cpython_host.transports import epoll_hub
from cpython_host.transports.events import ConnectionEvents
from cpython_host.transports.tls import handshake_failure, peer_identity, server_context, usable_identity

log = logging.getLogger("siskin.host")


def address(peername: Any) -> str:
    """A socket's (host, port) as text for the log and the core ("192.0.2.7:50432", "[::1]:50432")."""
    if not peername:
        return "?"
    host = peername[0]
    return f"[{host}]:{peername[1]}" if ":" in host else f"{host}:{peername[1]}"


IDENTITY_NAMES = {"cn": "CN", "san_dns": "DNS SAN", "san_email": "email SAN", "san_uri": "URI SAN", "subject": "subject"}


class Listening:
    """One [[listener]] at run time: its asyncio server and, for TLS, the SSLContext handshakes use now."""

    __slots__ = (
        "accepting",
        "client",
        "config",
        "context",
        "hub",
        "identity_field",
        "local",
        "name",
        "server",
        "sn",
        "sockets",
    )

    def __init__(self, config: Listener, context: ssl.SSLContext | None, client: Callable[..., Any]) -> None:
        self.config = config
        self.context = context
        # What each accepted socket gets: its protocol class, made as
        # client(events, listening[, accepted]) (server.py picks it).
        self.client = client
        # the certificate field that is the user name (use_identity_as_username), or None
        self.identity_field = config.identity if config.use_identity_as_username else None
        self.server: asyncio.Server | None = None  # a plain listener's on asyncio (WebSockets; no epoll)
        self.hub: epoll_hub.EpollHub | None = None  # a plain MQTT listener's (cpython_host/epoll_hub.py)
        self.sockets: list[socket.socket] = []  # a TLS or hub listener's; a TLS one's accept loops
        self.accepting: list[asyncio.Task[None]] = []
        self.sn: Any = None  # an MQTT-SN listener's UDP endpoint (mqttsn_udp.py SnEndpoint)
        self.local = True  # bound to loopback addresses only (set once bound)
        self.name = f"{config.host}:{config.port}"  # the bound address once bound

    def url(self) -> str:
        """A websockets listener's URL, for the start-up log."""
        path = self.config.path
        return f"{'wss' if self.context is not None else 'ws'}://{self.name}{path or '/ (any path)'}"

    def describe(self) -> str:
        """What the start-up log says of it."""
        cfg = self.config
        if cfg.mqttsn:
            kind = (
                f"MQTT-SN v1.2 over UDP (gateway id {cfg.gw_id}, {cfg.max_clients} clients, "
                f"{len(cfg.predefined)} predefined topic ids; "
                + (f"{len(cfg.keys)} client keys: every datagram sealed)" if cfg.keys else "no authentication)")
            )
            if self.local:
                return kind + "; loopback only"
            return kind + ("; reachable from the network (keys)" if cfg.keys else "; reachable from the network (allow_remote)")
        kind = "plain MQTT" if self.hub is None else "plain MQTT (epoll hub)"
        if cfg.websockets:
            kind = f"MQTT over WebSocket at {self.url()}"
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


class Accepting:
    """What the listeners hold while they accept: the plain ones' epoll hub
    (None: none), the TLS handshakes going on (tasks), the loop they run on."""

    def __init__(self, events: ConnectionEvents, loop: asyncio.AbstractEventLoop) -> None:
        self.events = events
        self.loop = loop
        self.hub: epoll_hub.EpollHub | None = None
        self.handshakes: set[asyncio.Task[None]] = set()

    def close(self) -> None:
        """The end of serving: handshakes cancelled (their sockets closed), the hub's epoll gone."""
        for task in list(self.handshakes):
            task.cancel()  # connect_accepted_socket closes its socket
        if self.hub is not None:
            self.hub.close()


async def open_listeners(events: ConnectionEvents, listening_list: list[Listening]) -> Accepting:
    """Open every listener of `listening_list` for `events` (the server); OSError
    naming the one that failed (those opened are closed)."""
    loop = asyncio.get_running_loop()
    accepting = Accepting(events, loop)
    config = events.config
    backlog = config.backlog
    for listening in listening_list:
        cfg = listening.config
        try:
            if cfg.mqttsn:
                from cpython_host.transports.mqttsn_udp import open_sn

                listening.sn, names = await open_sn(events, listening)
            elif listening.context is None and not cfg.websockets and config.epoll_hub and epoll_hub.AVAILABLE:
                # Plain MQTT: accepted and served by the host's own epoll.
                if accepting.hub is None:
                    accepting.hub = epoll_hub.EpollHub(events, loop)
                listening.sockets = bind(cfg.host, cfg.port, backlog)
                listening.hub = accepting.hub
                for sock in listening.sockets:
                    accepting.hub.listen(listening, sock)
                names = [sock.getsockname() for sock in listening.sockets]
            elif listening.context is None:
                listening.server = await loop.create_server(
                    functools.partial(listening.client, events, listening),
                    cfg.host,
                    cfg.port,
                    backlog=backlog,
                    reuse_address=True,
                )
                names = [sock.getsockname() for sock in listening.server.sockets]
            else:
                listening.sockets = bind(cfg.host, cfg.port, backlog)
                names = [sock.getsockname() for sock in listening.sockets]
        except OSError as e:
            close_listeners(listening_list)
            accepting.close()
            e.filename = f"{cfg.host}:{cfg.port}"
            explain_listen_failure(e, cfg.port)
            raise
        listening.name = address(names[0])
        listening.local = all(loopback_name(name[0]) for name in names)
        if listening.sn is not None:
            listening.sn.start(listening.local)
    for listening in listening_list:
        if listening.hub is None:
            for sock in listening.sockets:
                listening.accepting.append(loop.create_task(_accept(accepting, listening, sock)))
    return accepting


async def listeners_closed(listening: list[Listening]) -> None:
    """Wait (a second at most) for the plain listeners' servers to close, after close_listeners."""
    for lst in listening:
        if lst.server is not None:
            try:
                await asyncio.wait_for(lst.server.wait_closed(), 1.0)
            except asyncio.TimeoutError:  # pragma: no cover - every connection is closed by now
                pass


def close_listeners(listening: list[Listening]) -> None:
    for lst in listening:
        if lst.server is not None:
            lst.server.close()
        if lst.sn is not None:
            lst.sn.close()
            lst.sn = None
        for task in lst.accepting:
            task.cancel()
        for sock in lst.sockets:
            if lst.hub is not None:
                lst.hub.unlisten(sock)
            sock.close()
        lst.accepting = []
        lst.sockets = []


async def _accept(accepting: Accepting, listening: Listening, sock: socket.socket) -> None:
    """A TLS listener's accept loop: each socket's handshake runs as a task of its own."""
    loop = accepting.loop
    events = accepting.events
    handshakes = accepting.handshakes
    while True:
        try:
            conn, peername = await loop.sock_accept(sock)
        except (ConnectionAbortedError, InterruptedError):
            continue
        except OSError as e:  # out of file descriptors: let some close
            log.error("accept on %s failed: %s; retrying in 1 s", listening.name, e.strerror or e)
            await asyncio.sleep(1)
            continue
        accepted = events.ticks_ms()
        if len(handshakes) >= events.settings.max_connections:
            # Sockets that stall their handshake must not pile up beyond
            # what the broker would hold as connections.
            log.warning(
                "refused TLS connection from %s: %d handshakes in progress (max_connections)",
                address(peername),
                len(handshakes),
            )
            conn.close()
            continue
        task = loop.create_task(_handshake(accepting, listening, conn, address(peername), accepted))
        handshakes.add(task)
        task.add_done_callback(handshakes.discard)


async def _handshake(accepting: Accepting, listening: Listening, conn: socket.socket, peer: str, accepted: int) -> None:
    assert listening.context is not None
    events = accepting.events
    loop = accepting.loop
    # Seconds a TLS handshake may take: the connect timeout, which the
    # handshake spends (asyncio wants a positive figure).
    timeout = float(max(events.settings.connect_timeout, 1))
    try:
        protocol = functools.partial(listening.client, events, listening, accepted)
        if sys.version_info >= (3, 11):
            await loop.connect_accepted_socket(
                protocol,
                conn,
                ssl=listening.context,
                ssl_handshake_timeout=timeout,
                # A closing connection waits this long for the peer's
                # close_notify (asyncio's default, 30 s, would let a silent
                # peer hold its slot): the linger of a plain connection.
                ssl_shutdown_timeout=max(events.config.close_linger, 0.1),
            )
        else:  # PyPy 3.9: asyncio has no TLS shutdown timeout before 3.11
            await loop.connect_accepted_socket(protocol, conn, ssl=listening.context, ssl_handshake_timeout=timeout)
    except Exception as e:  # the socket is closed
        why = handshake_failure(e, timeout)
        log.warning("TLS handshake from %s on %s failed: %s; closed", peer, listening.name, why)
        events.tls_failed()


def reload_certificates(listening_list: list[Listening]) -> int:
    """SIGHUP: every TLS listener's files into a new SSLContext; a bad file keeps the old one.

    The number of listeners whose certificate was reloaded."""
    done = 0
    for listening in listening_list:
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


def bind(host: str, port: int, backlog: int) -> list[socket.socket]:
    """Listening sockets for a TLS or hub listener, as loop.create_server makes them (every address `host` names)."""
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

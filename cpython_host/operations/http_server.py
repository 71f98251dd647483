"""The host's HTTP listener: Prometheus /metrics, the status page, the admin API.

Theory of operation
-------------------
One asyncio server on the broker's own event loop ([http] table; off
without it). Each connection carries ONE request (the answer says
`Connection: close`): h11 parses it, at most MAX_REQUEST bytes of head and
body within REQUEST_TIMEOUT seconds, and anything else is answered 400 /
405 / 413 / 408 and closed. Handlers run between the broker's callbacks,
so they read the broker's tables directly (common/broker/admin.py) and an
action's output (a DISCONNECT) goes out with the server's next flush.

Routes:
  GET  /metrics               Prometheus text format (cpython_host/operations/metrics.py)
  GET  /, /status.js, ...     the status page: static files of cpython_host/operations/status_page/
  GET  /api/status            what the page shows (cpython_host/operations/status.py)
  GET  /api/clients           connected clients
  GET  /api/sessions          every session with its queue
  GET  /api/retained?filter=F retained messages matching F (default "#")
  GET  /api/store             the store's size and syncs
  POST /api/kick              {"client_id": ...}: disconnect (v5: DISCONNECT 0x98)
  POST /api/drop-session      {"client_id": ...}: disconnect and end its session
  POST /api/clear-retained    {"filter": ...}: clear the retained messages it matches
  GET  /api/bridges           every bridge: state, queue, health, counters (common/bridge/runner.py)
  POST /api/bridge/add        {"bridge": {...}}: start a bridge (a [[bridge]] table as JSON)
  POST /api/bridge/remove     {"name": ...}: stop it; its queue is dead-lettered (the count)
  POST /api/bridge/pause      {"name": ...}: no upstream connection until resume (the queue waits)
  POST /api/bridge/resume     {"name": ...}

Who may do what (Viewer): without a login (loopback, auth "auto") every
request is the administrator's; with one, the users of [http] admins are,
and any other user sees the counts, its own clients and sessions and the
retained topics its ACL lets it read, and is refused every action (403).

Protection: the listener answers without a login only when it listens on
loopback addresses and auth is "auto"; otherwise every request needs HTTP
basic auth of an MQTT user (the [security] password file, checked by the
same Users object the broker uses, so a SIGHUP reload applies here too,
under the same per-address penalty after a failed login as a CONNECT:
common/broker/login.py), and config.py refuses basic auth in the clear off
loopback. Without a login
the Host header must name a loopback address (a web page elsewhere cannot
reach the API through DNS rebinding), and an action must be a POST with a
JSON body (a cross-site form cannot send one) and, when the browser says
where it comes from (Origin), from a page of this listener's own origin.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import http
import json
import logging
import ssl
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import h11
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from common.broker import admin, secured
from common.broker.broker import Broker
from common.broker.clienttext import clip, words
from common.driver import Driver
from cpython_host.config import HttpConfig, loopback_name
from cpython_host.hints import explain_listen_failure
from cpython_host.operations.metrics import registry
from cpython_host.operations.status import Status
from cpython_host.transports.listeners import address

log = logging.getLogger("siskin.http")

STATIC = Path(__file__).resolve().parent / "status_page"
STATIC_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
}
MAX_REQUEST = 16384  # bytes of request head + body
REQUEST_TIMEOUT = 10.0  # s for a whole request to arrive, and for its answer to leave
MAX_OPEN = 32  # connections at once; more are closed at once (a flood must not take the broker's sockets)
MAX_PER_ADDRESS = 8  # connections at once from one source address (a browser opens about 6)
RESERVED = 4  # slots beyond MAX_OPEN that only this machine's own 127.0.0.1 and ::1 may take
LOCAL_PEERS = ("127.0.0.1", "::1")
CSP = "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'none'; base-uri 'none'"


class HttpError(Exception):
    def __init__(self, status: int, text: str, headers: list[tuple[str, str]] | None = None) -> None:
        super().__init__(text)
        self.status = status
        self.text = text
        self.headers = headers or []


class WebServer:
    """The HTTP listener around a running broker."""

    def __init__(
        self,
        config: HttpConfig,
        driver: Driver,
        flush: Any,
        data_dir: str | None,
        bridges: Callable[[], Any] = list,
        tls: Callable[[], list[tuple[str, str]]] = list,
        listeners: Callable[[], list[str]] = list,
    ) -> None:
        """`bridges()`: the host's Bridges (cpython_host/bridge.py: its Runners,
        add/find/remove); `tls()`: (what, file) of the certificates in use
        (status.tls_files); `listeners()`: what each MQTT listener is
        (status.listener_lines); each read when asked."""
        self.config = config
        self.driver = driver
        self.broker: Broker = driver.broker
        self.flush = flush  # the server's schedule_flush: an action's output goes out
        store_path = None if data_dir is None else str(Path(data_dir) / "siskin.log")
        self.bridges = bridges
        self.metrics = registry(self.broker, store_path, self.now, bridges)
        self.status = Status(driver, store_path, config.sample_interval, bridges, tls, lambda: self.refused, listeners)
        self.context: ssl.SSLContext | None = None
        if config.tls:
            from cpython_host.transports.tls import server_context

            self.context = server_context(config.listener())
        self.server: asyncio.Server | None = None
        self.name = f"{config.host}:{config.port}"
        self.auth = config.require_auth
        self.sampler: asyncio.Task[None] | None = None
        self.static = {p.name: p for p in STATIC.iterdir() if p.suffix in STATIC_TYPES}
        self.open = 0  # connections being served
        self.by_address: dict[str, int] = {}  # source address -> its connections being served
        self.refused = 0  # connections closed at once: over MAX_OPEN or MAX_PER_ADDRESS
        self.refusal_log_at = 0.0  # monotonic s: the next such refusal logged
        self.metrics.register(HttpCollector(self))

    def now(self) -> int:
        self.driver.clock()
        now: int = self.driver.now
        return now

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Listen; OSError (filename = the address) if it cannot."""
        cfg = self.config
        tls: dict[str, Any] = {}
        if self.context is not None:
            tls = {"ssl": self.context, "ssl_handshake_timeout": cfg.head_timeout}
            if sys.version_info >= (3, 11):  # (PyPy 3.9: asyncio has no TLS shutdown timeout before 3.11)
                tls["ssl_shutdown_timeout"] = 1.0
        try:
            self.server = await asyncio.start_server(self.serve, cfg.host, cfg.port, **tls)
        except OSError as e:
            e.filename = f"{cfg.host}:{cfg.port} ([http])"
            explain_listen_failure(e, cfg.port, "[http] port")
            raise
        self.name = address(self.server.sockets[0].getsockname())
        self.sampler = asyncio.get_running_loop().create_task(self.sample())
        if self.auth:
            admins = ", ".join(self.config.admins) or "none: users see their own and act on nothing; set [http] admins"
            guard = f"HTTP basic auth of the MQTT users; administrators: {admins}"
        else:
            guard = "loopback only, no login"
        log.info(
            "HTTP listener on %s://%s: /metrics, status page /, API /api/ (%s)",
            "https" if self.context else "http",
            self.name,
            guard,
        )

    def reload_certificate(self) -> bool:
        """SIGHUP: certfile and keyfile again, for the handshakes that follow;
        a bad file keeps the old ones. Whether it reloaded."""
        if self.context is None:
            return False
        from cpython_host.config import ConfigError
        from cpython_host.transports.tls import server_context

        lst = self.config.listener()
        try:
            server_context(lst)  # checks the files, with the messages of a TLS listener
            self.context.load_cert_chain(lst.certfile, lst.keyfile)
        except (ConfigError, OSError, ssl.SSLError) as e:
            log.error("%s; the HTTP listener keeps its previous certificate", e)
            return False
        log.info("HTTP listener %s: certificate reloaded from %s", self.name, lst.certfile)
        return True

    async def close(self) -> None:
        if self.sampler is not None:
            self.sampler.cancel()
        if self.server is not None:
            self.server.close()
            try:
                await asyncio.wait_for(self.server.wait_closed(), 1.0)
            except asyncio.TimeoutError:  # pragma: no cover - a request still being answered
                pass

    async def sample(self) -> None:
        """Every sample_interval s: the status page's rates (Status.sample)."""
        while True:
            self.status.sample()
            await asyncio.sleep(self.config.sample_interval)

    # ------------------------------------------------------------ requests

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        source = peer[0] if peer else ""
        why = self.over_limit(source)
        if why:
            self.refused += 1
            writer.transport.abort()
            now = time.monotonic()
            if now >= self.refusal_log_at:
                self.refusal_log_at = now + 10
                log.warning("HTTP connection from %s refused: %s (%d refused so far)", address(peer), why, self.refused)
            return
        self.open += 1
        self.by_address[source] = self.by_address.get(source, 0) + 1
        try:
            await self.answer(reader, writer, peer)
        finally:
            self.open -= 1
            left = self.by_address.pop(source) - 1
            if left:
                self.by_address[source] = left
            writer.close()

    def over_limit(self, source: str) -> str:
        """Why a new connection from `source` is refused at once ("": it is not).

        Slow clients cannot hold the listener: each address holds at most
        MAX_PER_ADDRESS connections, each must send its head within
        head_timeout, and beyond MAX_OPEN only this machine (127.0.0.1,
        ::1: siskin ctl, a browser on the box) gets RESERVED more."""
        if self.by_address.get(source, 0) >= MAX_PER_ADDRESS:
            return f"{MAX_PER_ADDRESS} open from that address already"
        cap = MAX_OPEN + RESERVED if source in LOCAL_PEERS else MAX_OPEN
        if self.open >= cap:
            return f"{self.open} open already (at most {MAX_OPEN}, and {RESERVED} more from this machine)"
        return ""

    async def answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: Any) -> None:
        """Read one request, write its answer."""
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_REQUEST)
        try:
            try:
                request, body = await asyncio.wait_for(self.read_request(conn, reader), REQUEST_TIMEOUT)
                status, ctype, data, headers = self.handle(request, body, peer[0] if peer else "")
            except HttpError as e:
                status, ctype, data, headers = (
                    e.status,
                    "text/plain; charset=utf-8",
                    (e.text + "\n").encode(),
                    e.headers,
                )
            except asyncio.TimeoutError:
                status, ctype, data, headers = 408, "text/plain; charset=utf-8", b"request timeout\n", []
            except h11.RemoteProtocolError as e:
                code = e.error_status_hint
                status, ctype, data, headers = code, "text/plain; charset=utf-8", f"bad request: {e}\n".encode(), []
            if status >= 400 and status != 401:
                log.info("HTTP %d for %s: %s", status, address(peer), data[:200].decode(errors="replace").strip())
            if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                head = [
                    ("content-type", ctype),
                    ("content-length", str(len(data))),
                    ("connection", "close"),
                    ("cache-control", "no-store"),
                    ("x-content-type-options", "nosniff"),
                    # The page loads only its own files, and no other site may
                    # frame it (its buttons act: no clicks borrowed by a page on top).
                    ("content-security-policy", CSP),
                    ("x-frame-options", "DENY"),
                    *headers,
                ]
                out = conn.send(h11.Response(status_code=status, headers=head, reason=http.HTTPStatus(status).phrase))
                out += conn.send(h11.Data(data=data)) or b""
                out += conn.send(h11.EndOfMessage()) or b""
                writer.write(out)
                await asyncio.wait_for(writer.drain(), REQUEST_TIMEOUT)
        except (ConnectionError, ssl.SSLError, h11.LocalProtocolError, asyncio.TimeoutError):
            pass

    async def read_request(self, conn: h11.Connection, reader: asyncio.StreamReader) -> tuple[h11.Request, bytes]:
        """The request and its body; TimeoutError if its head (request line
        and headers) is not all here within head_timeout, however steadily
        its bytes trickle in."""
        request = None
        body = b""
        received = 0
        loop = asyncio.get_running_loop()
        head_due = loop.time() + self.config.head_timeout
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                if request is None:
                    data = await asyncio.wait_for(reader.read(4096), max(head_due - loop.time(), 0))
                else:
                    data = await reader.read(4096)
                received += len(data)
                if received > MAX_REQUEST:
                    if request is None:
                        raise HttpError(431, f"request head over {MAX_REQUEST} bytes")
                    raise HttpError(413, f"request over {MAX_REQUEST} bytes")
                conn.receive_data(data)  # b"": the peer's EOF
                continue
            if isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                assert request is not None
                return request, body
            elif isinstance(event, h11.ConnectionClosed):
                raise ConnectionResetError("closed before the request was complete")

    def handle(self, request: h11.Request, body: bytes, peer: str) -> tuple[int, str, bytes, list[tuple[str, str]]]:
        method = request.method.decode("ascii", "replace")
        target = urllib.parse.urlsplit(request.target.decode("ascii", "replace"))
        path = target.path
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in request.headers}
        viewer = Viewer(self.broker, self.check_access(headers, peer), self.config.admins)
        if method not in ("GET", "POST"):
            raise HttpError(405, f"method {method} not allowed", [("allow", "GET, POST")])
        if path.startswith("/api/") and method == "POST":
            if headers.get("content-type", "").split(";")[0].strip() != "application/json":
                raise HttpError(415, "POST wants a JSON body (Content-Type: application/json)")
            try:
                args = json.loads(body or b"{}")
            except ValueError:
                raise HttpError(400, "the body is not JSON") from None
            if not isinstance(args, dict):
                raise HttpError(400, "the body must be a JSON object")
            origin = headers.get("origin")
            if origin is not None and not same_origin(origin, headers.get("host", "")):
                raise HttpError(403, f"an action from a page of another origin ({clip(origin)!r}) is refused")
            if not viewer.admin:
                raise HttpError(403, f"user {clip(viewer.user or '')!r} is not an administrator ([http] admins): it may look, not act")
            return 200, "application/json", _json(self.action(path, args)), []
        if method == "POST":
            raise HttpError(405, f"POST is only for /api/ actions, not {path}", [("allow", "GET")])
        if path == "/metrics":
            return 200, CONTENT_TYPE_LATEST, generate_latest(self.metrics), []
        if path.startswith("/api/"):
            query = urllib.parse.parse_qs(target.query)
            return 200, "application/json", _json(self.read(path, query, viewer)), []
        name = "index.html" if path == "/" else path[1:]
        file = self.static.get(name)
        if file is None or "/" in name:
            raise HttpError(404, f"no such page: {path}")
        return 200, STATIC_TYPES[file.suffix], file.read_bytes(), []

    def check_access(self, headers: dict[str, str], peer: str) -> str | None:
        """The user who logged in (None: no login asked); HttpError for a
        request the listener must not serve. `peer`: its source address."""
        if not self.auth:
            host = headers.get("host", "")
            name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
            if not loopback_name(name.strip("[]")):
                raise HttpError(403, f"Host {clip(host)!r} is not a loopback name: this listener serves this machine only")
            return None
        challenge = [("www-authenticate", 'Basic realm="siskin", charset="UTF-8"')]
        given = headers.get("authorization", "")
        scheme, _, encoded = given.partition(" ")
        if scheme.lower() != "basic":
            raise HttpError(401, "log in with an MQTT user name and password (HTTP basic auth)", challenge)
        try:
            user, _, password = base64.b64decode(encoded.strip(), validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            raise HttpError(401, "malformed basic auth credentials", challenge) from None
        broker = self.broker
        wait = -1
        if broker.users is not None:
            wait = secured.check_password(broker, peer, user, password.encode(), self.now())
        if wait:
            broker.stats.login_failed += 1
            held = words(secured.held_why(broker, peer, user, self.now())) if wait > 0 else ""
            log.warning("HTTP: login failed for user %r from %s%s", clip(user), peer, held)
            raise HttpError(401, "bad user name or password", challenge)
        return user

    # ------------------------------------------------------------ the API

    def read(self, path: str, query: dict[str, list[str]], viewer: Viewer) -> Any:
        broker = self.broker
        if path == "/api/status":
            return self.status.document(viewer)
        if path == "/api/clients":
            return {"clients": [c for c in admin.clients(broker) if viewer.owns(c["user"])]}
        if path == "/api/sessions":
            return {"sessions": [s for s in admin.sessions(broker) if viewer.owns(s["user"])]}
        if path == "/api/retained":
            flt = query.get("filter", ["#"])[0]
            try:
                found = admin.retained(broker, flt, self.now())
            except ValueError as e:
                raise HttpError(400, str(e)) from None
            shown = [{"topic": t, "bytes": n, "qos": q} for t, n, q in found if viewer.reads(t)]
            return {"filter": flt, "retained": shown}
        if path == "/api/store":
            return self.status.store()
        if path == "/api/bridges":
            return {"bridges": self.bridge_status(viewer)}
        raise HttpError(404, f"no such API: GET {path}")

    def action(self, path: str, args: dict[str, Any]) -> Any:
        broker = self.broker
        if path in ("/api/kick", "/api/drop-session"):
            client_id = args.get("client_id")
            if not isinstance(client_id, str):
                raise HttpError(400, 'wants {"client_id": "..."}')
            bridge = next((r.name for r in self.bridges() if r.bridge.local.client_id == client_id), None)
            if bridge is not None:
                # Its session is the bridge's queue: ending it would lose what waits for the upstream.
                raise HttpError(
                    409,
                    f"{client_id} is bridge {bridge}'s own local session (its queue for the upstream): "
                    f"pause, resume or remove the bridge instead (siskin ctl bridge pause {bridge})",
                )
            if path == "/api/kick":
                done = admin.kick(broker, client_id, self.now())
                what = "disconnected" if done else "no such client connected"
            else:
                done = admin.drop_session(broker, client_id, self.now())
                what = "session dropped" if done else "no such session"
            if not done:
                raise HttpError(404, f"{client_id}: {what}")
            self.flush()
            return {"client_id": client_id, "result": what}
        if path == "/api/clear-retained":
            flt = args.get("filter")
            if not isinstance(flt, str):
                raise HttpError(400, 'wants {"filter": "..."} (a topic filter, e.g. "sensors/#")')
            try:
                cleared = admin.clear_retained(broker, flt, self.now())
            except ValueError as e:
                raise HttpError(400, str(e)) from None
            self.flush()
            return {"filter": flt, "cleared": cleared}
        if path.startswith("/api/bridge/"):
            return self.bridge_action(path[len("/api/bridge/") :], args)
        raise HttpError(404, f"no such API: POST {path}")

    def bridge_status(self, viewer: Viewer) -> list[dict[str, Any]]:
        """Each bridge's figures; an administrator's only (the upstreams are
        the site's, not a user's)."""
        return [runner.status() for runner in self.bridges()] if viewer.admin else []

    def bridge_action(self, verb: str, args: dict[str, Any]) -> Any:
        """add / remove / pause / resume a bridge (cpython_host/bridge.py Bridges)."""
        from common.bridge.settings import parse_bridge
        from common.broker.settings import ConfigError as CoreConfigError

        bridges = self.bridges()
        if verb == "add":
            table = args.get("bridge")
            if not isinstance(table, dict):
                raise HttpError(400, 'wants {"bridge": {...}}: a [[bridge]] table with its "topic" rules, as JSON')
            try:
                settings = parse_bridge("the API's bridge", table)
                bridges.add(settings)
            except (CoreConfigError, ValueError) as e:
                raise HttpError(400, str(e)) from None
            return {"name": settings.name, "result": "started (not written to the config file)"}
        name = args.get("name")
        if not isinstance(name, str):
            raise HttpError(400, 'wants {"name": "..."} (a bridge\'s name)')
        runner = bridges.find(name) if bridges else None
        if runner is None:
            raise HttpError(404, f"no bridge named {name!r}")
        if verb == "remove":
            n = bridges.remove(name)
            self.flush()
            return {"name": name, "result": "removed", "dead_lettered": n}
        if verb == "pause":
            runner.pause()
            return {"name": name, "result": "paused"}
        if verb == "resume":
            runner.resume()
            return {"name": name, "result": "resumed"}
        raise HttpError(404, f"no such API: POST /api/bridge/{verb}")


class HttpCollector(Collector):
    """The listener's own figures for /metrics."""

    def __init__(self, web: WebServer) -> None:
        self.web = web

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("siskin_http_connections", "HTTP connections being served now", value=self.web.open)
        yield CounterMetricFamily(
            "siskin_http_refused",
            "HTTP connections closed at once: over 32 open, or over 8 from one address",
            value=self.web.refused,
        )


class Viewer:
    """Who asks. An administrator (every request where no login is asked;
    else a user named in [http] admins) sees everything and may act. Any
    other user sees the counts, its own clients and sessions, and the
    retained topics the ACL lets it read (all of them without an ACL, as
    over MQTT), and may act on nothing (403)."""

    def __init__(self, broker: Broker, user: str | None, admins: list[str]) -> None:
        self.user = user
        self.admin = user is None or user in admins
        self.rules = None if self.admin or broker.acl is None else broker.acl.for_client(user, None)

    def owns(self, user: str | None) -> bool:
        return self.admin or user == self.user

    def reads(self, topic: str) -> bool:
        return self.rules is None or bool(self.rules.can_read(topic))


def same_origin(origin: str, host: str) -> bool:
    """Whether a request's Origin names the host (and port) it was sent to:
    the page's own actions do; another site's page cannot make a browser
    send an action with a JSON body without a CORS preflight, which this
    listener never grants, and this refuses one that tries anyway."""
    return urllib.parse.urlsplit(origin).netloc.lower() == host.strip().lower()


def _json(value: Any) -> bytes:
    return (json.dumps(value, indent=1, sort_keys=True) + "\n").encode()

"""The HTTP auth hook ([security.http]) on the real host server, asked by real
clients (paho 3.1.1 and 5.0, raw sockets), answered by a real HTTP server
(the standard library's, in a thread, on loopback) that the tests make slow,
hanging, garbled or gone: allow, refuse and their caches, the answer's ACL,
fail-closed timeouts that never block the event loop, garbage answers, a
cache no client id or wrong password can poison, and the offline grace
(counted in $SYS and logged). The core's side: tests/core/test_external_auth.py."""

from __future__ import annotations

import json
import re
import signal
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.host.broker_proc import BrokerProcess, Paho, RawClient, connect_packet, wait_until

USERS = {"alice": "wonderland", "bob": "builder"}
ACL = {"publish": ["devices/%c/out"], "subscribe": ["devices/+/out", "$SYS/broker/clients/#"]}


class AuthServer:
    """A loopback HTTP auth service; `mode` says how it behaves."""

    def __init__(self) -> None:
        self.mode = "ok"  # ok | hang | garbage | status500 | deny
        self.requests: list[dict[str, Any]] = []
        self.release = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(body)
                if "topic" in body:  # the acl_url's question: a PUBLISH's topic or a filter
                    if body["topic"] == "slow/x":
                        outer.release.wait(30)  # hangs
                        return
                    mine = body["topic"].startswith(f"devices/{body['clientid']}/") and body["clientid"] != "dev2"
                    watcher = body["username"] == "bob" and body["topic"].startswith("$SYS/")
                    self._send(200, json.dumps({"allow": mine or watcher}).encode())
                    return
                if outer.mode == "hang":
                    outer.release.wait(30)
                    return
                if outer.mode == "garbage":
                    self._send(200, b"<html>allow</html>")
                elif outer.mode == "status500":
                    self._send(500, b"{}")
                elif outer.mode == "deny":
                    self._send(403, b"")
                elif USERS.get(body["username"]) == body["password"]:
                    self._send(200, json.dumps({"allow": True, "acl": ACL}).encode())
                elif body["username"] in USERS:
                    self._send(200, b'{"allow": false}')
                else:
                    self._send(403, b"")

            def _send(self, status: int, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mqtt/auth"

    def stop(self) -> None:
        """Gone: the port refuses connections from now on."""
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def auth() -> Iterator[AuthServer]:
    server = AuthServer()
    yield server
    server.stop()


def start(work: Path, auth: AuthServer, **hook: Any) -> BrokerProcess:
    b = BrokerProcess(work, limits={"sys_interval": 1}, security={"allow_anonymous": False})
    options = {"url": auth.url(), "timeout": 0.5, **hook}
    with b.config_path.open("a") as f:
        f.write("[security.http]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in options.items()))
    return b


def connack(b: BrokerProcess, user: str, password: str, client_id: str = "c") -> bytes:
    c = RawClient(b.port)
    try:
        return c.connect(client_id, username=user, password=password.encode())
    finally:
        c.close()


def sys_value(p: Paho, topic: str, want: str) -> None:
    """Wait until $SYS `topic` says `want` (the retained value, then each update)."""
    wait_until(lambda: _latest(p, topic) == want, 15, f"{topic} = {want}")


_seen: dict[str, str] = {}


def _latest(p: Paho, topic: str) -> str | None:
    import queue

    try:
        while True:
            msg = p.messages.get_nowait()
            _seen[msg.topic] = msg.payload.decode()
    except queue.Empty:
        return _seen.get(topic)


def test_allow_refuse_cache_and_acl(tmp_path: Path, auth: AuthServer) -> None:
    with start(tmp_path, auth) as b:
        v5 = Paho(b.port, "dev1", username="alice", password="wonderland", protocol=5).connect()
        assert auth.requests[-1] == {
            "username": "alice",
            "password": "wonderland",
            "clientid": "dev1",
            "ip": "127.0.0.1",
        }
        assert [r.value for r in v5.subscribe("devices/+/out", 1)] == [1]
        assert [r.value for r in v5.subscribe("devices/#", 1)] == [0x87]  # beyond the answer's rules
        v5.close()
        asked = len(auth.requests)
        assert connack(b, "alice", "wonderland", "dev1") == b"\x00\x00"  # the cached allow
        assert len(auth.requests) == asked
        assert connack(b, "alice", "guess", "dev1") == b"\x00\x04"  # {"allow": false}
        assert connack(b, "mallory", "x", "dev1") == b"\x00\x04"  # HTTP 403
        asked = len(auth.requests)
        assert connack(b, "mallory", "x", "dev1") == b"\x00\x04"  # the cached refusal
        assert len(auth.requests) == asked
        # A refusal under alice's name and client id did not poison her entry.
        assert connack(b, "alice", "wonderland", "dev1") == b"\x00\x00"
        b.wait_log(r"auth hook refused user mallory, client id dev1, from 127\.0\.0\.1:\d+: HTTP 403")
        assert "Traceback" not in b.log_text()


def test_hanging_server_fails_closed_without_blocking(tmp_path: Path, auth: AuthServer) -> None:
    with start(tmp_path, auth) as b:
        bystander = Paho(b.port, "by", username="bob", password="builder").connect()
        auth.mode = "hang"
        c = RawClient(b.port)
        c.send(connect_packet("slow", username="carol", password=b"pw"))
        wait_until(lambda: any(r["username"] == "carol" for r in auth.requests), 10, "the hook asked")
        # While the hook waits for its answer, the broker serves everyone else.
        assert bystander.subscribe("devices/+/out", 0) == [0]
        bystander.publish("devices/by/out", b"still here", 1)
        assert bystander.get().payload == b"still here"
        got = c.read_packet(10)
        assert got is not None and got[1] == b"\x00\x03"  # fail-closed: server unavailable [MQTT-3.2.2-5]
        b.wait_log(r"auth hook http://127\.0\.0\.1:\d+/mqtt/auth: no answer within 0\.5 s")
        b.wait_log(
            r"auth hook unreachable \(no answer within 0\.5 s\): user carol, client id slow, .* has no cached allow"
        )
        bystander.close()


def test_garbage_answers_fail_closed(tmp_path: Path, auth: AuthServer) -> None:
    with start(tmp_path, auth) as b:
        for mode, why in (("garbage", "the answer is not JSON"), ("status500", "HTTP 500")):
            auth.mode = mode
            assert connack(b, "alice", "wonderland", "g-" + mode) == b"\x00\x03"
            b.wait_log("auth hook unreachable \\(" + why)
        p = Paho(b.port, "g5", username="alice", password="wonderland", protocol=5)
        with pytest.raises(AssertionError, match="Server unavailable"):
            p.connect()
        p.client.loop_stop()


def test_offline_grace(tmp_path: Path, auth: AuthServer) -> None:
    # cache_ttl 0: every CONNECT asks, so the grace is what lets alice in.
    with start(tmp_path, auth, cache_ttl=0, offline_grace=3600) as b:
        watch = Paho(b.port, "watch", username="bob", password="builder", protocol=5).connect()
        watch.subscribe("$SYS/broker/clients/#", 0)
        assert connack(b, "alice", "wonderland", "dev1") == b"\x00\x00"
        auth.stop()  # the auth service goes away
        assert connack(b, "alice", "wonderland", "dev1") == b"\x00\x00"  # a cached allow: in
        assert connack(b, "alice", "wonderland", "dev1") == b"\x00\x00"
        assert connack(b, "alice", "guess", "dev1") == b"\x00\x03"  # not her credentials: out
        assert connack(b, "eve", "x", "dev1") == b"\x00\x03"  # unknown: out
        assert connack(b, "alice", "wonderland", "dev2") == b"\x00\x03"  # her allow was for client id dev1 only
        b.wait_log(
            r"auth hook unreachable \(ConnectionRefusedError.*user alice, client id dev1, .* let in on a cached allow"
        )
        b.wait_log(r"auth hook unreachable \(ConnectionRefusedError.*user eve, client id dev1, .* has no cached allow")
        sys_value(watch, "$SYS/broker/clients/auth_offline/allowed", "2")
        sys_value(watch, "$SYS/broker/clients/auth_offline/refused", "3")
        watch.close()


def test_offline_grace_ends(tmp_path: Path, auth: AuthServer) -> None:
    with start(tmp_path, auth, cache_ttl=0, offline_grace=1) as b:
        assert connack(b, "alice", "wonderland", "dev1") == b"\x00\x00"
        auth.stop()
        # Within the grace alice gets in; once it is over she is refused.
        wait_until(lambda: connack(b, "alice", "wonderland", "dev1") == b"\x00\x03", 15, "the grace ends")


def test_sighup_reloads_the_hook(tmp_path: Path, auth: AuthServer) -> None:
    # [security.http] read again on SIGHUP: another url is asked from then on
    # (the old one's cache dropped: its allows no longer count); the table
    # removed, no hook is asked any more.
    other = AuthServer()
    other.mode = "deny"
    try:
        with start(tmp_path, auth, cache_ttl=3600) as b:
            assert connack(b, "alice", "wonderland", "dev1") == b"\x00\x00"
            text = b.config_path.read_text()
            b.config_path.write_text(text.replace(auth.url(), other.url()))
            b.proc.send_signal(signal.SIGHUP)  # type: ignore[union-attr]
            b.wait_log(
                r"SIGHUP: security reloaded: .*; auth hook "
                + re.escape(other.url())
                + r" reloaded \(was "
                + re.escape(auth.url())
                + r": its cache dropped\)"
            )
            asked = len(auth.requests)
            # A cached allow of the old service would have let her in: refused now (403).
            assert connack(b, "alice", "wonderland", "dev1") == b"\x00\x04"
            assert [r["username"] for r in other.requests] == ["alice"]
            assert len(auth.requests) == asked
            b.config_path.write_text(text[: text.index("[security.http]")])
            b.proc.send_signal(signal.SIGHUP)  # type: ignore[union-attr]
            b.wait_log(r"SIGHUP: security reloaded: .*; auth hook removed")
            # No hook, no password file, allow_anonymous false: the user name is not checked by anyone.
            assert connack(b, "alice", "wonderland", "dev1") == b"\x00\x05"
            assert len(other.requests) == 1
            assert "Traceback" not in b.log_text()
    finally:
        other.stop()


def test_publish_and_subscribe_checks(tmp_path: Path, auth: AuthServer) -> None:
    # acl_url: each PUBLISH and SUBSCRIBE of a client with a user name is
    # asked (then cached), besides the login ACL (devices/%c/out, devices/+/out);
    # the service allows devices/<client id>/... except for dev2. A refusal
    # is v5 0x87; a hanging answer holds that client only (bob's round trips
    # go on) until the timeout.
    with start(tmp_path, auth, acl_url=auth.url().replace("/auth", "/acl")) as b:
        bob = Paho(b.port, "bob", username="bob", password="builder", protocol=5).connect()
        assert [r.value for r in bob.subscribe("devices/bob/out", 1)] == [1]
        alice = Paho(b.port, "dev1", username="alice", password="wonderland", protocol=5)
        codes: list[int] = []
        alice.client.on_publish = lambda c, u, mid, rc, props: codes.append(rc.value)
        alice.connect()
        assert [r.value for r in alice.subscribe("devices/dev1/out", 1)] == [1]
        assert [r.value for r in alice.subscribe("devices/+/out", 1)] == [0x87]  # the ACL allows it, the service not
        for _ in range(2):
            alice.client.publish("devices/dev1/out", b"1", 1).wait_for_publish(5)
        asked = [(r["topic"], r["acc"]) for r in auth.requests if "topic" in r and r["clientid"] == "dev1"]
        assert sorted(asked) == [
            ("devices/+/out", 1),
            ("devices/dev1/out", 1),
            ("devices/dev1/out", 2),
        ]  # (once: cached)
        dev2 = Paho(b.port, "dev2", username="alice", password="wonderland", protocol=5)
        dev2.client.on_publish = lambda c, u, mid, rc, props: codes.append(rc.value)
        dev2.connect()
        dev2.client.publish("devices/dev2/out", b"2", 1).wait_for_publish(5)
        assert codes == [0, 0, 0x87], codes
        # (one refusal line a second: the first, the SUBSCRIBE's)
        b.wait_log(r"dev1: SUBSCRIBE devices/\+/out refused by the auth hook \(user alice\)")
        info = alice.client.publish("slow/x", b"4", 1)
        wait_until(lambda: any(r.get("topic") == "slow/x" for r in auth.requests), 10, "the hook asked for slow/x")
        for i in range(3):  # meanwhile bob is served
            bob.publish("devices/bob/out", b"%d" % i, 1)
            assert bob.get(timeout=10).payload == b"%d" % i
        info.wait_for_publish(10)
        assert codes[-1] == 0x87
        b.wait_log(r"auth hook http://127\.0\.0\.1:\d+/mqtt/acl: no answer within 0\.5 s")
        for p in (alice, dev2, bob):
            p.close()
        assert "Traceback" not in b.log_text()


def test_offline_grace_of_publish_and_subscribe_checks(tmp_path: Path, auth: AuthServer) -> None:
    # acl_url with cache_ttl 0: every PUBLISH and SUBSCRIBE asks. Once the
    # service is gone, a check it allowed before is allowed on that allow
    # (offline_grace); one it never allowed is refused (0x87), each counted.
    acl_url = auth.url().replace("/auth", "/acl")
    with start(tmp_path, auth, acl_url=acl_url, cache_ttl=0, offline_grace=3600) as b:
        watch = Paho(b.port, "watch", username="bob", password="builder", protocol=5).connect()
        watch.subscribe("$SYS/broker/clients/#", 0)
        alice = Paho(b.port, "dev1", username="alice", password="wonderland", protocol=5)
        codes: list[int] = []
        alice.client.on_publish = lambda c, u, mid, rc, props: codes.append(rc.value)
        alice.connect()
        assert [r.value for r in alice.subscribe("devices/dev1/out", 1)] == [1]
        alice.client.publish("devices/dev1/out", b"1", 1).wait_for_publish(5)
        assert codes == [0]
        assert alice.get(timeout=10).payload == b"1"
        auth.stop()  # the auth service goes away
        alice.client.publish("devices/dev1/out", b"2", 1).wait_for_publish(10)  # allowed before: allowed
        assert alice.get(timeout=10).payload == b"2"
        # devices/+/out: the login ACL allows it, the service was never asked: refused
        assert [r.value for r in alice.subscribe("devices/+/out", 1)] == [0x87]
        alice.client.publish("devices/dev1/x", b"3", 1).wait_for_publish(10)  # never asked: refused
        assert codes == [0, 0, 0x87], codes
        b.wait_log(
            r"auth hook http://127\.0\.0\.1:\d+/mqtt/acl: ConnectionRefusedError.*: user alice, client id dev1, PUBLISH to devices/dev1/out allowed on a cached allow"
        )
        sys_value(watch, "$SYS/broker/clients/auth_offline/checks_allowed", "1")
        sys_value(watch, "$SYS/broker/clients/auth_offline/checks_refused", "2")
        for p in (alice, watch):
            p.close()
        assert "Traceback" not in b.log_text()


def test_offline_grace_of_checks_ends(tmp_path: Path, auth: AuthServer) -> None:
    # The grace runs from the service's last real allow: allows given offline do not renew it.
    acl_url = auth.url().replace("/auth", "/acl")
    with start(tmp_path, auth, acl_url=acl_url, cache_ttl=0, offline_grace=2) as b:
        alice = Paho(b.port, "dev1", username="alice", password="wonderland", protocol=5)
        codes: list[int] = []
        alice.client.on_publish = lambda c, u, mid, rc, props: codes.append(rc.value)
        alice.connect()
        alice.client.publish("devices/dev1/out", b"0", 1).wait_for_publish(5)
        auth.stop()

        def refused() -> bool:
            alice.client.publish("devices/dev1/out", b"x", 1).wait_for_publish(10)
            return codes[-1] == 0x87

        wait_until(refused, 20, "the grace of the PUBLISH check ends")
        assert codes[0] < 0x80 and codes[1] < 0x80, codes  # (0x10: no subscriber) the first offline: allowed
        alice.close()

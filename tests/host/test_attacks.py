"""Attacks from outside, over real sockets against the real
host broker, each a class of bug fixed at its root (docs/security.md):

1. an identity put into an ACL pattern cannot widen it (user "%c", client
   id "+", a certificate CN "%c");
2. a will is a publish by its owner, judged when it is sent;
3. a failed password check costs the same whatever line it meets;
4. client text echoed in reason strings and log lines is bounded;
5. client text is escaped at the logging boundary (a WebSocket subprotocol);
6. the HTTP API: only administrators act; others see what their ACL reads;
7. the HTTP listener stays reachable under slowloris.

The core's side of each rule is in tests/core (both interpreters).
"""

from __future__ import annotations

import json
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from common.broker.users import Users
from common.crypto.pbkdf2 import pbkdf2_hmac
from tests.host.broker_proc import REPO_ROOT, BrokerProcess, Paho, RawClient, parse_publish, wait_until
from tests.host.test_server_security import mosquitto_tool, siskin_passwd
from tests.host.test_server_tls import Pki, TlsRawClient, tls_client
from tools.bench import mqtt as raw

# ---------------------------------------------------------------------------
# 1. ACL patterns


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    pki = Pki(tmp_path_factory.mktemp("pki"))
    pki.percent_c = pki.leaf("percent-c", pki.ca.issue_cert(common_name="%c"))  # type: ignore[attr-defined]
    return pki


def test_an_identity_put_into_a_pattern_cannot_widen_it(tmp_path: Path, pki: Pki) -> None:
    passwd = tmp_path / "passwd"
    siskin_passwd(passwd, "%c", "pw", "-c")
    siskin_passwd(passwd, "bob", "builder")
    (tmp_path / "acl").write_text("pattern readwrite devices/%u/#\n")
    mutual = pki.listener(cafile=pki.ca_file, require_certificate=True, use_identity_as_username=True)
    security = {"password_file": "passwd", "acl_file": "acl", "allow_anonymous": False}
    with BrokerProcess(tmp_path, listeners=[{"port": 0}, mutual], security=security) as b:
        wait_until(lambda: len(b.ports()) == 2, 5, b.log_text)
        bob = RawClient(b.port)
        assert bob.connect("bobs-phone", username="bob", password=b"builder") == b"\x00\x00"
        assert bob.subscribe("devices/bob/#", 1) == 1

        def password(client_id: str) -> Any:
            c = RawClient(b.port)
            assert c.connect(client_id, username="%c", password=b"pw") == b"\x00\x00"
            return c

        def certificate(client_id: str) -> Any:
            c = TlsRawClient(tls_client(b.ports()[1], pki.client_context(pki.percent_c)))  # type: ignore[attr-defined]
            assert c.connect(client_id) == b"\x00\x00"
            return c

        for login, client_id in ((password, "bob"), (password, "+"), (certificate, "bob"), (certificate, "+")):
            mallory = login(client_id)
            # [MQTT-3.9.3-2] (3.1.1) 0x80: the filter is not granted.
            assert mallory.subscribe("devices/bob/#", 1, packet_id=1) == 0x80, client_id
            assert mallory.subscribe("devices/+/#", 1, packet_id=2) == 0x80, client_id
            assert mallory.subscribe("devices/%c/#", 1, packet_id=3) == 1, client_id  # its own literal level
            mallory.send(raw.publish("devices/bob/cmd", b"open", 1, 7))
            assert mallory.read_packet() == (0x40, b"\x00\x07")  # acknowledged, dropped [MQTT-3.3.5-2]
            mallory.close()
        bob.send(raw.publish("devices/bob/mark", b"end", 1, 9))
        got = []
        while not got or got[-1][0] != "devices/bob/mark":
            pkt = bob.read_packet()
            assert pkt is not None
            if pkt[0] >> 4 == 3:
                got.append(parse_publish(*pkt)[:2])
        assert got == [("devices/bob/mark", b"end")], got
        assert "Traceback" not in b.log_text()


# ---------------------------------------------------------------------------
# 2. Wills


WILL_ACL = """\
user alice
topic write alerts/#
user bob
topic readwrite alerts/#
topic read $SYS/broker/messages/denied/publish
topic read $SYS/broker/uptime
"""


def test_a_will_is_judged_by_the_rules_in_force_when_it_is_sent(tmp_path: Path) -> None:
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    passwd = tmp_path / "passwd"
    siskin_passwd(passwd, "alice", "wonderland", "-c")
    siskin_passwd(passwd, "bob", "builder")
    acl = tmp_path / "acl"
    acl.write_text(WILL_ACL)
    security = {"password_file": "passwd", "acl_file": "acl", "allow_anonymous": False}
    with BrokerProcess(tmp_path, limits={"sys_interval": 1}, security=security) as b:
        bob = Paho(b.port, "bob", username="bob", password="builder").connect()
        bob.subscribe("alerts/#", 1)
        bob.subscribe("$SYS/broker/messages/denied/publish", 0)
        bob.subscribe("$SYS/broker/uptime", 0)
        # A 3.1.1 will, and a v5 will with a Will Delay Interval (killed
        # before the reload: its will is waiting out the delay).
        plain = RawClient(b.port)
        assert (
            plain.connect("plain", will=("alerts/w", b"plain", 1, False), username="alice", password=b"wonderland")
            == b"\x00\x00"
        )
        delayed = Paho(b.port, "delayed", username="alice", password="wonderland", protocol=5)
        will_props = Properties(PacketTypes.WILLMESSAGE)
        will_props.WillDelayInterval = 1
        delayed.client.will_set("alerts/w", b"delayed", 1, properties=will_props)
        connect_props = Properties(PacketTypes.CONNECT)
        connect_props.SessionExpiryInterval = 60
        delayed.client.connect("127.0.0.1", b.port, properties=connect_props)
        delayed.client.loop_start()
        assert delayed.connected.wait(5) and delayed.connack_rc == 0
        delayed.client.loop_stop()
        delayed.client.socket().close()  # no DISCONNECT: the will is due after its delay
        b.wait_log(r"delayed disconnected without DISCONNECT")
        acl.write_text(WILL_ACL.replace("user alice\ntopic write alerts/#\n", ""))
        b.proc.send_signal(signal.SIGHUP)  # type: ignore[union-attr]
        b.wait_log(r"SIGHUP: security reloaded")
        plain.close()  # the socket dies: its will is not the client's to send any more
        b.wait_log(r"plain disconnected without DISCONNECT")
        # Counted as refused PUBLISHes, in $SYS; then wait out the delay (the uptime moves on).
        seen: dict[str, bytes] = {}

        def sys_value(topic: str) -> bytes | None:
            while not bob.messages.empty():
                msg = bob.messages.get()
                seen[msg.topic] = msg.payload
                assert msg.topic != "alerts/w", msg.payload  # no will, ever
            return seen.get(topic)

        wait_until(lambda: sys_value("$SYS/broker/messages/denied/publish") == b"2", 10, lambda: str(seen))
        start = int(wait_until(lambda: sys_value("$SYS/broker/uptime"), 5, "uptime").split()[0])
        wait_until(
            lambda: int((sys_value("$SYS/broker/uptime") or b"0").split()[0]) >= start + 3, 10, lambda: str(seen)
        )
        bob.publish("alerts/mark", b"end", qos=1)
        wait_until(lambda: sys_value("alerts/mark") or (bob.messages.empty() and None), 5, "the marker")
        assert [t for t in seen if t.startswith("alerts/")] == ["alerts/mark"], seen
        assert "will to alerts/w refused by the ACL (user alice" in b.log_text()
        bob.close()


# ---------------------------------------------------------------------------
# 4. Client text echoed in reason strings and log lines is bounded


def connect_v5(client_id: str, username: str, password: bytes) -> bytes:
    """A v5 CONNECT, written out by hand: clean start, user name and password, no properties."""
    body = raw.mqtt_str("MQTT") + bytes([5, 0xC2]) + (0).to_bytes(2, "big") + b"\x00"
    body += raw.mqtt_str(client_id) + raw.mqtt_str(username) + len(password).to_bytes(2, "big") + password
    return b"\x10" + raw.vbi(len(body)) + body


def test_a_huge_user_name_gets_its_connack_and_a_bounded_log_line(tmp_path: Path) -> None:
    siskin_passwd(tmp_path / "passwd", "alice", "wonderland", "-c")
    with BrokerProcess(tmp_path, security={"password_file": "passwd"}) as b:
        huge = "m" * 65535
        v5 = RawClient(b.port)
        v5.send(connect_v5("c5", huge, b"wrong"))
        pkt = v5.read_packet()
        assert pkt is not None, "closed without a CONNACK"
        assert (pkt[0], pkt[1][1]) == (0x20, 0x86)  # [MQTT-3.2.2-7] (5.0) Bad User Name or Password
        assert v5.closed_within(5)
        v3 = RawClient(b.port)
        assert v3.connect("c4", username=huge, password=b"wrong") == b"\x00\x04"
        assert v3.closed_within(5)
        lines = [
            line
            for line in b.wait_log(r"(?s)refused CONNECT.*refused CONNECT") and b.log_text().splitlines()
            if "refused CONNECT" in line
        ]
        assert len(lines) == 2, lines
        for line in lines:
            assert "m" * 128 + "\u2026(+65407 bytes)" in line, line[:300]
            assert len(line) < 600, len(line)
        assert "Traceback" not in b.log_text()


# ---------------------------------------------------------------------------
# 5. Client text is escaped at the logging boundary


def test_a_terminal_escape_in_a_websocket_handshake_reaches_the_log_escaped(tmp_path: Path) -> None:
    ws = {"protocol": "websockets", "port": 0}
    with BrokerProcess(tmp_path, listeners=[{"port": 0}, ws]) as b:
        wait_until(lambda: len(b.ports()) == 2, 5, b.log_text)

        def upgrade(subprotocols: bytes) -> bytes:
            request = (
                b"GET /mqtt HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                b"Sec-WebSocket-Protocol: " + subprotocols + b"\r\n\r\n"
            )
            with socket.create_connection(("127.0.0.1", b.ports()[1]), timeout=5) as s:
                s.sendall(request)
                return s.recv(65536)

        answer = upgrade(b"x\x1b[1A\x1b[2K\x08\x7fforged, " + b"y" * 300)
        assert answer.startswith(b"HTTP/1.1 400 "), answer
        line = b.wait_log(r"WebSocket upgrade refused: .*offered: .*").group()
        assert "offered: x\\x1b[1A\\x1b[2K\\x08\\x7fforged, yyy" in line, line
        assert "y" * 100 + "\u2026(+" in line and len(line) < 500, line  # the offer is cut, too
        # Bytes wsproto cannot read as ASCII: an answer, not a traceback.
        assert upgrade("mqtt\u2028\x9b".encode()).startswith(b"HTTP/1.1 400 ")
        b.wait_log(r"WebSocket upgrade refused: .*not ASCII")
        raw_log = b.log_path.read_bytes()
        for byte in (b"\x1b", b"\x08", b"\x7f", b"\xc2\x9b", b"\xe2\x80\xa8"):
            assert byte not in raw_log, byte
        assert b"Traceback" not in raw_log


# ---------------------------------------------------------------------------
# 3. A failed password check costs the same whatever line it meets


def test_a_failed_login_costs_the_same_whatever_line_it_meets(tmp_path: Path) -> None:
    """A file of `siskin passwd` (PBKDF2-SHA256, 10,000 rounds) and mosquitto_passwd
    ($7$: PBKDF2-SHA512, 101 rounds) lines: an unknown user once cost 10,000 rounds and
    a wrong password for the $7$ user 101. The work is counted through the hook every
    PBKDF2 call takes. The times are printed here; compared (interleaved, medians
    within 2x), they are a verdict of `make soak` (tests/soak/test_timing_bounds.py):
    on a machine whose cores are busy with other work, times say how busy they are."""
    users = mixed_cost_users(tmp_path)
    work: list[tuple[str, int]] = []

    def counted(name: str, password: bytes, salt: bytes, iterations: int, dklen: int) -> bytes:
        work.append((name, iterations))
        return pbkdf2_hmac(name, password, salt, iterations, dklen)

    users.kdf = counted
    for user in ("alice", "bob", "mallory"):
        del work[:]
        assert not users.check(user, b"wrong")
        assert sorted(work) == [("sha256", 1), ("sha256", 10000), ("sha512", 1), ("sha512", 101)], (user, work)
    users.kdf = pbkdf2_hmac
    print("median time of a failed check (s):", failed_check_medians(users))


def mixed_cost_users(tmp_path: Path) -> Users:
    """alice in `siskin passwd`'s form, bob in mosquitto_passwd's, one file."""
    passwd = tmp_path / "passwd"
    subprocess.run(
        [sys.executable, "-m", "cpython_host", "passwd", "--stdin", "-c", str(passwd), "alice"],
        cwd=REPO_ROOT,
        input="wonderland\n",
        text=True,
        check=True,
        timeout=20,
    )
    subprocess.run([mosquitto_tool("mosquitto_passwd"), "-b", str(passwd), "bob", "builder"], check=True, timeout=20)
    text = passwd.read_text()
    assert "$pbkdf2-sha256$10000$" in text and "$7$101$" in text
    return Users.parse(text, str(passwd))


def failed_check_medians(users: Users) -> dict[str, float]:
    """The median time of 15 failed checks for each user (alice, bob, one unknown), interleaved."""
    times: dict[str, list[float]] = {"alice": [], "bob": [], "mallory": []}
    for _ in range(15):
        for user, spent in times.items():
            started = time.perf_counter()
            users.check(user, b"wrong")
            spent.append(time.perf_counter() - started)
    return {user: statistics.median(spent) for user, spent in times.items()}


# ---------------------------------------------------------------------------
# 6. The HTTP API: administrators act; other users see their own


def test_only_administrators_act_and_others_see_what_their_acl_reads(tmp_path: Path) -> None:
    from tests.host.test_web import ctl, get, post

    passwd = tmp_path / "passwd"
    siskin_passwd(passwd, "alice", "wonderland", "-c")
    siskin_passwd(passwd, "bob", "builder")
    (tmp_path / "acl").write_text("user alice\ntopic readwrite #\nuser bob\ntopic readwrite home/+\n")
    security = {"password_file": "passwd", "acl_file": "acl", "allow_anonymous": False}
    http = {"port": 0, "auth": "basic", "admins": ["alice"]}
    with BrokerProcess(tmp_path, security=security, http=http) as b:
        url = b.http_url()
        alice_c = RawClient(b.port)
        assert alice_c.connect("alices", username="alice", password=b"wonderland") == b"\x00\x00"
        bob_c = RawClient(b.port)
        assert bob_c.connect("bobs", username="bob", password=b"builder") == b"\x00\x00"
        for topic in ("secret/plans", "home/kitchen"):
            alice_c.send(raw.publish(topic, b"x", 1, 1, retain=True))
            assert alice_c.read_packet() == (0x40, b"\x00\x01")
        bob = ("bob", "builder")
        alice = ("alice", "wonderland")

        def listed(path: str, key: str, who: tuple[str, str]) -> list[str]:
            status, body = get(url + path, auth=who)
            assert status == 200, body
            return sorted(row.get("topic") or row["client_id"] for row in json.loads(body)[key])

        # bob (not an administrator) sees its own and what its ACL reads ...
        assert listed("/api/retained", "retained", bob) == ["home/kitchen"]
        assert listed("/api/clients", "clients", bob) == ["bobs"]
        assert listed("/api/sessions", "sessions", bob) == ["bobs"]
        status = json.loads(get(url + "/api/status", auth=bob)[1])
        assert (status["user"], status["admin"], [c["client_id"] for c in status["clients"]]) == ("bob", False, ["bobs"])
        # ... and may change nothing (403), through the API or siskin ctl.
        for path, body in (("kick", {"client_id": "alices"}), ("drop-session", {"client_id": "alices"}), ("clear-retained", {"filter": "#"})):
            code, answer = post(url + "/api/" + path, body, auth=bob)
            assert code == 403 and b"not an administrator" in answer, (path, code, answer)
        run = ctl("--url", url, "--user", "bob", "kick", "alices", env={"SISKIN_CTL_PASSWORD": "builder"})
        assert run.returncode == 1 and "403" in run.stderr and "not an administrator" in run.stderr, run
        run = ctl("--url", url, "--user", "bob", "whoami", env={"SISKIN_CTL_PASSWORD": "builder"})
        assert run.returncode == 0 and "bob: not an administrator" in run.stdout, run
        assert listed("/api/retained", "retained", alice) == ["home/kitchen", "secret/plans"]
        assert listed("/api/clients", "clients", alice) == ["alices", "bobs"]
        # alice, an administrator, may.
        code, answer = post(url + "/api/clear-retained", {"filter": "secret/#"}, auth=alice)
        assert (code, answer["cleared"]) == (200, 1)
        code, answer = post(url + "/api/kick", {"client_id": "bobs"}, auth=alice)
        assert code == 200 and bob_c.closed_within(5)
        assert listed("/api/clients", "clients", alice) == ["alices"]


# ---------------------------------------------------------------------------
# 7. The HTTP listener under slowloris

SLOW_HEAD = b"GET /api/status HTTP/1.1\r\nHost: localhost\r\n"  # never finished


def from_address(port: int, source: str) -> socket.socket:
    """A connection to the loopback listener from the loopback address `source` (127.0.0.x)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((source, 0))
    s.settimeout(5)
    s.connect(("127.0.0.1", port))
    return s


def served(port: int, source: str) -> bytes:
    with from_address(port, source) as s:
        s.sendall(SLOW_HEAD + b"\r\n")
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    return answer.split(b"\r\n", 1)[0]


def closed_at_once(port: int, source: str) -> bool:
    """True if the listener closes a new connection before it sends anything (a
    held slow one would wait out head_timeout, far beyond the 5 s recv timeout)."""
    with from_address(port, source) as s:
        try:
            return s.recv(1) == b""
        except ConnectionResetError:
            return True


def http_figures(url: str) -> tuple[int, int]:
    from tests.host.test_web import scrape

    samples = scrape(url)
    return int(samples[("siskin_http_connections", ())]), int(samples[("siskin_http_refused_total", ())])


def test_slow_clients_cannot_hold_the_http_listener(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path, http={"port": 0, "head_timeout": 30}) as b:
        url = b.http_url()
        port = int(url.rsplit(":", 1)[1])
        held = [from_address(port, "127.0.0.2") for _ in range(8)]
        for s in held:
            s.sendall(SLOW_HEAD)
        # (the scrape itself is one more connection, from 127.0.0.1)
        wait_until(lambda: http_figures(url) == (9, 0), 10, lambda: str(http_figures(url)))
        assert closed_at_once(port, "127.0.0.2")  # its ninth
        assert served(port, "127.0.0.3") == b"HTTP/1.1 200 OK"  # another address is served
        for source in ("127.0.0.3", "127.0.0.4", "127.0.0.5"):
            for _ in range(8):
                held.append(from_address(port, source))
                held[-1].sendall(SLOW_HEAD)
        wait_until(lambda: http_figures(url) == (33, 1), 10, lambda: str(http_figures(url)))
        assert closed_at_once(port, "127.0.0.6")  # 32 open: full for every other address ...
        assert served(port, "127.0.0.1") == b"HTTP/1.1 200 OK"  # ... but this machine's own
        assert http_figures(url) == (33, 2)
        for s in held:
            s.close()
        b.wait_log(r"HTTP connection from 127\.0\.0\.2:\d+ refused: 8 open from that address already")


def test_a_request_head_must_arrive_within_head_timeout(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path, http={"port": 0, "head_timeout": 0.5}) as b:
        port = int(b.http_url().rsplit(":", 1)[1])
        with from_address(port, "127.0.0.2") as s:
            # A byte every 0.1 s: never idle, but the head never ends.
            started = time.monotonic()
            answer = b""
            for byte in SLOW_HEAD * 20:
                try:
                    s.sendall(bytes([byte]))
                    s.settimeout(0.1)
                    answer += s.recv(65536)
                except TimeoutError:
                    continue
                except (BrokenPipeError, ConnectionResetError):
                    break
                if answer.endswith(b"\n\n") or b"request timeout" in answer:
                    break
            assert answer.startswith(b"HTTP/1.1 408 "), answer
            assert time.monotonic() - started < 9  # well before the whole request's 10 s

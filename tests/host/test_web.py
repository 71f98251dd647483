"""The [http] listener of the real host process: Prometheus /metrics scraped
and parsed with prometheus_client's own parser while paho traffic moves the
counters, the JSON API and `siskin ctl` end to end (a kicked paho v5 client
hears DISCONNECT 0x98), HTTP basic auth of the MQTT users over HTTPS, the
config refusals, bad requests, and the status page in a real headless
Chromium: tests/host/test_status_page.py."""

from __future__ import annotations

import base64
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import REPO_ROOT
from tests.host.broker_proc import BrokerProcess, run_cli, wait_until, write_config
from tests.host.broker_proc import Paho as Mqtt
from tests.host.test_server_v5 import V5

pytestmark = pytest.mark.interop


class Paho(V5):
    """test_server_v5's paho MQTTv5 client, with a session expiry and a publish that waits for its ack."""

    def __init__(self, port: int, client_id: str, expiry: int = 0) -> None:
        props = None
        if expiry:
            props = Properties(PacketTypes.CONNECT)
            props.SessionExpiryInterval = expiry
        super().__init__(port, client_id, True, props)
        assert self.rc == 0

    def publish(self, topic: str, payload: bytes, qos: int, retain: bool = False) -> None:
        self.client.publish(topic, payload, qos, retain).wait_for_publish(5)


def get(url: str, auth: tuple[str, str] | None = None, context: Any = None, **headers: str) -> tuple[int, bytes]:
    """(status, body) of a GET."""
    return call(urllib.request.Request(url, headers=headers), auth, context)


def post(url: str, body: Any, auth: tuple[str, str] | None = None) -> tuple[int, Any]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    status, data = call(req, auth)
    return status, json.loads(data) if status == 200 else data


def call(req: urllib.request.Request, auth: tuple[str, str] | None, context: Any = None) -> tuple[int, bytes]:
    if auth is not None:
        req.add_header("Authorization", "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode())
    try:
        with urllib.request.urlopen(req, timeout=10, context=context) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def scrape(url: str, **kw: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of /metrics by (name, labels), parsed by prometheus_client."""
    status, body = get(url + "/metrics", **kw)
    assert status == 200, body
    samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def ctl(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cpython_host", "ctl", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        env=dict(os.environ, **(env or {})),
    )


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(
        tmp_path_factory.mktemp("web"), limits={"sys_interval": 0}, http={"port": 0, "sample_interval": 1}
    ) as b:
        yield b
        assert b.alive(), b.log_text()
        assert "Traceback" not in b.log_text(), b.log_text()


def test_metrics_move_with_paho_traffic(broker: BrokerProcess, clients: list[Paho]) -> None:
    url = broker.http_url()
    before = scrape(url)
    for name in ("siskin_clients_connected", "siskin_sessions", "process_resident_memory_bytes"):
        assert (name, ()) in before, sorted(before)
    assert before[("process_resident_memory_bytes", ())] > 1_000_000
    sub = Paho(broker.port, "m-sub")
    clients.append(sub)
    sub.subscribe("m/#", 2)
    pub = Paho(broker.port, "m-pub")
    clients.append(pub)
    for qos in (0, 1, 1, 2, 2, 2):
        pub.publish("m/x", b"12345678", qos)
    pub.publish("m/retained", b"kept", 1, retain=True)
    for _ in range(7):
        sub.messages.get(timeout=5)
    after = scrape(url)

    def moved(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after[key] - before.get(key, 0)

    assert after[("siskin_clients_connected", ())] == before[("siskin_clients_connected", ())] + 2
    assert moved("siskin_messages_received_total", qos="0") == 1
    assert moved("siskin_messages_received_total", qos="1") == 3
    assert moved("siskin_messages_received_total", qos="2") == 3
    assert moved("siskin_messages_sent_total", qos="2") == 3
    assert moved("siskin_connections_total") == 2
    assert moved("siskin_subscriptions") == 1
    assert moved("siskin_retained_messages") == 1
    assert moved("siskin_received_bytes_total") > 7 * 8
    assert moved("siskin_sent_bytes_total") > 7 * 8
    assert after[("siskin_messages_dropped_total", (("cause", "queue_full"),))] == 0
    # The store (--data-dir): its size, and the sync before the retained message's PUBACK, timed.
    assert after[("siskin_store_size_bytes", ())] > 0
    assert moved("siskin_store_sync_seconds_count") >= 1
    assert moved("siskin_store_sync_seconds_count") == moved("siskin_store_syncs_total")
    assert moved("siskin_store_sync_seconds_sum") > 0
    assert after[("siskin_build_info", (("version", "0.1.0"),))] == 1


def test_status_api(broker: BrokerProcess, clients: list[Paho]) -> None:
    url = broker.http_url()
    c = Paho(broker.port, "api-client")
    clients.append(c)
    c.subscribe("api/#", 1)
    status, body = get(url + "/api/status")
    assert status == 200
    doc = json.loads(body)
    mine = [x for x in doc["clients"] if x["client_id"] == "api-client"]
    assert len(mine) == 1
    assert mine[0]["protocol_level"] == 5
    assert mine[0]["keep_alive"] == 60
    assert mine[0]["address"].startswith("127.0.0.1:")
    assert {"client_id": "api-client", "filter": "api/#"} in doc["subscriptions"]
    assert doc["store"]["enabled"] and doc["store"]["size_bytes"] > 0
    # The throughput ring (one sample a second here) fills while the broker runs.
    wait_until(lambda: json.loads(get(url + "/api/status")[1])["throughput"], 5, "no throughput sample")


def test_ctl_end_to_end(broker: BrokerProcess, clients: list[Paho]) -> None:
    url = broker.http_url()
    victim = Paho(broker.port, "victim", expiry=3600)
    victim.subscribe("v/#", 1)
    # The options may follow the command; the table is for people: MQTT version, no None/True.
    listed = ctl("clients", "--url", url)
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert [h for h in header.split("  ") if h][:3] == ["client id", "address", "MQTT"]
    (row,) = [r.split() for r in rows if r.startswith("victim ")]
    assert row[2:5] == ["5.0", "60", "s"] and row[5] == "-"  # version, keep-alive, no user
    assert "None" not in listed.stdout and "True" not in listed.stdout
    kicked = ctl("--url", url, "kick", "victim")
    assert kicked.returncode == 0 and "victim: disconnected" in kicked.stdout, kicked.stderr
    assert victim.disconnects.get(timeout=5).value == 0x98  # administrative action
    victim.client.loop_stop()
    broker.wait_log(r"closing victim: disconnected by the administrator; sent DISCONNECT reason 0x98")
    again = ctl("--url", url, "kick", "victim")
    assert again.returncode == 1 and "no such client connected" in again.stderr
    # Its persistent session stayed; a message waits in its queue.
    pub = Paho(broker.port, "v-pub")
    clients.append(pub)
    pub.publish("v/1", b"for the victim", 1)
    sessions = json.loads(ctl("--url", url, "--json", "sessions").stdout)["sessions"]
    (mine,) = [s for s in sessions if s["client_id"] == "victim"]
    assert not mine["connected"] and mine["queued"] == 1 and mine["subscriptions"] == ["v/#"]
    shown = ctl("sessions", "--url", url).stdout
    (row,) = [r.split() for r in shown.splitlines() if r.startswith("victim ")]
    assert row[1:3] == ["no", "yes"] and row[-1] == "v/#"  # not connected, persistent
    dropped = ctl("--url", url, "drop-session", "victim")
    assert dropped.returncode == 0 and "session dropped" in dropped.stdout
    assert "victim" not in ctl("--url", url, "sessions").stdout
    # Retained: listed, cleared, gone for a new subscriber.
    pub.publish("r/a", b"one", 1, retain=True)
    pub.publish("r/b", b"three", 0, retain=True)
    listed = ctl("--url", url, "retained", "r/#")
    assert listed.returncode == 0
    assert ["r/a 3 1", "r/b 5 0"] == [" ".join(line.split()) for line in listed.stdout.splitlines()[1:]]
    cleared = ctl("--url", url, "clear-retained", "r/#")
    assert "2 retained message(s) matching r/# cleared" in cleared.stdout
    assert json.loads(get(url + "/api/retained?filter=r/%23")[1])["retained"] == []
    fresh = Paho(broker.port, "r-sub")
    clients.append(fresh)
    fresh.subscribe("r/#", 1)
    with pytest.raises(queue.Empty):
        fresh.messages.get(timeout=0.5)
    store = ctl("--url", url, "store")
    assert store.returncode == 0 and "siskin.log" in store.stdout and "bytes" in store.stdout
    bad = ctl("--url", url, "clear-retained", "r/#/x")
    assert bad.returncode == 1 and "not a valid topic filter" in bad.stderr
    # --config finds the listener in the config file's [http] table... which
    # says port 0 here: ctl then names the address it could not reach.
    unreachable = ctl("--config", str(broker.config_path), "clients")
    assert unreachable.returncode == 1 and "cannot reach http://127.0.0.1:0" in unreachable.stderr


def test_page_may_not_be_framed(broker: BrokerProcess) -> None:
    """The status page has buttons that act: no other site may frame it (clickjacking), and it loads only its own files."""
    with urllib.request.urlopen(broker.http_url() + "/", timeout=10) as response:
        assert response.headers["X-Frame-Options"] == "DENY"
        policy = response.headers["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in policy and "default-src 'self'" in policy


def test_bad_requests(broker: BrokerProcess) -> None:
    url = broker.http_url()
    assert get(url + "/nothing-here")[0] == 404
    assert get(url + "/api/nothing")[0] == 404
    # A page of another site reaching this loopback listener by DNS rebinding names its own host.
    status, body = get(url + "/api/status", Host="evil.example:80")
    assert status == 403 and b"not a loopback name" in body
    # An action wants a JSON body: a cross-site form cannot send one.
    form = urllib.request.Request(url + "/api/kick", data=b"client_id=x", method="POST")
    assert call(form, None)[0] == 415
    assert post(url + "/api/kick", ["x"])[0] == 400
    assert post(url + "/api/kick", {"client_id": "nobody"})[0] == 404
    host, port = url.rsplit("/", 1)[1].split(":")

    def raw(request: bytes) -> bytes:
        with socket.create_connection((host, int(port)), timeout=5) as s:
            s.sendall(request)
            s.shutdown(socket.SHUT_WR)
            got = b""
            while chunk := s.recv(65536):
                got += chunk
            return got

    assert raw(b"GARBAGE\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    assert raw(b"DELETE / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").startswith(b"HTTP/1.1 405 ")
    huge = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + b"a" * 20000 + b"\r\n\r\n"
    assert raw(huge).startswith(b"HTTP/1.1 431 ")
    body = b"{" + b" " * 20000 + b"}"
    big_post = b"POST /api/kick HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    assert raw(big_post + b"Content-Length: %d\r\n\r\n" % len(body) + body).startswith(b"HTTP/1.1 413 ")
    # At most 32 connections at once (8 from each address; this machine's own
    # 127.0.0.1 gets 4 more: tests/host/test_attacks.py): the 33rd from
    # elsewhere is closed at once, and logged.
    idle = []
    for source in ("127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"):
        for _ in range(8):
            idle.append(socket.socket())
            idle[-1].bind((source, 0))
            idle[-1].settimeout(5)
            idle[-1].connect((host, int(port)))

    def refused() -> bool:
        with socket.socket() as s:
            s.bind(("127.0.0.6", 0))
            s.settimeout(5)
            s.connect((host, int(port)))
            s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            try:
                return s.recv(100) == b""
            except ConnectionResetError:
                return True  # (the abort may reset it)

    try:
        wait_until(refused, 5, "no refusal")
    finally:
        for s in idle:
            s.close()
    broker.wait_log(r"HTTP connection from 127\.0\.0\.6:\d+ refused: 32 open already")

    def index() -> bytes | None:
        try:
            return get(url + "/")[1]
        except ConnectionError:  # refused while the idle ones were still counted
            return None

    assert b"<title>Siskin status</title>" in wait_until(index, 5, "the page once the idle connections closed")
    assert get(url + "/status.js")[0] == 200


def siskin_passwd(path: Path, user: str, password: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "cpython_host", "passwd", "--stdin", "--iterations", "1000", "-c", str(path), user],
        input=password + "\n",
        text=True,
        check=True,
        cwd=REPO_ROOT,
        timeout=20,
    )


def test_basic_auth_over_https(tmp_path: Path) -> None:
    """auth = "basic" asks every request for an MQTT user's password, here over HTTPS (trustme's CA)."""
    import ssl

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    certfile, keyfile, cafile = tmp_path / "web.crt", tmp_path / "web.key", tmp_path / "ca.crt"
    certfile.write_bytes(cert.cert_chain_pems[0].bytes())
    keyfile.write_bytes(cert.private_key_pem.bytes())
    cafile.write_bytes(ca.cert_pem.bytes())
    siskin_passwd(tmp_path / "passwd", "admin", "s3cret")
    http = {"port": 0, "auth": "basic", "certfile": str(certfile), "keyfile": str(keyfile)}
    security = {"password_file": str(tmp_path / "passwd"), "allow_anonymous": True}
    with BrokerProcess(tmp_path / "b", limits={"sys_interval": 0}, http=http, security=security) as b:
        url = b.http_url()
        assert url.startswith("https://")
        context = ssl.create_default_context(cafile=str(cafile))
        status, _ = get(url + "/metrics", context=context)
        assert status == 401
        status, _ = get(url + "/api/status", auth=("admin", "wrong"), context=context)
        assert status == 401
        b.wait_log(r"HTTP: login failed for user 'admin' from 127.0.0.1\n")
        # A failed login holds its address and user name back, as for MQTT CONNECTs:
        # even the right password is refused until the penalty (1 s) is over.
        assert get(url + "/api/status", auth=("admin", "s3cret"), context=context)[0] == 401
        b.wait_log(
            r"HTTP: login failed for user 'admin' from 127.0.0.1: 1 failed logins of this user name from this "
            "address, no password checked"
        )
        wait_until(lambda: get(url + "/api/status", auth=("admin", "s3cret"), context=context)[0] == 200, 5, "login")
        status, _ = get(url + "/api/status", auth=("nobody", "s3cret"), context=context)
        assert status == 401
        # The penalty of that failure (1 s) over, the right password is let in again.
        wait_until(lambda: get(url + "/api/status", auth=("admin", "s3cret"), context=context)[0] == 200, 5, "login")
        samples = scrape(url, auth=("admin", "s3cret"), context=context)
        assert samples[("siskin_clients_connected", ())] == 0
        assert samples[("siskin_login_failures_total", ())] >= 3
        # ctl: refused without a user, served with one.
        refused = ctl("--url", url, "--cafile", str(cafile), "clients")
        assert refused.returncode == 1 and "401" in refused.stderr and "--user" in refused.stderr
        password = {"SISKIN_CTL_PASSWORD": "s3cret"}
        ok = ctl("--url", url, "--cafile", str(cafile), "--user", "admin", "store", env=password)
        assert ok.returncode == 0, ok.stderr
        # Without the CA the certificate is not trusted.
        untrusted = ctl("--url", url, "--user", "admin", "store", env=password)
        assert untrusted.returncode == 1 and "CERTIFICATE_VERIFY_FAILED" in untrusted.stderr
        # SIGHUP: a renewed certificate (here from another CA) for the handshakes that follow.
        ca2 = trustme.CA()
        renewed = ca2.issue_cert("127.0.0.1")
        certfile.write_bytes(renewed.cert_chain_pems[0].bytes())
        keyfile.write_bytes(renewed.private_key_pem.bytes())
        (tmp_path / "ca2.crt").write_bytes(ca2.cert_pem.bytes())
        os.kill(b.pid, signal.SIGHUP)
        b.wait_log(r"HTTP listener 127\.0\.0\.1:\d+: certificate reloaded from")
        fresh = ctl("--url", url, "--cafile", str(tmp_path / "ca2.crt"), "--user", "admin", "store", env=password)
        assert fresh.returncode == 0, fresh.stderr
        stale = ctl("--url", url, "--cafile", str(cafile), "--user", "admin", "store", env=password)
        assert stale.returncode == 1 and "CERTIFICATE_VERIFY_FAILED" in stale.stderr
        assert b.stop() == 0


@pytest.mark.usefixtures("broker_runtime")
def test_https_listener_and_status_on_each_runtime(tmp_path: Path, clients: list[Any]) -> None:
    """The HTTPS listener starts and the status API counts on CPython and on
    PyPy 3.9 (whose asyncio takes no TLS shutdown timeout)."""
    import ssl

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "web.crt"))
    cert.private_key_pem.write_to_path(str(tmp_path / "web.key"))
    http = {
        "port": 0,
        "sample_interval": 1,
        "certfile": str(tmp_path / "web.crt"),
        "keyfile": str(tmp_path / "web.key"),
    }
    with BrokerProcess(tmp_path / "b", limits={"sys_interval": 0}, http=http) as b:
        context = ssl.create_default_context(cadata=ca.cert_pem.bytes().decode())
        pub = Mqtt(b.port, "rt-pub").connect()
        clients.append(pub)
        pub.publish("rt/x", b"1", 1)
        status, body = get(b.http_url() + "/api/status", context=context)
        assert status == 200
        (mine,) = [c for c in json.loads(body)["clients"] if c["client_id"] == "rt-pub"]
        assert mine["messages_in"] == 1
        assert b.stop() == 0


def test_config_refusals(tmp_path: Path) -> None:
    """No listener that would serve the API to the network without a login, or take passwords in the clear."""
    siskin_passwd(tmp_path / "passwd", "admin", "s3cret")
    cases: list[tuple[dict[str, Any], str | None, str]] = [
        ({"host": "0.0.0.0"}, None, "set [security] password_file, or listen on 127.0.0.1"),
        ({"host": "0.0.0.0"}, "passwd", "passwords in the clear; set certfile and keyfile (HTTPS)"),
        ({"auth": "basic"}, None, 'auth = "basic"'),
        ({"certfile": "x.crt"}, None, "certfile is set but keyfile is not"),
        ({"auth": "digest"}, None, "auth"),
        ({"prot": 1}, None, "prot"),
    ]
    for http, passwd, message in cases:
        security = {"password_file": passwd} if passwd else None
        config = write_config(tmp_path / "c.toml", {}, security=security, http=http)
        proc = run_cli("--config", str(config), "--port", "0")
        assert proc.returncode == 2, (http, proc.stderr)
        assert message in proc.stderr, (http, proc.stderr)


def test_status_api_per_client_and_offline(broker: BrokerProcess, clients: list[Any]) -> None:
    """Messages in and out of each client as the core counts them (the
    3.1.1 QoS 0 fan-out, which writes one frame to many, included), when it
    connected, and a persistent session's last-seen time once it is gone."""
    url = broker.http_url()

    def status() -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(get(url + "/api/status")[1])
        return doc

    t0 = time.time()
    old = Mqtt(broker.port, "pc-old", clean=False).connect()  # 3.1.1, persistent
    clients.append(old)
    old.subscribe("pc/#", 1)
    new = Paho(broker.port, "pc-new")  # v5
    clients.append(new)
    new.subscribe("pc/b", 1)
    pub = Mqtt(broker.port, "pc-pub").connect()
    clients.append(pub)
    for i in range(5):
        pub.publish("pc/a", b"%d" % i, 0)  # only 3.1.1 subscribers: the frame forwarded as it is
    for i in range(3):
        pub.publish("pc/b", b"%d" % i, 1)
    for _ in range(8):
        old.get()
    for _ in range(3):
        new.messages.get(timeout=5)
    t1 = time.time()
    by_id = {c["client_id"]: c for c in status()["clients"]}
    assert (by_id["pc-pub"]["messages_in"], by_id["pc-pub"]["messages_out"]) == (8, 0)
    assert (by_id["pc-old"]["messages_in"], by_id["pc-old"]["messages_out"]) == (0, 8)
    assert (by_id["pc-new"]["messages_in"], by_id["pc-new"]["messages_out"]) == (0, 3)
    assert t0 - 1 <= by_id["pc-old"]["connected_since"] <= t1 + 1
    assert by_id["pc-old"]["user"] is None
    # Gone: its session stays, queues, and says when it was last seen.
    t2 = time.time()
    old.close()
    clients.remove(old)
    gone = wait_until(
        lambda: [o for o in status()["offline_sessions"] if o["client_id"] == "pc-old"], 5, "pc-old offline"
    )
    pub.publish("pc/a", b"while away", 1)
    (mine,) = wait_until(
        lambda: [o for o in status()["offline_sessions"] if o["client_id"] == "pc-old" and o["queued"]], 5, "queued"
    )
    assert t2 - 1 <= gone[0]["last_seen"] <= time.time() + 1
    assert mine["queued"] == 1 and mine["expires"] is None  # 3.1.1 persistent: never expires here
    # The same id back: counted afresh.
    back = Mqtt(broker.port, "pc-old", clean=False).connect()
    clients.append(back)
    assert back.get().payload == b"while away"
    again = wait_until(lambda: [c for c in status()["clients"] if c["client_id"] == "pc-old"], 5, "pc-old back")
    assert (again[0]["messages_in"], again[0]["messages_out"]) == (0, 1)
    assert "pc-old" not in [o["client_id"] for o in status()["offline_sessions"]]


def test_status_api_store_compaction(broker: BrokerProcess, clients: list[Any]) -> None:
    """The page's store figures: syncs per second, and the last compaction,
    once the log has grown to 4 MiB and twice its live data (one retained
    topic written over and over)."""
    url = broker.http_url()
    before = json.loads(get(url + "/api/store")[1])
    pub = Paho(broker.port, "compactor")
    clients.append(pub)
    blob = b"x" * (256 << 10)
    for i in range(24):  # 6 MiB of log for 256 KiB of live data
        pub.publish("compact/me", bytes([i]) + blob, 1, retain=True)
    t = time.time()
    store = wait_until(
        lambda: (d := json.loads(get(url + "/api/store")[1]))["last_compaction"] is not None and d,
        10,
        "no compaction seen",
    )
    assert store["compactions"] > before["compactions"]
    assert store["last_compaction"] <= t + 2
    assert store["live_bytes"] < store["size_bytes"]
    assert store["syncs"] > before["syncs"] and store["syncs_per_second"] >= 0
    assert post(url + "/api/clear-retained", {"filter": "compact/#"})[1]["cleared"] == 1


def test_linux_toml_documents_every_http_key() -> None:
    from cpython_host.config import HTTP

    text = (REPO_ROOT / "boards" / "linux.toml").read_text()
    assert "\n# [http]\n" in text
    missing = [key for key, *_ in HTTP if f"\n# {key} = " not in text]
    assert not missing, f"boards/linux.toml does not show and explain [http] {missing}"



def test_ctl_names_the_tls_mistake(tmp_path: Path) -> None:
    """Against an HTTPS listener: no --cafile, or plain http: the line says which, and what to give;
    nothing listening: says so. (Not blamed on a missing [http] table.)"""
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    certfile, keyfile, cafile = tmp_path / "web.crt", tmp_path / "web.key", tmp_path / "ca.crt"
    certfile.write_bytes(cert.cert_chain_pems[0].bytes())
    keyfile.write_bytes(cert.private_key_pem.bytes())
    cafile.write_bytes(ca.cert_pem.bytes())
    http = {"port": 0, "certfile": str(certfile), "keyfile": str(keyfile)}
    with BrokerProcess(tmp_path / "b", limits={"sys_interval": 0}, http=http) as b:
        url = b.http_url()
        untrusted = ctl("--url", url, "clients")
        assert untrusted.returncode == 1 and "[http] table" not in untrusted.stderr
        assert "give --cafile with the CA that signed the broker's certificate" in untrusted.stderr
        plain = ctl("--url", "http:" + url[6:], "clients")
        assert plain.returncode == 1 and f"(the listener speaks HTTPS? try --url {url})" in plain.stderr, plain.stderr
        assert ctl("--url", url, "--cafile", str(cafile), "clients").returncode == 0
    refused = ctl("--url", url, "clients")  # the broker gone
    assert refused.returncode == 1 and "nothing listens there" in refused.stderr, refused.stderr


def test_http_port_in_use_names_the_http_port(tmp_path: Path) -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        with pytest.raises(RuntimeError) as e:
            BrokerProcess(tmp_path, http={"port": port}).start()
        assert f"listens on port {port}" in str(e.value)
        assert "or choose another port ([http] port)" in str(e.value), str(e.value)
    finally:
        holder.close()

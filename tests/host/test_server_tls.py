"""TLS listeners on the host, over real sockets: paho with tls_set, mosquitto_pub/sub
with --cafile/--cert/--key, and raw `ssl` sockets for the attacks (wrong CA,
expired certificates, no client certificate, plaintext to the TLS port, a
stalled handshake), the certificate identity, SIGHUP reload, and start-up
errors for bad files. Every certificate is made here by trustme."""

from __future__ import annotations

import datetime
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme

from tests.conftest import require, tool_path
from tests.host.broker_proc import (
    REPO_ROOT,
    BrokerProcess,
    Paho,
    RawClient,
    connect_packet,
    run_cli,
    toml_value,
    wait_until,
    write_config,
)
from tests.host.conftest import RUNTIMES, runtime_args

pytestmark = pytest.mark.interop

CONNECT_TIMEOUT = 2  # s: a stalled handshake is closed after this
EXPIRED = {
    "not_before": datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC),
    "not_after": datetime.datetime(2021, 1, 1, tzinfo=datetime.UTC),
}


class Pki:
    """Two CAs, the server's certificates and the clients', as PEM files in `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ca = trustme.CA()
        self.other_ca = trustme.CA()  # trusted by no listener
        self.ca_file = self.write("ca.crt", self.ca.cert_pem.bytes())
        self.other_ca_file = self.write("other-ca.crt", self.other_ca.cert_pem.bytes())
        self.server = self.leaf("server", self.ca.issue_cert("localhost", "127.0.0.1"))
        self.server_expired = self.leaf("server-expired", self.ca.issue_cert("localhost", "127.0.0.1", **EXPIRED))
        self.alice = self.leaf("alice", self.ca.issue_cert("alice@example.org", common_name="alice"))
        self.no_email = self.leaf("no-email", self.ca.issue_cert("bob.example.org", common_name="bob"))
        self.expired = self.leaf("expired", self.ca.issue_cert(common_name="old", **EXPIRED))
        self.stranger = self.leaf("stranger", self.other_ca.issue_cert(common_name="alice"))
        self.forger = self.leaf("forger", self.ca.issue_cert(common_name="eve\n2026-12-01 INFO forged line"))

    def write(self, name: str, data: bytes) -> str:
        path = self.root / name
        path.write_bytes(data)
        return str(path)

    def leaf(self, name: str, cert: trustme.LeafCert) -> tuple[str, str]:
        """(certfile, keyfile) of a leaf certificate."""
        return (
            self.write(f"{name}.crt", cert.cert_chain_pems[0].bytes()),
            self.write(f"{name}.key", cert.private_key_pem.bytes()),
        )

    def listener(self, server: tuple[str, str] | None = None, **tls: Any) -> dict[str, Any]:
        """A [[listener]] table for TLS on a free loopback port."""
        certfile, keyfile = server or self.server
        return {"host": "127.0.0.1", "port": 0, "certfile": certfile, "keyfile": keyfile, **tls}

    def client_context(self, cert: tuple[str, str] | None = None, ca: str | None = None) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=ca or self.ca_file)
        if cert is not None:
            ctx.load_cert_chain(*cert)
        return ctx


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


# Listener order in the attack broker (the first is the plain one).
PLAIN, SERVER_AUTH, MUTUAL, MUTUAL_EMAIL, SERVER_EXPIRED, TLS13 = range(6)


@pytest.fixture(scope="module", params=RUNTIMES)
def broker(request: pytest.FixtureRequest, pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One broker, six listeners: plain; TLS; mutual TLS (CN); mutual TLS (email SAN); an expired
    server certificate; TLS 1.3 only. On CPython's two event loops and on PyPy."""
    b = BrokerProcess(
        tmp_path_factory.mktemp(f"tls-{request.param}"),
        limits={"connect_timeout": CONNECT_TIMEOUT, "sys_interval": 0},
        listeners=[
            {"port": 0},
            pki.listener(),
            pki.listener(cafile=pki.ca_file, require_certificate=True, use_identity_as_username=True),
            pki.listener(
                cafile=pki.ca_file, require_certificate=True, use_identity_as_username=True, identity="san_email"
            ),
            pki.listener(pki.server_expired),
            pki.listener(tls_version="tlsv1.3"),
        ],
        **runtime_args(request.param),
    )
    with b:
        wait_until(lambda: len(b.ports()) == 6, 5, b.log_text)
        yield b
        assert "Traceback" not in b.log_text()


def tls_client(port: int, ctx: ssl.SSLContext, timeout: float = 5.0) -> ssl.SSLSocket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        return ctx.wrap_socket(sock, server_hostname="localhost")
    except BaseException:
        sock.close()
        raise


class TlsRawClient(RawClient):
    """A RawClient speaking over an established TLS socket."""

    def __init__(self, tls: ssl.SSLSocket) -> None:
        self.sock = tls
        self.buf = b""


mqtt_over = TlsRawClient


def handshake_refused(port: int, ctx: ssl.SSLContext) -> None:
    """The handshake fails, or the connection ends without an answer to CONNECT: a TLS 1.3
    server's verdict on the client's certificate comes after the client's handshake is done."""
    try:
        with tls_client(port, ctx) as tls:
            tls.sendall(b"\x10\x0c\x00\x04MQTT\x04\x02\x00\x00\x00\x00")
            answer = tls.recv(100)
    except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
        return
    assert answer == b"", "the server answered a client it should have refused"


# ---------------------------------------------------------------------------
# real clients


def test_paho_over_tls_and_plain_at_once(broker: BrokerProcess, pki: Pki) -> None:
    ports = broker.ports()
    log = broker.log_text()
    assert f"listening on 127.0.0.1:{ports[PLAIN]} " in log and "plain MQTT (epoll hub); loopback only" in log
    assert f"also listening on 127.0.0.1:{ports[SERVER_AUTH]}: MQTT over TLS (1.2+)" in log
    assert f"mutual TLS: client certificate required, CA {pki.ca_file}; its CN is the user name" in log
    assert "its email SAN is the user name" in log and "MQTT over TLS (1.3+)" in log
    plain = RawClient(ports[PLAIN])
    assert plain.connect("plain-sub") == b"\x00\x00"
    assert plain.subscribe("tls/#", 0) == 0
    paho = Paho(ports[SERVER_AUTH], "paho-tls")
    paho.client.tls_set(ca_certs=pki.ca_file)
    paho.connect()
    try:
        assert paho.subscribe("plain/#", 1)[0].value == 1
        paho.publish("tls/hello", b"over TLS", qos=1)
        pkt = plain.read_packet()
        assert pkt is not None and pkt[0] & 0xF0 == 0x30 and pkt[1].endswith(b"over TLS")
        plain.send(b"\x30\x0f\x00\x0bplain/helloxx")
        assert paho.get().payload == b"xx"
    finally:
        paho.close()
        plain.close()


def test_mosquitto_clients_with_mutual_tls(broker: BrokerProcess, pki: Pki) -> None:
    mosquitto_pub, mosquitto_sub = tool_path("mosquitto_pub"), tool_path("mosquitto_sub")
    require("mosquitto_pub and mosquitto_sub", mosquitto_pub and mosquitto_sub, "apt-get install mosquitto-clients")
    assert mosquitto_pub is not None and mosquitto_sub is not None
    port = broker.ports()[MUTUAL]
    tls_args = ["-h", "localhost", "-p", str(port), "--cafile", pki.ca_file]
    cert, key = pki.alice
    sub = subprocess.Popen(
        [mosquitto_sub, *tls_args, "--cert", cert, "--key", key, "-t", "m/#", "-C", "1", "-i", "mtls-sub", "-v"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        broker.wait_log(r"mtls-sub connected")
        pub = subprocess.run(
            [mosquitto_pub, *tls_args, "--cert", cert, "--key", key, "-t", "m/x", "-m", "mutual", "-q", "1"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        assert pub.returncode == 0, pub.stderr
        out, err = sub.communicate(timeout=10)
        assert out.strip() == "m/x mutual", err
    finally:
        sub.kill()
        sub.wait()
    # The certificate's CN is the identity the shell hands to the core (conn.peer).
    broker.wait_log(r"opened \(certificate identity 'alice'\)")
    # Without a client certificate: no connection.
    refused = subprocess.run(
        [mosquitto_pub, *tls_args, "-t", "m/x", "-m", "anonymous"], capture_output=True, text=True, timeout=10
    )
    assert refused.returncode != 0
    broker.wait_log(r"failed: the client sent no certificate, and this listener requires one")


# ---------------------------------------------------------------------------
# attacks, with raw ssl sockets


def test_wrong_ca_the_client_refuses(broker: BrokerProcess, pki: Pki) -> None:
    with pytest.raises(ssl.SSLCertVerificationError, match="unable to get local issuer certificate"):
        tls_client(broker.ports()[SERVER_AUTH], pki.client_context(ca=pki.other_ca_file))
    broker.wait_log(r"failed: the client aborted the handshake \(alert TLSV1_ALERT_UNKNOWN_CA\)")


def test_expired_server_certificate_the_client_refuses(broker: BrokerProcess, pki: Pki) -> None:
    with pytest.raises(ssl.SSLCertVerificationError, match="certificate has expired"):
        tls_client(broker.ports()[SERVER_EXPIRED], pki.client_context())
    broker.wait_log(r"alert SSLV3_ALERT_CERTIFICATE_EXPIRED")


def test_client_certificates_the_broker_refuses(broker: BrokerProcess, pki: Pki) -> None:
    port = broker.ports()[MUTUAL]
    handshake_refused(port, pki.client_context(pki.expired))
    broker.wait_log(r"failed: the client certificate was refused: certificate has expired")
    handshake_refused(port, pki.client_context(pki.stranger))  # right CN, wrong CA
    broker.wait_log(r"failed: the client certificate was refused: unable to get local issuer certificate")
    handshake_refused(port, pki.client_context())
    broker.wait_log(r"failed: the client sent no certificate")


def test_identity_from_a_san(broker: BrokerProcess, pki: Pki) -> None:
    port = broker.ports()[MUTUAL_EMAIL]
    with tls_client(port, pki.client_context(pki.alice)) as tls:
        client = mqtt_over(tls)
        assert client.connect("by-email") == b"\x00\x00"
    broker.wait_log(r"opened \(certificate identity 'alice@example.org'\)")
    # A valid certificate without the configured field has no identity: refused.
    with tls_client(port, pki.client_context(pki.no_email)) as tls:
        assert mqtt_over(tls).closed_within(5)
    broker.wait_log(r"TLS client 127.0.0.1:\d+ on 127.0.0.1:\d+ refused: its certificate has no email SAN")


def test_an_identity_with_control_characters_is_refused(broker: BrokerProcess, pki: Pki) -> None:
    with tls_client(broker.ports()[MUTUAL], pki.client_context(pki.forger)) as tls:
        assert mqtt_over(tls).closed_within(5)
    broker.wait_log(r"refused: its certificate has an unusable CN")
    assert "forged line" not in broker.log_text()


def test_plaintext_mqtt_to_the_tls_port(broker: BrokerProcess) -> None:
    port = broker.ports()[SERVER_AUTH]
    for data in (b"\x10\x0c\x00\x04MQTT\x04\x02\x00\x3c\x00\x00", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"):
        plain = RawClient(port)
        started = time.monotonic()
        plain.send(data)
        assert plain.read_packet() is None  # closed, no answer
        assert time.monotonic() - started < 1.5  # at once, not at the connect timeout
        plain.close()
    broker.wait_log(r"failed: the client does not speak TLS \(plain MQTT to the TLS port\?\) \(WRONG_VERSION_NUMBER\)")
    broker.wait_log(r"\(HTTP_REQUEST\)")


def test_a_stalled_handshake_is_closed_at_the_connect_timeout(broker: BrokerProcess, pki: Pki) -> None:
    port = broker.ports()[MUTUAL]
    # A real ClientHello, cut in half.
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = pki.client_context(pki.alice).wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    hello = outgoing.read()
    silent, half = RawClient(port), RawClient(port)
    started = time.monotonic()
    half.send(hello[: len(hello) // 2])
    # After a quick TCP accept, a slow handshake: the CONNECT's time is what is left.
    slow = socket.create_connection(("127.0.0.1", port))
    time.sleep(CONNECT_TIMEOUT - 0.5)
    slow_tls = pki.client_context(pki.alice).wrap_socket(slow, server_hostname="localhost")
    for client in (silent, half):
        assert client.closed_within(CONNECT_TIMEOUT + 2)
        elapsed = time.monotonic() - started
        assert CONNECT_TIMEOUT - 0.2 < elapsed < CONNECT_TIMEOUT + 1.5, elapsed
        client.close()
    assert mqtt_over(slow_tls).closed_within(2)
    assert time.monotonic() - started < CONNECT_TIMEOUT + 0.8  # not the handshake's time + connect_timeout
    slow_tls.close()
    broker.wait_log(rf"failed: not completed within connect_timeout \({CONNECT_TIMEOUT} s\)")
    broker.wait_log(r"closing #\d+: no CONNECT within")


def test_stalled_handshakes_are_capped_at_max_connections(tmp_path: Path, pki: Pki) -> None:
    limits = {"max_connections": 2, "connect_timeout": CONNECT_TIMEOUT, "sys_interval": 0}
    with BrokerProcess(tmp_path, limits=limits, listeners=[{"port": 0}, pki.listener()]) as b:
        wait_until(lambda: len(b.ports()) == 2, 5, b.log_text)
        port = b.ports()[1]
        stalled = [RawClient(port), RawClient(port)]
        extra = RawClient(port)
        assert extra.closed_within(1)  # closed at once, not at the connect timeout
        b.wait_log(r"refused TLS connection from 127\.0\.0\.1:\d+: 2 handshakes in progress \(max_connections\)")
        for client in stalled:
            assert client.closed_within(CONNECT_TIMEOUT + 2)
            client.close()
        extra.close()
        # A slot is free once its handshake task has ended, just after its
        # failure is logged (the client may see the close before that).
        failed = r"TLS handshake from 127\.0\.0\.1:\d+ on \S+ failed"
        wait_until(lambda: len(re.findall(failed, b.log_text())) >= 2, 5, b.log_text)

        def connects() -> bool:
            try:
                with tls_client(port, pki.client_context()) as tls:  # their slots are free again
                    return mqtt_over(tls).connect("after-the-flood") == b"\x00\x00"
            except (OSError, ssl.SSLError):  # refused: a slot not yet released
                return False

        wait_until(connects, 5, b.log_text)
        assert b.stop() == 0


def test_a_silent_tls_client_is_let_go_within_close_linger(broker: BrokerProcess, pki: Pki) -> None:
    # Closed for its keep-alive, the client never answers the broker's
    # close_notify: its connection ends after close_linger (2 s), not after
    # asyncio's 30 s TLS shutdown timeout, and not never on PyPy, whose
    # asyncio (3.9) has no TLS shutdown timeout at all: there the linger's
    # end aborts the transport that waits for the close_notify.
    with tls_client(broker.ports()[SERVER_AUTH], pki.client_context()) as tls:
        silent = mqtt_over(tls)
        silent.send(connect_packet("silent-tls", keep_alive=1))
        assert silent.read_packet() == (0x20, b"\x00\x00")
        cid = broker.wait_log(r"connection #(\d+) from 127\.0\.0\.1:\d+ opened\n.*silent-tls connected").group(1)
        broker.wait_log(r"closing silent-tls: keep-alive expired")
        # 15 s: room for a loaded machine, and still half of asyncio's 30 s.
        broker.wait_log(rf"connection #{cid} from \S+ closed", timeout=15)


def test_tls13_only_refuses_a_tls12_client(broker: BrokerProcess, pki: Pki) -> None:
    old = pki.client_context()
    old.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises(ssl.SSLError):
        tls_client(broker.ports()[TLS13], old)
    broker.wait_log(r"failed: the client offers no TLS version this listener accepts \(tls_version\)")
    with tls_client(broker.ports()[TLS13], pki.client_context()) as tls:
        assert tls.version() == "TLSv1.3"
        assert mqtt_over(tls).connect("tls13") == b"\x00\x00"


def test_failed_handshakes_are_counted_in_sys(tmp_path: Path, pki: Pki) -> None:
    mutual = pki.listener(cafile=pki.ca_file, require_certificate=True, use_identity_as_username=True)
    limits = {"connect_timeout": CONNECT_TIMEOUT, "sys_interval": 1}
    with BrokerProcess(tmp_path, limits=limits, listeners=[{"port": 0}, pki.listener(), mutual]) as b:
        wait_until(lambda: len(b.ports()) == 3, 5, b.log_text)
        plain, server_auth, mutual_port = b.ports()
        sub = Paho(plain, "sys-tls").connect()
        try:
            sub.subscribe("$SYS/broker/clients/tls_failed", 0)
            assert sub.get().payload == b"0"
            with tls_client(server_auth, pki.client_context()) as tls:  # a good one is not counted
                assert mqtt_over(tls).connect("good") == b"\x00\x00"
            raw = RawClient(server_auth)  # plain MQTT to the TLS port
            raw.send(connect_packet("plain"))
            assert raw.read_packet() is None
            raw.close()
            with pytest.raises(ssl.SSLCertVerificationError):  # the client does not trust the broker
                tls_client(server_auth, pki.client_context(ca=pki.other_ca_file))
            handshake_refused(mutual_port, pki.client_context())  # no client certificate
            b.wait_log(r"failed: the client sent no certificate")
            with tls_client(mutual_port, pki.client_context(pki.forger)) as tls:  # an unusable identity
                assert mqtt_over(tls).closed_within(5)
            b.wait_log(r"refused: its certificate has an unusable CN")
            deadline = time.monotonic() + 5
            while (got := sub.get().payload) != b"4":
                assert got in (b"0", b"1", b"2", b"3") and time.monotonic() < deadline, got
        finally:
            sub.close()
        assert b.stop() == 0


# ---------------------------------------------------------------------------
# SIGHUP


def test_sighup_reloads_the_certificate_and_keeps_clients(tmp_path: Path, pki: Pki) -> None:
    cert, key = str(tmp_path / "live.crt"), str(tmp_path / "live.key")
    shutil.copy(pki.server[0], cert)
    shutil.copy(pki.server[1], key)
    with BrokerProcess(tmp_path, listeners=[{"port": 0}, pki.listener((cert, key))]) as b:
        wait_until(lambda: len(b.ports()) == 2, 5, b.log_text)
        port = b.ports()[1]
        # Trusts both CAs: its connection must survive the reload.
        both = pki.client_context()
        both.load_verify_locations(pki.other_ca_file)
        old = mqtt_over(tls_client(port, both))
        assert old.connect("before-reload") == b"\x00\x00"
        assert old.subscribe("r/#", 0) == 0
        # A certificate from the other CA, and a broken file first: the old one stays.
        renewed = pki.other_ca.issue_cert("localhost", "127.0.0.1")
        Path(key).write_text("not a key")
        os.kill(b.pid, signal.SIGHUP)
        b.wait_log(r"keyfile .*live.key: no PEM private key in it.*keeps its previous certificate")
        with tls_client(port, pki.client_context()) as tls:  # still the first CA's certificate
            assert mqtt_over(tls).connect("between") == b"\x00\x00"
        renewed.cert_chain_pems[0].write_to_path(cert)
        renewed.private_key_pem.write_to_path(key)
        os.kill(b.pid, signal.SIGHUP)
        b.wait_log(r"certificate reloaded from .*live.crt")
        # The summary line: what the reload did (the first one reloaded no certificate).
        b.wait_log(r"SIGHUP: reloaded certificates of 1 TLS listener\(s\); users, ACL and anonymous access")
        assert len(re.findall(r"SIGHUP: reloaded users, ACL", b.log_text())) == 1
        with pytest.raises(ssl.SSLCertVerificationError):
            tls_client(port, pki.client_context())
        with tls_client(port, pki.client_context(ca=pki.other_ca_file)) as tls:
            new = mqtt_over(tls)
            assert new.connect("after-reload") == b"\x00\x00"
            new.send(b"\x30\x07\x00\x03r/xok")
            pkt = old.read_packet()  # the client from before the reload is still served
            assert pkt is not None and pkt[1] == b"\x00\x03r/xok"
        old.close()
        assert b.stop() == 0
        assert "Traceback" not in b.log_text()


# ---------------------------------------------------------------------------
# configuration mistakes stop the start with one line


def _start_error(tmp_path: Path, listener: dict[str, Any], server: str = "") -> str:
    cfg = write_config(tmp_path / "site.toml", listeners=[listener])
    if server:
        cfg.write_text(cfg.read_text().replace("[server]\n", f"[server]\n{server}\n"))
    proc = run_cli("--config", str(cfg))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr  # one line, no traceback
    assert lines[0].startswith(f"siskin: config error: {cfg}: [[listener]] #1: "), lines[0]
    return lines[0]


def test_start_up_errors_for_bad_files(tmp_path: Path, pki: Pki) -> None:
    cert, key = pki.server
    other_key = pki.alice[1]
    missing = str(tmp_path / "missing.pem")
    junk = pki.write("junk.pem", b"hello\n")
    enc_key = pki.write("encrypted.key", _encrypted(key))
    cases: list[tuple[dict[str, Any], list[str]]] = [
        ({"certfile": missing, "keyfile": key}, [f"certfile {missing}: no such file"]),
        # a relative name is taken from the config file's directory
        ({"certfile": "missing.pem", "keyfile": key}, [f"certfile {missing}: no such file"]),
        ({"certfile": cert, "keyfile": missing}, [f"keyfile {missing}: no such file"]),
        ({"certfile": str(tmp_path), "keyfile": key}, ["a directory, not a PEM file"]),
        ({"certfile": junk, "keyfile": key}, [f"certfile {junk}: no PEM certificate"]),
        ({"certfile": cert, "keyfile": junk}, [f"keyfile {junk}: no PEM private key"]),
        ({"certfile": cert, "keyfile": other_key}, [f"keyfile {other_key} is not the private key of certfile {cert}"]),
        ({"certfile": cert, "keyfile": enc_key}, ["the key is encrypted", "openssl pkey"]),
        ({"certfile": cert, "keyfile": key, "cafile": junk}, [f"cafile {junk}: no PEM certificate"]),
        ({"certfile": cert, "keyfile": key, "cafile": missing, "require_certificate": True}, ["cafile", "no such"]),
    ]
    for table, words in cases:
        line = _start_error(tmp_path, {"port": 0, **table})
        for word in words:
            assert word in line, line


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_start_up_error_for_an_unreadable_key(tmp_path: Path, pki: Pki) -> None:
    key = tmp_path / "secret.key"
    shutil.copy(pki.server[1], key)
    key.chmod(0)
    line = _start_error(tmp_path, {"port": 0, "certfile": pki.server[0], "keyfile": str(key)})
    assert "cannot read it (Permission denied)" in line


def test_listener_table_mistakes(tmp_path: Path, pki: Pki) -> None:
    cert, key = pki.server
    cases: list[tuple[dict[str, Any], str, list[str]]] = [
        ({"host": "0.0.0.0"}, "", ["port is missing"]),
        ({"port": 1, "certfile": cert}, "", ["certfile is set but keyfile is not"]),
        ({"port": 1, "keyfile": key}, "", ["keyfile is set but certfile is not"]),
        ({"port": 1, "certfile": cert, "keyfile": key, "require_certificate": True}, "", ["needs cafile"]),
        (
            {"port": 1, "certfile": cert, "keyfile": key, "use_identity_as_username": True},
            "",
            ["needs require_certificate = true"],
        ),
        ({"port": 1, "certfile": cert, "keyfile": key, "tls_version": "tlsv1.1"}, "", ["tlsv1.2, tlsv1.3"]),
        ({"port": 1, "certfile": cert, "keyfile": key, "identity": "serial"}, "", ["cn, san_dns"]),
        ({"port": 1, "cerfile": cert}, "", ["did you mean 'certfile'"]),
    ]
    for table, server, words in cases:
        line = _start_error(tmp_path, table, server)
        for word in words:
            assert word in line, line
    cfg = tmp_path / "both.toml"
    cfg.write_text("[server]\nport = 1883\n[[listener]]\nport = 1884\n")
    proc = run_cli("--config", str(cfg))
    assert proc.returncode == 2 and "move port into a [[listener]] table" in proc.stderr, proc.stderr


def test_the_commented_tls_listener_of_linux_toml_works(tmp_path: Path, pki: Pki) -> None:
    """boards/linux.toml's TLS example, uncommented with this test's files, serves mutual TLS."""
    text = (REPO_ROOT / "boards" / "linux.toml").read_text()
    start = text.index('# [[listener]]\n# host = "0.0.0.0"\n# port = 8883\n')  # (the TLS example, by its port)
    block = text[start : text.index("\n\n", start)]
    example = "\n".join(line[2:] for line in block.splitlines() if not line.startswith("# #"))
    from tests.host.test_listener_security import revocation_list

    crl = tmp_path / "revoked.crl"  # (revokes another client's certificate)
    crl.write_bytes(revocation_list(pki, pki.expired[0]))
    ours = {"certfile": pki.server[0], "keyfile": pki.server[1], "cafile": pki.ca_file, "host": "127.0.0.1", "port": 0}
    ours["crlfile"] = str(crl)
    lines = example.splitlines()
    for i, line in enumerate(lines):
        key = line.split(" =")[0]
        if key in ours:
            lines[i] = f"{key} = {toml_value(ours[key])}"
    example = "\n".join(lines)
    b = BrokerProcess(tmp_path)
    b.config_path.write_text(text[:start] + example + "\n" + text[start + len(block) :])
    with b:
        wait_until(lambda: len(b.ports()) == 2, 5, b.log_text)
        b.wait_log(r"also listening on 127.0.0.1:\d+: MQTT over TLS \(1.2\+, mutual TLS")
        with tls_client(b.ports()[1], pki.client_context(pki.alice)) as tls:
            assert mqtt_over(tls).connect("example") == b"\x00\x00"
        b.wait_log(r"opened \(certificate identity 'alice'\)")
        assert b.stop() == 0


def test_a_listener_on_every_address_says_so(tmp_path: Path, pki: Pki) -> None:
    with BrokerProcess(tmp_path, listeners=[{"port": 0}, {**pki.listener(), "host": "0.0.0.0"}]) as b:
        b.wait_log(r"also listening on 0\.0\.0\.0:\d+: MQTT over TLS \(1\.2\+\); reachable from the network")
        assert b.stop() == 0


def test_a_tls_port_in_use(tmp_path: Path, pki: Pki, broker: BrokerProcess) -> None:
    taken = broker.ports()[SERVER_AUTH]
    cfg = write_config(
        tmp_path / "site.toml", listeners=[{"port": 0}, pki.listener(), {**pki.listener(), "port": taken}]
    )
    proc = run_cli("--config", str(cfg))
    assert proc.returncode == 1, proc.stderr
    assert f"cannot listen on 127.0.0.1:{taken}: Address already in use" in proc.stderr


def test_help_teaches_listeners() -> None:
    out = run_cli("--help").stdout
    for word in ("[[listener]]", "certfile", "require_certificate", "use_identity_as_username", "SIGHUP", "tlsv1.3"):
        assert word in out


def _encrypted(key_path: str) -> bytes:
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(Path(key_path).read_bytes(), None)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"secret"),
    )

"""TLS on the firmware (firmware/main.py under the MicroPython unix port, whose
`ssl` is mbedTLS as on the ESP32 and the Pico W), over real sockets: paho
with tls_set publishes and receives; plaintext to the TLS port, a client
that does not trust the board and a stalled handshake are closed, logged and
counted ($SYS clients/tls_failed); mutual TLS refuses a client without a
certificate; bad files and a heap without a block for one TLS client
(left in pieces on purpose: tests/upy/tls_no_room.py) stop the
start-up. The certificates are made here by trustme and installed as
tools/deploy does (PEM converted to DER by tools.deploy.der_files)."""

from __future__ import annotations

import re
import ssl
import time
from pathlib import Path
from typing import Any

import pytest
import trustme

from tests.conftest import REPO_ROOT
from tests.host.broker_proc import Paho, RawClient, connect_packet
from tests.host.test_server_tls import TlsRawClient, tls_client
from tests.host.upy_broker_proc import UpyBrokerProcess, micropython
from tools.deploy import der_files

pytestmark = pytest.mark.interop

CONNECT_TIMEOUT = 2  # s
# The unix port's mbedTLS allocates with malloc, but the firmware checks at start that the
# MicroPython heap has room for each connection's mbedTLS blocks, as on a Pico W (whose mbedTLS
# allocates there). Start-up (the code compiled from source, its garbage included: no collection
# runs before the check while the heap has room) allocates about 490 KB of the heap, 550 KB with a
# TLS bridge (measured 2026-12-02 with gc.mem_alloc() before the check); what lies above is one
# untouched free block. At 1M that block is about 480-530 KB, three to five times the 4 x 25 KB
# (with a bridge, 5 x 28 KB) the check looks for, so it finds room for every slot whatever the
# paths and the environment shift. (Heaps just big enough, found by trying sizes, had to be raised
# each time the code grew.) The refusal is provoked on purpose (NO_ROOM_MAIN), not by a heap size
# that happens to leave no block free.
TLS_HEAP = "1M"
# The firmware with its heap left in pieces before the TLS room check (tests/upy/tls_no_room.py).
NO_ROOM_MAIN = REPO_ROOT / "tests" / "upy" / "tls_no_room.py"


def sys_topics() -> int:
    """How many $SYS topics a board publishes (heap/current included): with
    sys_interval on, each holds a message slab of max_messages (docs/boards.md)."""
    from common.broker.sys_topics import publish_sys
    from tests.core.harness import Harness

    h = Harness()
    publish_sys(h.broker, h.now, 1)
    return int(h.broker.routing.messages.in_use())


# The TLS tests keep the Pico W's earlier shape (3 clients in 4 slots, 48
# subscriptions, 96 messages for the clients, and one more a $SYS topic when
# sys_interval is on): a TLS connection takes ~25-28 KB, and the board file's
# 4 clients + 1 refusal slot are sized for plain MQTT (docs/boards.md).
TLS_LIMITS = {"max_connections": 3, "max_subscriptions": 48, "max_messages": 96}
TLS_SYS_LIMITS = {**TLS_LIMITS, "max_messages": 96 + sys_topics()}
TLS_SERVER = {"max_sockets": 5}


class BoardPki:
    """A CA, the board's certificate and a client's: PEM for the clients, DER for the board."""

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.ca = trustme.CA()
        self.other_ca = trustme.CA()
        self.ca_pem = root / "ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_pem))
        self.other_ca_pem = root / "other-ca.pem"
        self.other_ca.cert_pem.write_to_path(str(self.other_ca_pem))
        server = self.ca.issue_cert("localhost", "127.0.0.1")
        server.cert_chain_pems[0].write_to_path(str(root / "board.crt.pem"))
        server.private_key_pem.write_to_path(str(root / "board.key.pem"))
        self.client = self.ca.issue_cert(common_name="sensor-1")
        self.client_pem = (root / "client.crt.pem", root / "client.key.pem")
        self.client.cert_chain_pems[0].write_to_path(str(self.client_pem[0]))
        self.client.private_key_pem.write_to_path(str(self.client_pem[1]))
        sources = {"certfile": root / "board.crt.pem", "keyfile": root / "board.key.pem", "cafile": self.ca_pem}
        self.der = {key: str(path) for key, path in der_files(sources, root).items()}

    def device(self, mutual: bool = False) -> dict[str, Any]:
        cfg: dict[str, Any] = {"certfile": self.der["certfile"], "keyfile": self.der["keyfile"]}
        if mutual:
            cfg.update(cafile=self.der["cafile"], require_certificate=True)
        return cfg

    def context(self, ca: Path | None = None, cert: bool = False) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(ca or self.ca_pem))
        if cert:
            ctx.load_cert_chain(*self.client_pem)
        return ctx


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> BoardPki:
    return BoardPki(tmp_path_factory.mktemp("board-pki"))


def test_paho_over_tls_and_the_refusals(tmp_path: Path, pki: BoardPki) -> None:
    micropython()
    limits = {"connect_timeout": CONNECT_TIMEOUT, "sys_interval": 1, **TLS_SYS_LIMITS}
    with UpyBrokerProcess(tmp_path, heap=TLS_HEAP, limits=limits, server=TLS_SERVER, device=pki.device()) as b:
        b.wait_log(r"listening on 127\.0\.0\.1:\d+ \(MQTT 3\.1\.1 \+ 5\.0 over TLS;")
        b.wait_log(r"TLS: about 25 KB per client of the MicroPython heap: room for all 4 TLS connection\(s\)")
        sub = Paho(b.port, "tls-sub")
        sub.client.tls_set(ca_certs=str(pki.ca_pem))
        sub.connect()
        pub = Paho(b.port, "tls-pub", protocol=5)
        pub.client.tls_set(ca_certs=str(pki.ca_pem))
        pub.connect()
        try:
            assert [r.value for r in sub.subscribe("tls/#", 1)] == [1]
            pub.publish("tls/a", b"over mbedTLS" * 100, qos=1)  # 1.2 KB: more than one read of the slot
            msg = sub.get()
            assert (msg.topic, msg.payload, msg.qos) == ("tls/a", b"over mbedTLS" * 100, 1)
            sub.publish("tls/b", b"back", qos=2)
            assert sub.get().payload == b"back"

            # Plaintext MQTT to the TLS port: closed at once, no answer.
            plain = RawClient(b.port)
            plain.send(connect_packet("plain"))
            assert plain.closed_within(1.5)  # at once, not at the connect timeout
            plain.close()
            b.wait_log(r"TLS handshake from 127\.0\.0\.1:\d+ failed: the client does not speak TLS")

            # A client that does not trust the board's certificate.
            with pytest.raises(ssl.SSLCertVerificationError):
                tls_client(b.port, pki.context(ca=pki.other_ca_pem))
            b.wait_log(r"TLS handshake from 127\.0\.0\.1:\d+ failed: the client ended the handshake")

            # A stalled handshake: half a ClientHello, then silence.
            incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
            hello_tls = pki.context().wrap_bio(incoming, outgoing, server_hostname="localhost")
            with pytest.raises(ssl.SSLWantReadError):
                hello_tls.do_handshake()
            hello = outgoing.read()
            stalled = RawClient(b.port)
            started = time.monotonic()
            stalled.send(hello[: len(hello) // 2])
            assert stalled.closed_within(CONNECT_TIMEOUT + 2)
            assert CONNECT_TIMEOUT - 0.2 < time.monotonic() - started < CONNECT_TIMEOUT + 1.5
            stalled.close()
            b.wait_log(rf"failed: not completed within connect_timeout \({CONNECT_TIMEOUT} s\)")

            # Each refusal is counted, and the clients carry on.
            sub.subscribe("$SYS/broker/clients/tls_failed", 0)
            deadline = time.monotonic() + 5
            while (got := sub.get().payload) != b"3":
                assert got in (b"0", b"1", b"2") and time.monotonic() < deadline, got
            pub.publish("tls/c", b"still here", qos=1)
            assert sub.get().payload == b"still here"
        finally:
            sub.close()
            pub.close()
        assert b.stop() == 0
        assert "Traceback" not in b.log_text()


def test_mutual_tls(tmp_path: Path, pki: BoardPki) -> None:
    micropython()
    limits = {"connect_timeout": CONNECT_TIMEOUT, **TLS_LIMITS}
    with UpyBrokerProcess(
        tmp_path, heap=TLS_HEAP, limits=limits, server=TLS_SERVER, device=pki.device(mutual=True)
    ) as b:
        with tls_client(b.port, pki.context(cert=True)) as tls:
            assert tls.version() == "TLSv1.2" and tls.cipher()[0] == "ECDHE-ECDSA-AES256-GCM-SHA384", tls.cipher()
            assert TlsRawClient(tls).connect("with-cert") == b"\x00\x00"
        # No client certificate: the board ends the handshake.
        try:
            with tls_client(b.port, pki.context()) as tls:
                tls.sendall(connect_packet("no-cert"))
                assert tls.recv(100) == b""
        except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
            pass
        b.wait_log(r"TLS handshake from 127\.0\.0\.1:\d+ failed: the client certificate was refused")
        assert b.alive()


def start_error(tmp_path: Path, device: dict[str, Any], heap: str = TLS_HEAP, main: Path | None = None) -> str:
    b = UpyBrokerProcess(tmp_path, heap=heap, limits=TLS_LIMITS, server=TLS_SERVER, device=device, main=main)
    try:
        b.start()
    except RuntimeError as e:
        return str(e)
    b.kill()
    raise AssertionError(f"started with {device}")


def free_kb(line: str) -> int:
    """The "which has N KB free after start-up" of a TLS room refusal."""
    m = re.search(r"which has (\d+) KB free after start-up", line)
    assert m is not None, line
    return int(m.group(1))


def test_start_up_refusals(tmp_path: Path, pki: BoardPki) -> None:
    micropython()
    cases: list[tuple[dict[str, Any], str]] = [
        ({"certfile": pki.der["certfile"]}, "certfile is set but keyfile is not"),
        ({"keyfile": pki.der["keyfile"]}, "keyfile is set but certfile is not"),
        ({**pki.device(), "cafile": pki.der["cafile"]}, "cafile and require_certificate go together"),
        ({**pki.device(), "keyfile": str(tmp_path / "missing.der")}, "missing.der: cannot read"),
        ({**pki.device(), "certfile": pki.der["keyfile"]}, "mbedTLS refused them (invalid cert)"),
    ]
    for i, (device, words) in enumerate(cases):
        line = start_error(tmp_path / str(i), device)
        assert words in line, line
    # A board whose free heap is in pieces after start-up (as a Pico W running the code from files):
    # more than a client's 25 KB free, but no block for mbedTLS's 16 KB input buffer. The check
    # counts blocks, not bytes: it refuses, and says how much was free.
    line = start_error(tmp_path / "small", pki.device(), main=NO_ROOM_MAIN)
    assert "a TLS client needs about 25 KB (mbedTLS buffers and handshake; one block of 16 KB) of the" in line, line
    assert "MicroPython heap, which has " in line and "not even one fits" in line, line
    assert free_kb(line) > 25, line

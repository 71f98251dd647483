"""A board's bridge over TLS (firmware/bridge.py): the firmware under the
MicroPython unix port (mbedTLS 3.6, as on the boards) bridged to a real
Mosquitto with TLS listeners. The certificates are made here by trustme:
Mosquitto reads PEM, the board DER (converted by tools.deploy.der_files, as
tools/deploy installs them). Messages go both ways over TLS, with and
without a client certificate (Mosquitto's require_certificate); a wrong CA
and a missing client certificate are logged once per attempt with the
reason, retried with back-off (attempts counted), and say so in $SYS
last_error; bad TLS settings and a heap without room stop the start-up."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require
from tests.host.bridge_edge import RULES, drain, paho, retried_with_back_off
from tests.host.broker_proc import Paho, wait_until
from tests.host.test_firmware_tls import NO_ROOM_MAIN, TLS_HEAP, TLS_LIMITS, TLS_SERVER, BoardPki, free_kb, start_error
from tests.host.upy_broker_proc import UpyBrokerProcess, micropython
from tools.bench.brokers import Mosquitto, free_port
from tools.deploy import der_files

pytestmark = pytest.mark.interop


class UpstreamPki(BoardPki):
    """BoardPki's CA and certificates, plus in DER what a bridge reads: its
    client certificate and key, and another CA (the wrong one)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.root = root
        sources = {"certfile": self.client_pem[0], "keyfile": self.client_pem[1]}
        (root / "bridge").mkdir()
        self.der.update({"bridge_" + k: str(v) for k, v in der_files(sources, root / "bridge").items()})
        (root / "other").mkdir()
        self.der["other_ca"] = str(der_files({"cafile": self.other_ca_pem}, root / "other")["cafile"])


class TlsMosquitto(Mosquitto):
    """Mosquitto with its plain listener (`port`: the test's clients) and two
    TLS ones with the board certificate of `pki` (localhost, 127.0.0.1):
    `tls_port`, and `mutual_port` with require_certificate (`pki`'s CA)."""

    def __init__(self, workdir: Path, pki: UpstreamPki) -> None:
        super().__init__(workdir)
        self.pki = pki
        self.tls_port = free_port()
        self.mutual_port = free_port()

    def command(self) -> list[str]:
        cmd = super().command()
        conf = self.workdir / "mosquitto.conf"
        root = self.pki.root
        files = [f"cafile {self.pki.ca_pem}", f"certfile {root / 'board.crt.pem'}", f"keyfile {root / 'board.key.pem'}"]
        extra = [
            f"listener {self.tls_port} 127.0.0.1",
            *files,
            "allow_anonymous true",
            f"listener {self.mutual_port} 127.0.0.1",
            *files,
            "require_certificate true",
            "allow_anonymous true",
            "log_type notice",  # a line per connection: attempts counted from both ends
            # As root, Mosquitto reads the files as user mosquitto, which
            # cannot enter pytest's private tmp: stay who we are.
            *(["user root"] if os.geteuid() == 0 else []),
        ]
        # per_listener_settings before the listeners: each has its own.
        conf.write_text("per_listener_settings true\n" + conf.read_text() + "\n".join(extra) + "\n")
        return cmd


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> UpstreamPki:
    return UpstreamPki(tmp_path_factory.mktemp("upstream-pki"))


@pytest.fixture
def mosquitto(tmp_path: Path, pki: UpstreamPki) -> Iterator[TlsMosquitto]:
    require("mosquitto", Mosquitto.available(), "apt-get install mosquitto")
    micropython()
    m = TlsMosquitto(tmp_path, pki)
    m.start()
    yield m
    m.stop()


def board_bridge(port: int, **keys: Any) -> dict[str, Any]:
    return {
        "name": "cloud",
        "addresses": [f"127.0.0.1:{port}"],
        "client_id": "edge-upy",
        "keepalive": 2,
        "connect_timeout": 2.0,
        "backoff_min": 0.2,
        "backoff_max": 1.0,
        "topic": RULES,
        **keys,
    }


@pytest.mark.parametrize("mutual", [False, True], ids=["server-certificate", "mutual-tls-and-a-tls-listener"])
def test_both_ways_over_tls(
    tmp_path: Path, mosquitto: TlsMosquitto, pki: UpstreamPki, clients: list[Paho], mutual: bool
) -> None:
    keys: dict[str, Any] = {"cafile": pki.der["cafile"]}
    device: dict[str, Any] = {}
    if mutual:
        # The bridge's client certificate; and the board serves its own clients over TLS too.
        keys.update(certfile=pki.der["bridge_certfile"], keyfile=pki.der["bridge_keyfile"])
        device = pki.device()
    port = mosquitto.mutual_port if mutual else mosquitto.tls_port
    cloud_sub = paho(mosquitto.port, clients, "consumer")
    cloud_sub.subscribe("edge1/#", 2)
    device["bridge"] = [board_bridge(port, **keys)]

    def local(client_id: str) -> Paho:
        c = Paho(board.port, client_id)
        clients.append(c)
        if mutual:
            c.client.tls_set(ca_certs=str(pki.ca_pem))
        return c.connect(15)

    with UpyBrokerProcess(
        tmp_path / "board", heap=TLS_HEAP, limits=TLS_LIMITS, server=TLS_SERVER, device=device
    ) as board:
        board.wait_log(r"TLS: 1 bridge upstream\(s\), about 28 KB each of the MicroPython heap")
        if mutual:
            board.wait_log(r"TLS: about 28 KB per client of the MicroPython heap: room for all 4 TLS connection\(s\)")
        board.wait_log(rf"bridge cloud: to 127\.0\.0\.1:{port} \(mqtt, MQTT 3\.1\.1, TLS\)")
        board.wait_log(rf"bridge cloud: connected to 127\.0\.0\.1:{port}", 15)
        dev_sub = local("dev-sub")
        dev_sub.subscribe("down/#", 2)
        dev = local("dev")
        for qos in (0, 1, 2):
            dev.publish(f"up/tls/{qos}", b"t%d" % qos * 700, qos)  # 2 KB: more than one read
            m = cloud_sub.get()
            assert (m.topic, m.payload, m.qos) == (f"edge1/tls/{qos}", b"t%d" % qos * 700, qos)
        cmd = paho(mosquitto.port, clients, "cmd")
        for qos in (1, 2):
            cmd.publish(f"cmd/edge1/tls/{qos}", b"d%d" % qos, qos)
            m = dev_sub.get()
            assert (m.topic, m.payload, m.qos) == (f"down/tls/{qos}", b"d%d" % qos, qos)
        n = 50
        for i in range(n):
            dev.publish("up/n", b"%d" % i, 1)
        assert drain(cloud_sub, n) == [b"%d" % i for i in range(n)]
        assert board.stop() == 0
        assert "Traceback" not in board.log_text(), board.log_text()


@pytest.mark.parametrize("case", ["wrong CA", "no client certificate"])
def test_a_refused_tls_upstream_backs_off(
    tmp_path: Path, mosquitto: TlsMosquitto, pki: UpstreamPki, clients: list[Paho], case: str
) -> None:
    if case == "wrong CA":  # Mosquitto's certificate does not chain to the board's cafile
        port = mosquitto.tls_port
        keys = {"cafile": pki.der["other_ca"]}
        # (mbedTLS's own words when the failure met a write: "The certificate is not correctly signed ...")
        why = "TLS: the upstream's certificate failed verification"
    else:  # require_certificate, and the board has none: Mosquitto ends the handshake
        port = mosquitto.mutual_port
        keys = {"cafile": pki.der["cafile"]}
        why = "TLS: the upstream ended the handshake"
    attempt = re.compile(rf"bridge cloud: cannot connect to 127\.0\.0\.1:{port}: (.*)")
    arrived = re.compile(rf"New connection from \S+ on port {port}\.")  # Mosquitto's line per connection
    device = {"bridge": [board_bridge(port, **keys)], "limits": {"sys_interval": 0, **TLS_LIMITS}}
    with UpyBrokerProcess(tmp_path / "board", heap=TLS_HEAP, server=TLS_SERVER, device=device) as board:
        board.wait_log(attempt.pattern, 15)
        watch = paho(board.port, clients, "watch")
        watch.subscribe("$SYS/broker/bridge/cloud/#", 0)
        values: dict[str, str] = {}
        while not (values.get("state") == "disconnected" and why in values.get("last_error", "")):
            m = watch.get(10)
            values[m.topic.rsplit("/", 1)[1]] = m.payload.decode()
        assert values["address"] == "-"
        retried_with_back_off(lambda: len(attempt.findall(board.log_text())))
        lines = attempt.findall(board.log_text())
        assert all(line.startswith(why) for line in lines), board.log_text()
        assert "bridge cloud: connected" not in board.log_text()
        # One attempt per line: Mosquitto saw as many connections (give or
        # take the one under way), and the board's sockets are closed.
        n = len(attempt.findall(board.log_text()))

        def connections() -> int | None:
            c = len(arrived.findall(mosquitto.log_path.read_text(errors="replace")))
            return c if c >= n else None

        seen = wait_until(connections, 30, board.log_text)
        assert seen <= n + 1, (n, seen, board.log_text())
        assert board.proc is not None
        fds = len(os.listdir(f"/proc/{board.proc.pid}/fd"))
        wait_until(lambda: len(attempt.findall(board.log_text())) >= n + 2, 60, "no more attempts")
        # Two attempts more; one may be under way at either count.
        assert len(os.listdir(f"/proc/{board.proc.pid}/fd")) <= fds + 1  # no socket left open per attempt
        assert board.alive()
        assert board.stop() == 0
        assert "Traceback" not in board.log_text(), board.log_text()


def test_start_up_refusals(tmp_path: Path, pki: UpstreamPki) -> None:
    micropython()
    port = free_port()
    cases: list[tuple[dict[str, Any], str]] = [
        ({"tls": True}, "bridge cloud: TLS to the upstream needs cafile on a board (it has no system CA store)"),
        ({"cafile": str(tmp_path / "missing.der")}, "missing.der: cannot read"),
        ({"cafile": pki.der["bridge_keyfile"]}, "mbedTLS refused it (invalid cert)"),
        (
            {"cafile": pki.der["cafile"], "certfile": pki.der["bridge_keyfile"], "keyfile": pki.der["bridge_keyfile"]},
            "mbedTLS refused them (invalid",
        ),
    ]
    for i, (keys, words) in enumerate(cases):
        line = start_error(tmp_path / str(i), {"bridge": [board_bridge(port, **keys)]})
        assert words in line, line
    # A board whose free heap is in pieces after start-up (tests/upy/tls_no_room.py): more than an
    # upstream's 28 KB free, but no block for its 16 KB input buffer. Refused, saying so.
    device = {"bridge": [board_bridge(port, cafile=pki.der["cafile"])]}
    line = start_error(tmp_path / "small", device, main=NO_ROOM_MAIN)
    assert (
        "bridge: a TLS upstream session needs about 28 KB (mbedTLS buffers and handshake; one block of 16 KB)" in line
    )
    assert "MicroPython heap, which has " in line and "room for 0 of the 1 TLS bridge(s)" in line, line
    assert free_kb(line) > 28, line

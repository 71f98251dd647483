"""The bridge's cloud profiles (docs/bridge.md, "Profiles") against local
stand-ins: AWS IoT Core as a TLS endpoint that takes only clients offering
the ALPN protocol x-amzn-mqtt-ca with a client certificate, in front of
Mosquitto; Azure IoT Hub as a Mosquitto whose ACL knows only the device's
IoT Hub user name and topics; a hosted service as a Mosquitto with TLS and
a password. (The SAS token itself is checked against Microsoft's algorithm
in tests/core/test_bridge_rules.py.)
"""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require, tool_path
from tests.host.bridge_edge import edge, paho
from tests.host.broker_proc import Paho, wait_until
from tests.host.test_bridge_mosquitto import mosquitto
from tests.host.test_server_tls import Pki, pki
from tools.bench.brokers import Mosquitto, free_port

pytestmark = pytest.mark.interop
__all__ = ["mosquitto", "pki"]  # the fixtures

AWS_ALPN = "x-amzn-mqtt-ca"
DEVICE_KEY = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="


class AlpnGate:
    """A TLS endpoint on loopback like AWS IoT's port 443: a client
    certificate from `pki`'s CA and the ALPN protocol x-amzn-mqtt-ca, or the
    connection is closed after the handshake; then bytes go to `target`."""

    def __init__(self, pki: Pki, target: int) -> None:
        self.target = target
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(*pki.server)
        ctx.load_verify_locations(pki.ca_file)
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.set_alpn_protocols([AWS_ALPN])
        self.context = ctx
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.refused: list[str] = []  # why each refused client was refused
        self.served = 0
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        try:
            tls = self.context.wrap_socket(sock, server_side=True)
        except (ssl.SSLError, OSError) as e:
            self.refused.append(f"handshake: {e}")
            sock.close()
            return
        if tls.selected_alpn_protocol() != AWS_ALPN:
            self.refused.append(f"ALPN {tls.selected_alpn_protocol()!r}")
            tls.close()
            return
        self.served += 1
        up = socket.create_connection(("127.0.0.1", self.target))
        threading.Thread(target=_pipe, args=(up, tls), daemon=True).start()
        _pipe(tls, up)

    def close(self) -> None:
        self.listener.close()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.close()


@pytest.fixture
def aws(pki: Pki, mosquitto: Mosquitto) -> Iterator[AlpnGate]:
    gate = AlpnGate(pki, mosquitto.port)
    yield gate
    gate.close()


def test_aws_iot_alpn_certificate_and_its_limits(
    tmp_path: Path, aws: AlpnGate, mosquitto: Mosquitto, pki: Pki, clients: list[Paho]
) -> None:
    cloud_sub = paho(mosquitto.port, clients, "consumer")
    cloud_sub.subscribe("dt/#", 1)
    certfile, keyfile = pki.alice
    rules = [{"direction": "out", "local": "sensors/+/temp", "remote": "dt/site1/{1}/temp", "qos": 2},
             {"direction": "out", "local": "deep/#", "remote": "dt/{1}"}]  # fmt: skip
    over = {"profile": "aws", "cafile": pki.ca_file, "certfile": certfile, "keyfile": keyfile,
            "alpn": [AWS_ALPN], "protocol": 5, "topic": rules}  # fmt: skip
    with edge(tmp_path, [aws.port], **over) as siskin:
        assert aws.served >= 1 and not aws.refused, aws.refused
        dev = paho(siskin.port, clients, "dev")
        dev.publish("deep/a/b/c/d/e/f/g/h", b"too deep", 1)  # dt/a/b/c/d/e/f/g/h: 8 "/": AWS would refuse it
        dev.publish("sensors/k1/temp", b"21", 2)
        m = cloud_sub.get(10)
        assert (m.topic, m.payload, m.qos) == ("dt/site1/k1/temp", b"21", 1)  # QoS 2 goes as 1
        siskin.wait_log(r"dead-lettered \(1 so far\): aws takes topics of at most 7 '/'")
        cloud_sub.get_nothing(0.5)


def test_the_stand_in_refuses_a_client_without_the_alpn(
    tmp_path: Path, aws: AlpnGate, pki: Pki, clients: list[Paho]
) -> None:
    certfile, keyfile = pki.alice
    over = {"cafile": pki.ca_file, "certfile": certfile, "keyfile": keyfile}
    with edge(tmp_path, [aws.port], connected=False, **over) as siskin:
        siskin.wait_log(r"bridge cloud: cannot connect to 127\.0\.0\.1:\d+", 15)
        wait_until(lambda: any("ALPN None" in r for r in aws.refused) or None, 10, lambda: str(aws.refused))
        assert "bridge cloud: connected" not in siskin.log_text()


@pytest.fixture
def azure(tmp_path: Path, pki: Pki) -> Iterator[tuple[Mosquitto, int]]:
    """A Mosquitto like an IoT Hub for device dev1: a TLS listener whose ACL
    lets only the IoT Hub user name of dev1 publish to its events topic and
    read its cloud-to-device topic (a wrong user name gets nothing through:
    Mosquitto drops a publish the ACL denies); the plain listener is the
    test's (anonymous: everything)."""
    require("mosquitto", Mosquitto.available(), "apt-get install mosquitto")
    tls_port = free_port()
    acl = tmp_path / "acl"
    acl.write_text(
        "topic readwrite #\n"  # (anonymous: the test's own clients)
        "user 127.0.0.1/dev1/?api-version=2021-04-12\n"
        "topic write devices/dev1/messages/events/#\n"
        "topic read devices/dev1/messages/devicebound/#\n"
    )
    certfile, keyfile = pki.server
    m = Mosquitto(
        tmp_path,
        [
            f"acl_file {acl}",
            f"listener {tls_port} 127.0.0.1",
            f"certfile {certfile}",
            f"keyfile {keyfile}",
            "allow_anonymous true",
            f"acl_file {acl}",
            *(["user root"] if os.geteuid() == 0 else []),
        ],
    )
    m.start()
    yield m, tls_port
    m.stop()


def test_azure_iot_hub_user_name_topics_qos_and_retain(
    tmp_path: Path, azure: tuple[Mosquitto, int], pki: Pki, clients: list[Paho]
) -> None:
    mosquitto, tls_port = azure
    cloud_sub = paho(mosquitto.port, clients, "consumer")
    cloud_sub.subscribe("devices/dev1/messages/events/#", 2)
    rules = [
        {"direction": "out", "local": "telemetry/#", "remote": "devices/dev1/messages/events/", "qos": 2},
        {"direction": "in", "remote": "devices/dev1/messages/devicebound/#", "local": "cmd/{1}"},
    ]
    over: dict[str, Any] = {"profile": "azure", "client_id": "dev1", "device_key": DEVICE_KEY,
                            "cafile": pki.ca_file, "topic": rules}  # fmt: skip
    with edge(tmp_path / "edge", [tls_port], **over) as siskin:
        dev_sub = paho(siskin.port, clients, "dev-sub")
        dev_sub.subscribe("cmd/#", 1)
        dev = paho(siskin.port, clients, "dev")
        dev.publish("telemetry/t1", b"21.5", 2, retain=True)
        m = cloud_sub.get(10)
        assert (m.topic, m.payload, m.qos) == ("devices/dev1/messages/events/", b"21.5", 1)  # QoS <= 1
        late = paho(mosquitto.port, clients, "late")
        late.subscribe("devices/#", 1)
        late.get_nothing(0.5)  # no retain: the hub keeps nothing for a later subscriber
        paho(mosquitto.port, clients, "hub").publish("devices/dev1/messages/devicebound/valve", b"open", 1)
        m = dev_sub.get(10)
        assert (m.topic, m.payload) == ("cmd/valve", b"open")


@pytest.fixture
def hosted(tmp_path: Path, pki: Pki) -> Iterator[tuple[Mosquitto, int]]:
    """A Mosquitto with a TLS listener that wants a user name and password."""
    require("mosquitto", Mosquitto.available(), "apt-get install mosquitto")
    tool = tool_path("mosquitto_passwd")
    require("mosquitto_passwd", tool, "apt-get install mosquitto")
    assert tool is not None
    passwd = tmp_path / "passwd"
    subprocess.run([tool, "-b", "-c", str(passwd), "edge1", "s3cret"], check=True, capture_output=True)
    tls_port = free_port()
    certfile, keyfile = pki.server
    m = Mosquitto(
        tmp_path,
        [
            "allow_anonymous true",
            f"listener {tls_port} 127.0.0.1",
            f"certfile {certfile}",
            f"keyfile {keyfile}",
            f"password_file {passwd}",
            "allow_anonymous false",
            *(["user root"] if os.geteuid() == 0 else []),
        ],
    )
    m.start()
    yield m, tls_port
    m.stop()


def test_hosted_tls_and_a_login(tmp_path: Path, hosted: tuple[Mosquitto, int], pki: Pki, clients: list[Paho]) -> None:
    mosquitto, tls_port = hosted
    cloud_sub = paho(mosquitto.port, clients, "consumer")
    cloud_sub.subscribe("edge1/#", 2)
    over = {"profile": "hosted", "username": "edge1", "password": "s3cret", "cafile": pki.ca_file, "protocol": 5}
    with edge(tmp_path / "edge", [tls_port], **over) as siskin:
        dev = paho(siskin.port, clients, "dev")
        dev.publish("up/h", b"hi", 2)
        m = cloud_sub.get(10)
        assert (m.topic, m.payload, m.qos) == ("edge1/h", b"hi", 2)

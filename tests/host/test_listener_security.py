"""Per-listener security and mount points on the real host server
(Mosquitto's per_listener_settings and mount_point), over real sockets
with real clients: paho (3.1.1 and 5), mosquitto_pub, raw sockets; two or
three listeners of one broker, each with its own users, ACL and anonymous
switch ([listener.security]) or a topic prefix (mount_point); a SIGHUP
reload of the per-listener files. The core's side:
common/broker/listener_policy.py, login.security_of.
"""

from __future__ import annotations

import re
import signal
import ssl
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT
from tests.host.broker_proc import (
    BrokerProcess,
    Paho,
    RawClient,
    connect_packet,
    run_cli,
    wait_until,
    write_config,
)
from tests.host.test_server_security import mosquitto_tool, siskin_passwd


def start_with(work: Path, config: str) -> BrokerProcess:
    """A broker (started by `with`) on the config text `config` (the first
    listener's address is --host 127.0.0.1 --port 0, as BrokerProcess makes it)."""
    b = BrokerProcess(work)
    b.config_path.write_text(config)
    return b


PER_LISTENER = """\
[server]
warm_up = false

# 1: no security of its own: the broker's [security] (anonymous allowed)
[[listener]]
port = 0

# 2: its own users and ACL, no anonymous clients
[[listener]]
port = 0
[listener.security]
password_file = "passwd_net"
acl_file = "acl_net"
allow_anonymous = false

# 3: another password file, no ACL
[[listener]]
port = 0
[listener.security]
password_file = "passwd_ops"

[security]
allow_anonymous = true
"""


def start_per_listener(work: Path) -> BrokerProcess:
    """PER_LISTENER with its files: alice in listener 2's, carol in 3's; alice's home/# in 2's ACL."""
    siskin_passwd(work / "passwd_net", "alice", "wonderland", "-c")
    siskin_passwd(work / "passwd_ops", "carol", "opsopsops", "-c")
    (work / "acl_net").write_text("user alice\ntopic readwrite home/#\n")
    return start_with(work, PER_LISTENER)


def test_each_listener_has_its_own_users_acl_and_anonymous_switch(tmp_path: Path) -> None:
    with start_per_listener(tmp_path) as b:
        local, net, ops = b.ports()
        b.wait_log(r"security of its own: users: 1 in the password file; ACL: 1 rules")
        # Anonymous: the broker's [security] on 1, refused on 2 (allow_anonymous
        # false) and on 3 (a password file, allow_anonymous not set).
        assert RawClient(local).connect("anon") == b"\x00\x00"
        assert RawClient(net).connect("anon-net") == b"\x00\x05"
        assert RawClient(ops).connect("anon-ops") == b"\x00\x05"
        b.wait_log(r"refused CONNECT.*a password file is configured and allow_anonymous is not set")
        # Each listener's password file, and no other (a failure holds that
        # name back from this address for a while: the failures come last).
        alice = RawClient(net)
        assert alice.connect("alice", username="alice", password=b"wonderland") == b"\x00\x00"
        assert RawClient(ops).connect("c1", username="carol", password=b"opsopsops") == b"\x00\x00"
        # Listener 2's ACL binds its clients only [MQTT-3.9.3-1]: a refused filter gets 0x80.
        assert alice.subscribe("other/#", 0) == 0x80
        anon = Paho(local, "reader").connect()
        anon.subscribe("#", 0)
        # mosquitto_pub as alice on listener 2: home/ is hers, other/ is not
        # (3.1.1: acknowledged and dropped); the anonymous reader on 1 sees home/ only.
        pub = mosquitto_tool("mosquitto_pub")
        for topic in ("other/x", "home/door"):
            args = [pub, "-p", str(net), "-u", "alice", "-P", "wonderland", "-q", "1", "-t", topic, "-m", topic]
            subprocess.run(args, check=True, timeout=20, capture_output=True)
        msg = anon.get()
        assert (msg.topic, msg.payload) == ("home/door", b"home/door")
        anon.close()
        assert RawClient(ops).connect("a2", username="alice", password=b"wonderland") == b"\x00\x04"
        assert RawClient(net).connect("c2", username="carol", password=b"opsopsops") == b"\x00\x04"


def test_sighup_reloads_each_listeners_files(tmp_path: Path) -> None:
    with start_per_listener(tmp_path) as b:
        _, net, ops = b.ports()
        alice = RawClient(net)
        assert alice.connect("alice", username="alice", password=b"wonderland") == b"\x00\x00"
        assert alice.subscribe("home/#", 0) == 0
        assert RawClient(ops).connect("d1", username="dave", password=b"divingdave") == b"\x00\x04"
        # dave joins listener 3's file; listener 2's ACL narrows alice to home/door.
        siskin_passwd(tmp_path / "passwd_ops", "dave", "divingdave")
        (tmp_path / "acl_net").write_text("user alice\ntopic readwrite home/door\n")
        b.proc.send_signal(signal.SIGHUP)  # type: ignore[union-attr]
        b.wait_log(r"SIGHUP: security reloaded")
        b.wait_log(r"alice: subscription home/# removed")
        # (dave's held-back name from the failure above: wait out its 1 s hold.)
        wait_until(
            lambda: RawClient(ops).connect("d2", username="dave", password=b"divingdave") == b"\x00\x00",
            10,
            "dave never logged in on listener 3 after the reload",
        )
        assert RawClient(net).connect("d3", username="dave", password=b"divingdave") == b"\x00\x04"


MOUNTED = """\
[server]
warm_up = false

[limits]
sys_interval = 1

[[listener]]
port = 0

[[listener]]
port = 0
mount_point = "site1/"

[security]
allow_anonymous = true
"""


def test_mount_point_puts_a_listeners_clients_under_a_prefix(tmp_path: Path) -> None:
    with start_with(tmp_path, MOUNTED) as b:
        plain, mounted = b.ports()
        b.wait_log(r"mount point 'site1/': its clients' topics are under it")
        outside = Paho(plain, "outside").connect()
        outside.publish("site1/room/temp", b"21", qos=1, retain=True)
        outside.publish("other/room/temp", b"-5", qos=1, retain=True)
        outside.subscribe("site1/room/hum", 1)
        # Retained messages under the prefix reach a wildcard subscriber
        # without it [MQTT-3.3.1-6]; the one outside the prefix does not.
        inside = Paho(mounted, "inside").connect()
        inside.subscribe("room/#", 1)
        msg = inside.get()
        assert (msg.topic, msg.payload, msg.retain) == ("room/temp", b"21", True)  # [MQTT-3.3.2-3]
        v5 = Paho(mounted, "inside-v5", protocol=5).connect()
        v5.subscribe("#", 1)
        msg = v5.get()
        assert (msg.topic, msg.payload, msg.retain) == ("room/temp", b"21", True)
        # What a mounted client publishes lands under the prefix for the others...
        inside.publish("room/hum", b"40", qos=1)
        assert outside.get().topic == "site1/room/hum"
        assert inside.get().topic == "room/hum"
        # ...and a message outside the prefix never reaches it: the marker
        # published after it is the first it sees.
        outside.publish("other/room/hum", b"x", qos=1)
        outside.publish("site1/room/marker", b"m", qos=1)
        assert inside.get().topic == "room/marker"
        # A shared subscription's inner filter is under the prefix too.
        shared = Paho(mounted, "shared", protocol=5).connect()
        shared.subscribe("$share/g/room/+", 1)
        outside.publish("site1/room/co2", b"400", qos=1)
        assert shared.get().topic == "room/co2"
        for c in (outside, inside, v5, shared):
            c.close()


def test_mount_point_hides_sys_and_mounts_the_will(tmp_path: Path) -> None:
    with start_with(tmp_path, MOUNTED) as b:
        plain, mounted = b.ports()
        inside = Paho(mounted, "inside").connect()
        inside.subscribe("$SYS/#", 0)  # as Mosquitto: site1/$SYS/#, which the broker's $SYS never matches
        inside.subscribe("marker", 1)
        outside = Paho(plain, "outside").connect()
        outside.subscribe("$SYS/broker/uptime", 0)
        # A live $SYS round (not the retained replay) routed after both
        # subscriptions: had inside's matched, its copy would come before the marker.
        wait_until(lambda: not outside.get().retain, 10, "no live $SYS round")
        outside.subscribe("site1/#", 1)
        outside.publish("site1/marker", b"m", qos=1)
        assert inside.get().topic == "marker"
        # The will of a mounted client is published under its prefix.
        dev = RawClient(mounted)
        assert dev.connect("dev", keep_alive=60, will=("status/dev", b"gone", 1, False)) == b"\x00\x00"
        dev.close()  # no DISCONNECT: the will goes out
        msg = outside.get()
        while msg.topic != "site1/status/dev":
            msg = outside.get()
        assert (msg.topic, msg.payload) == ("site1/status/dev", b"gone")  # [MQTT-3.1.2-8]
        outside.close()
        inside.close()


def test_the_whole_certificate_subject_as_the_user_name(tmp_path: Path) -> None:
    # Mosquitto's use_subject_as_username: identity = "subject" makes the
    # subject, as OpenSSL prints it in RFC 2253 form (what Mosquitto uses), the user name.
    from tests.host.test_server_tls import Pki, TlsRawClient, tls_client

    pki = Pki(tmp_path)
    printed = subprocess.run(
        ["openssl", "x509", "-in", pki.alice[0], "-noout", "-subject", "-nameopt", "RFC2253"],
        capture_output=True,
        text=True,
        check=True,
        timeout=20,
    ).stdout.strip()
    subject = printed.removeprefix("subject=")
    assert subject.startswith("CN=alice,"), printed
    (tmp_path / "acl").write_text(f"user {subject}\ntopic readwrite alice/#\n")
    mutual = pki.listener(
        cafile=pki.ca_file, require_certificate=True, use_identity_as_username=True, identity="subject"
    )
    b = BrokerProcess(tmp_path / "b", listeners=[mutual], security={"acl_file": str(tmp_path / "acl")})
    with b:
        b.wait_log(r"its subject is the user name")
        c = TlsRawClient(tls_client(b.port, pki.client_context(pki.alice)))
        assert c.connect("cert-client") == b"\x00\x00"
        assert c.subscribe("alice/#", 1) == 1
        assert c.subscribe("other/#", 0, packet_id=2) == 0x80


def revocation_list(pki: Any, revoked: str) -> bytes:
    """A PEM CRL of pki's CA revoking the certificate in file `revoked`."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization

    ca_cert = x509.load_pem_x509_certificate(pki.ca.cert_pem.bytes())
    ca_key = serialization.load_pem_private_key(pki.ca.private_key_pem.bytes(), None)
    cert = x509.load_pem_x509_certificate(Path(revoked).read_bytes())
    now = datetime.datetime.now(datetime.UTC)
    entry = x509.RevokedCertificateBuilder().serial_number(cert.serial_number).revocation_date(now).build()
    crl = (
        x509.CertificateRevocationListBuilder()
        .issuer_name(ca_cert.subject)
        .last_update(now - datetime.timedelta(minutes=1))
        .next_update(now + datetime.timedelta(days=1))
        .add_revoked_certificate(entry)
        .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    )
    return crl.public_bytes(serialization.Encoding.PEM)


def not_served(port: int, ctx: ssl.SSLContext) -> bool:
    """Whether a TLS client of `ctx` is refused: in the handshake, or (TLS 1.3: the
    server judges the client's certificate after the client's side is done) closed before CONNACK."""
    from tests.host.test_server_tls import TlsRawClient, tls_client

    try:
        c = TlsRawClient(tls_client(port, ctx))
        c.send(connect_packet("x"))
        return c.read_packet() is None
    except (ssl.SSLError, ConnectionError):
        return True


def test_crlfile_and_ciphers_per_listener(tmp_path: Path) -> None:
    # Mosquitto's crlfile and ciphers on a listener: a revoked client
    # certificate fails the handshake, another passes; the listener speaks
    # the ciphers given (TLS 1.2) and no other.
    from tests.host.test_server_tls import Pki, TlsRawClient, tls_client

    pki = Pki(tmp_path)
    (tmp_path / "revoked.crl").write_bytes(revocation_list(pki, pki.alice[0]))
    strict = pki.listener(cafile=pki.ca_file, require_certificate=True, crlfile="revoked.crl")
    strict["ciphers"] = "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384"
    b = BrokerProcess(tmp_path, listeners=[{"port": 0}, strict])
    with b:
        _, port = wait_until(lambda: len(b.ports()) == 2 and b.ports(), 5, b.log_text)
        assert not_served(port, pki.client_context(pki.alice))
        b.wait_log(r"certificate revoked")
        tls12 = pki.client_context(pki.no_email)
        tls12.maximum_version = ssl.TLSVersion.TLSv1_2
        good = tls_client(port, tls12)
        assert "AES256-GCM" in good.cipher()[0]
        assert TlsRawClient(good).connect("bob") == b"\x00\x00"
        weaker = pki.client_context(pki.no_email)
        weaker.maximum_version = ssl.TLSVersion.TLSv1_2
        weaker.set_ciphers("ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256")
        with pytest.raises(ssl.SSLError):
            tls_client(port, weaker)
    bad = write_config(tmp_path / "bad.toml", listeners=[pki.listener(ciphers="NO-SUCH-CIPHER")])
    proc = run_cli("--config", str(bad))
    assert proc.returncode == 2 and "ciphers = 'NO-SUCH-CIPHER': OpenSSL knows no cipher of it" in proc.stderr


def test_the_commented_per_listener_example_of_linux_toml_works(tmp_path: Path) -> None:
    """boards/linux.toml's per-listener example, uncommented with this test's files, serves its listener."""
    text = (REPO_ROOT / "boards" / "linux.toml").read_text()
    start = text.index("# Per listener")
    block = text[start : text.index("\n\n", start)]
    code = re.compile(r"# (\[|[a-z_]+ = )")  # the example's lines, not its prose
    example = "\n".join(line[2:] for line in block.splitlines() if code.match(line))
    siskin_passwd(tmp_path / "passwd.site1", "dev", "device-pw", "-c")
    (tmp_path / "acl.site1").write_text("user dev\ntopic readwrite #\n")
    example = example.replace("/etc/siskin/", f"{tmp_path}/").replace('"0.0.0.0"', '"127.0.0.1"').replace("1884", "0")
    b = BrokerProcess(tmp_path)
    b.config_path.write_text(text[:start] + example + "\n" + text[start + len(block) :])
    with b:
        _, port = wait_until(lambda: len(b.ports()) == 2 and b.ports(), 5, b.log_text)
        assert RawClient(port).connect("anon") == b"\x00\x05"
        dev = RawClient(port)
        assert dev.connect("dev", username="dev", password=b"device-pw") == b"\x00\x00"
        b.wait_log(r"mount point 'site1/'")

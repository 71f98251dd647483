"""Mosquitto's per_listener_settings and mount_point, converted
(cpython_host/mosquitto/conf.py) and served: one realistic mosquitto.conf
with two listeners, each with its own anonymous switch, password file, ACL
or mount point, run by Mosquitto and by Siskin (--mosquitto-conf), the same
clients asking both the same things."""

from __future__ import annotations

import getpass
import re
import subprocess
import sys
from pathlib import Path

import pytest

from common.broker.settings import ConfigError
from cpython_host.config import load_config, load_security
from cpython_host.mosquitto.conf import convert, to_toml
from tests.host.broker_proc import Paho
from tests.host.test_mosquitto_conf import answer, mosquitto_tools, running, write
from tests.host.upy_broker_proc import free_port


def two_listener_conf(work: Path, local: int, net: int, relative: bool = False) -> Path:
    """A gateway's mosquitto.conf: anonymous devices under site1/ on one
    listener; users with a password file and an ACL on the other (named
    from the file's directory if `relative`: Mosquitto reads them from its
    working directory, the converter from the file's)."""
    where = "" if relative else f"{work}/"
    write(work / "aclfile", "user alice\ntopic readwrite site1/#\n")
    return write(
        work / "mosquitto.conf",
        "per_listener_settings true\n"
        f"user {getpass.getuser()}\n"  # mosquitto started as root would switch to the user `mosquitto`
        "log_type all\n"
        "\n"
        f"listener {local} 127.0.0.1\n"
        "allow_anonymous true\n"
        "mount_point site1/\n"
        "\n"
        f"listener {net} 127.0.0.1\n"
        "allow_anonymous false\n"
        f"password_file {where}passwd\n"
        f"acl_file {where}aclfile\n",
    )


def test_per_listener_settings_are_converted(tmp_path: Path) -> None:
    (tmp_path / "passwd").write_text("")
    conf = two_listener_conf(tmp_path, 1884, 8884, relative=True)
    conv = convert(str(conf))
    local, net = conv.doc["listener"]
    assert local == {"host": "127.0.0.1", "port": 1884, "mount_point": "site1/", "security": {"allow_anonymous": True}}
    assert net["security"] == {
        "allow_anonymous": False,
        "password_file": str(tmp_path / "passwd"),
        "acl_file": str(tmp_path / "aclfile"),
    }
    assert conv.doc["security"] == {"allow_anonymous": False}
    # The TOML it writes loads, with each listener's own policy.
    toml = write(tmp_path / "siskin.toml", to_toml(conv, str(conf)))
    assert "[listener.security]" in toml.read_text()
    users, acl, allow, policies = load_security(load_config(str(toml)))
    assert (users, acl, allow) == (None, None, False)
    assert policies[0].own and policies[0].allow_anonymous and policies[0].mount == "site1/"
    assert policies[1].own and policies[1].acl is not None and policies[1].mount is None


def what_each_side_sees(local: int, net: int) -> tuple[str, str, str, str, str]:
    """Anonymous logins on both listeners, alice's on the network one; then
    a device on the local listener and alice exchange one message each."""
    anon_local = answer(local, "a1")
    anon_net = answer(net, "a2")
    alice_login = answer(net, "a3", "alice", "wonderland")
    device = Paho(local, "device").connect()
    alice = Paho(net, "alice", username="alice", password="wonderland").connect()
    try:
        device.subscribe("cmd/#", 1)
        alice.subscribe("site1/#", 1)
        device.publish("temp", b"21", 1)  # site1/temp for everyone else
        heard = alice.get().topic
        alice.publish("site1/cmd/fan", b"on", 1)
        told = device.get().topic
    finally:
        device.close()
        alice.close()
    return anon_local, anon_net, alice_login, heard, told


@pytest.mark.interop
def test_same_answers_as_mosquitto_per_listener(tmp_path: Path) -> None:
    mosquitto, mosquitto_passwd = mosquitto_tools()
    subprocess.run(
        [mosquitto_passwd, "-c", "-b", str(tmp_path / "passwd"), "alice", "wonderland"], check=True, timeout=20
    )
    local, net = free_port(), free_port()
    conf = two_listener_conf(tmp_path, local, net)
    answers = {}
    for name, cmd in (
        ("mosquitto", [mosquitto, "-c", str(conf)]),
        ("siskin", [sys.executable, "-m", "cpython_host", "--mosquitto-conf", str(conf)]),
    ):
        with running(cmd, net, tmp_path / f"{name}.log") as proc:
            answers[name] = what_each_side_sees(local, net)
            assert proc.poll() is None
    # Mosquitto 2.0.0 to 2.0.11 left the mount point on what they sent a
    # mounted client (eclipse-mosquitto/mosquitto#2244, fixed in 2.0.12);
    # Siskin does as 1.6 and 2.0.12+ do: the client sees its own topic.
    version = re.search(r"mosquitto version (\d+)\.(\d+)\.(\d+) starting", (tmp_path / "mosquitto.log").read_text())
    assert version is not None
    bug_2244 = (2, 0, 0) <= tuple(int(n) for n in version.groups()) < (2, 0, 12)
    told = "site1/cmd/fan" if bug_2244 else "cmd/fan"
    assert answers["mosquitto"] == ("Success", "Not authorized", "Success", "site1/temp", told)
    assert answers["siskin"] == ("Success", "Not authorized", "Success", "site1/temp", "cmd/fan")


def test_tls_listener_options_are_converted(tmp_path: Path) -> None:
    conf = write(
        tmp_path / "mosquitto.conf",
        "listener 8883\n"
        "certfile server.crt\n"
        "keyfile server.key\n"
        "cafile ca.crt\n"
        "require_certificate true\n"
        "use_subject_as_username true\n"
        "ciphers ECDHE-RSA-AES256-GCM-SHA384\n"
        "crlfile revoked.crl\n"
        "ciphers_tls1.3 TLS_AES_256_GCM_SHA384\n",
    )
    with pytest.raises(ConfigError, match=r":9: 'ciphers_tls1.3' is not supported: Python's ssl module cannot"):
        convert(str(conf))
    (listener,) = convert(str(conf), ignore_unsupported=True).doc["listener"]
    assert listener["use_identity_as_username"] is True and listener["identity"] == "subject"
    assert listener["ciphers"] == "ECDHE-RSA-AES256-GCM-SHA384"
    assert listener["crlfile"] == str(tmp_path / "revoked.crl")

"""A complete move from Mosquitto: its saved state and its bridges, with the real Mosquitto 2.0.

The real `mosquitto` runs with persistence; real clients (mosquitto_pub,
mosquitto_sub, raw MQTT sockets) leave retained messages, a persistent
3.1.1 session with a message in flight and more queued, a v5 session with
QoS 2 messages queued. Mosquitto stops (it writes mosquitto.db), `siskin
import-mosquitto-db` reads the file, and Siskin, started on the imported
store, gives the same clients the same data. The whole move adds a
Mosquitto bridge to an upstream Mosquitto: `siskin convert-mosquitto-conf`
turns it into a [[bridge]], and the converted Siskin, on Mosquitto's port,
bridges the same topics both ways with the same remote session.
"""

from __future__ import annotations

import getpass
import signal
import subprocess
from pathlib import Path

import pytest

from tests.host.broker_proc import BrokerProcess, RawClient, arrived, drain, publish_packet, run_cli, wait_until
from tests.host.test_mosquitto_conf import running
from tests.host.test_server_security import mosquitto_tool
from tests.host.upy_broker_proc import free_port

pytestmark = pytest.mark.interop


def mosquitto_conf(work: Path, port: int, extra: str = "") -> Path:
    work.mkdir(parents=True, exist_ok=True)
    conf = work / "mosquitto.conf"
    conf.write_text(
        f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence true\npersistence_location {work}/\n"
        # As root Mosquitto switches to the user mosquitto, who may not write the test's directory.
        f"user {getpass.getuser()}\n{extra}"
    )
    return conf


def pub(port: int, topic: str, message: str, *flags: str) -> None:
    subprocess.run(
        [mosquitto_tool("mosquitto_pub"), "-p", str(port), "-t", topic, "-m", message, *flags],
        check=True, timeout=20,
    )  # fmt: skip


def sub(port: int, topic: str, count: int, *flags: str) -> list[str]:
    """`mosquitto_sub -v` until `count` messages (0: none, -E) : their "topic payload" lines."""
    until = ["-C", str(count)] if count else []
    proc = subprocess.run(
        [mosquitto_tool("mosquitto_sub"), "-p", str(port), "-t", topic, *until, "-W", "10", "-v", *flags],
        capture_output=True, text=True, timeout=20,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


V5 = ("-V", "mqttv5", "-c", "-i", "v5dev", "-x", "3600", "-q", "2")  # a v5 session kept an hour


def leave_state(port: int) -> int:
    """Retained messages, sessions and queues in the broker on `port`; the packet id of the
    message in flight for dev1."""
    pub(port, "r/a", "A", "-r", "-q", "1")
    pub(port, "r/b", "B", "-r")
    dev1 = RawClient(port)
    assert dev1.connect("dev1", clean=False) == b"\x00\x00"
    assert dev1.subscribe("q/#", 1) == 1
    sub(port, "v/#", 0, *V5, "-E")  # subscribed, then gone
    pub(port, "q/0", "zero", "-q", "1")
    pkt = dev1.read_packet()
    assert pkt is not None and pkt[0] == 0x32  # QoS 1 PUBLISH, not acknowledged: in flight
    in_flight = int.from_bytes(pkt[1][5:7], "big")  # after the topic "q/0"
    dev1.close()
    for i in range(1, 5):
        pub(port, f"q/{i}", f"m{i}", "-q", "1")
    for i in range(1, 4):
        pub(port, f"v/{i}", f"v{i}", "-q", "2")
    return in_flight


def check_state(port: int, in_flight: int) -> None:
    """The same clients find what leave_state() left."""
    dev1 = RawClient(port)
    assert dev1.connect("dev1", clean=False) == b"\x01\x00"  # session present
    got = drain(dev1, quiet=1.0)
    assert [(t, p) for t, p, *_ in got] == [("q/0", b"zero")] + [(f"q/{i}", b"m%d" % i) for i in range(1, 5)]
    assert got[0][3] and got[0][4] == in_flight  # resent: DUP, the same packet id [MQTT-4.4.0-1]
    assert [qos for _t, _p, qos, *_ in got] == [1] * 5
    dev1.close()
    assert sub(port, "v/#", 3, *V5) == ["v/1 v1", "v/2 v2", "v/3 v3"]
    assert sorted(sub(port, "r/#", 2)) == ["r/a A", "r/b B"]


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    assert proc.wait(15) == 0


def test_import_a_file_the_real_mosquitto_wrote(tmp_path: Path) -> None:
    mosquitto = mosquitto_tool("mosquitto")
    port = free_port()
    conf = mosquitto_conf(tmp_path / "mosquitto", port)
    with running([mosquitto, "-c", str(conf)], port, tmp_path / "mosquitto.log") as proc:
        in_flight = leave_state(port)
        stop(proc)
    db = tmp_path / "mosquitto" / "mosquitto.db"
    assert db.is_file(), (tmp_path / "mosquitto.log").read_text()
    b = BrokerProcess(tmp_path / "siskin", log_level="info")
    imported = run_cli("import-mosquitto-db", str(db), "--data-dir", str(b.workdir / "data"))
    assert imported.returncode == 0, imported.stderr
    assert "2 sessions, 2 subscriptions, 7 queued and 1 in-flight messages, 2 retained messages" in imported.stdout
    with b:
        b.wait_log(r"restored 2 sessions, 2 subscriptions, 8 queued messages, 2 retained")
        check_state(b.port, in_flight)
        assert b.stop() == 0
    again = run_cli("import-mosquitto-db", str(db), "--data-dir", str(b.workdir / "data"))
    assert again.returncode == 1 and "holds a Siskin store already" in again.stderr


def test_the_whole_move_with_a_bridge(tmp_path: Path) -> None:
    """Mosquitto with a bridge, retained messages and offline sessions, converted and imported:
    on Mosquitto's port Siskin serves the same clients the same data and bridges the same topics."""
    mosquitto = mosquitto_tool("mosquitto")
    upstream_port, port = free_port(), free_port()
    bridge = (
        f"connection up\naddress 127.0.0.1:{upstream_port}\nremote_clientid gw-a\ncleansession false\n"
        "topic up/# out 1\ntopic down/# in 1\ntry_private true\nnotifications true\n"
    )
    conf = mosquitto_conf(tmp_path / "mosquitto", port, bridge)
    upstream = tmp_path / "upstream.conf"
    upstream.write_text(f"listener {upstream_port} 127.0.0.1\nallow_anonymous true\n")
    with running([mosquitto, "-c", str(upstream)], upstream_port, tmp_path / "upstream.log"):
        with running([mosquitto, "-c", str(conf)], port, tmp_path / "mosquitto.log") as proc:
            watch = RawClient(port)
            watch.connect("watch")
            assert watch.subscribe("down/#", 1) == 1
            wait_until(lambda: _carried(upstream_port, watch, "down/ping"), 15, "Mosquitto's bridge never carried")
            in_flight = leave_state(port)
            dev2 = RawClient(port)
            assert dev2.connect("dev2", clean=False) == b"\x00\x00"
            assert dev2.subscribe("down/#", 1) == 1
            dev2.close()
            # From upstream, over Mosquitto's bridge, into dev2's queue while it is away.
            assert _carried(upstream_port, watch, "down/probe", b"while away")
            watch.close()
            stop(proc)
        db = tmp_path / "mosquitto" / "mosquitto.db"
        converted = run_cli("convert-mosquitto-conf", str(conf), "-o", str(tmp_path / "siskin.toml"))
        assert converted.returncode == 0, converted.stderr
        text = (tmp_path / "siskin.toml").read_text()
        assert "[[bridge]]" in text and 'client_id = "gw-a"' in text
        assert "notifications = true" in text  # Mosquitto's default, kept
        b = BrokerProcess(tmp_path / "siskin", log_level="info", extra_args=("--port", str(port)))
        b.config_path.write_text(text)
        imported = run_cli("import-mosquitto-db", str(db), "--data-dir", str(b.workdir / "data"))
        assert imported.returncode == 0, imported.stderr
        with b:
            assert b.port == port  # where the clients know it
            b.wait_log(r"bridge up: connected to 127\.0\.0\.1:\d+ \(session resumed\)", 15)
            check_state(port, in_flight)
            # The link's state where Mosquitto's bridge put it: here and upstream, retained.
            for where in (port, upstream_port):
                wait_until(lambda w=where: _retained(w, STATE_TOPIC) == b"1", 15, f"no state '1' on port {where}")
            dev2 = RawClient(port)
            assert dev2.connect("dev2", clean=False) == b"\x01\x00"
            assert [(t, p) for t, p, *_ in drain(dev2, quiet=1.0)] == [("down/probe", b"while away")]
            # Both ways over Siskin's bridge now.
            pub(upstream_port, "down/live", "from upstream", "-q", "1")
            assert [(t, p) for t, p, *_ in drain(dev2, quiet=2.0)] == [("down/live", b"from upstream")]
            dev2.close()
            up = subprocess.Popen(
                [mosquitto_tool("mosquitto_sub"), "-p", str(upstream_port), "-t", "up/#", "-C", "1", "-W", "10", "-v"],
                stdout=subprocess.PIPE, text=True,
            )  # fmt: skip
            out = ""
            for _ in range(40):  # until the subscriber (started apart) has subscribed and takes one
                pub(port, "up/reading", "42", "-q", "1")
                try:
                    out, _ = up.communicate(timeout=0.5)
                    break
                except subprocess.TimeoutExpired:
                    continue
            assert out.splitlines() == ["up/reading 42"]
            assert b.stop() == 0


STATE_TOPIC = "$SYS/broker/connection/gw-a/state"  # Mosquitto's default for remote_clientid gw-a


def _retained(port: int, topic: str) -> bytes | None:
    """The retained payload of `topic` on the broker at `port` (None: none within a second)."""
    c = RawClient(port)
    c.connect("state-watch")
    assert c.subscribe(topic, 1) in (0, 1)
    got = [p for t, p, *_ in drain(c, quiet=1.0) if t == topic]
    c.close()
    return got[-1] if got else None


def _carried(upstream_port: int, watch: RawClient, topic: str, payload: bytes = b"ping") -> bool:
    """Publish `topic` upstream; whether `watch`, here, got it (over the bridge) within a second."""
    c = RawClient(upstream_port)
    c.connect("probe-pub")
    c.send(publish_packet(topic, payload, qos=1, packet_id=1))
    acked = c.read_packet()
    c.close()
    assert acked is not None and acked[0] == 0x40
    try:
        got = drain(watch, quiet=1.0)
    except OSError:
        return False
    return (topic, payload) in [(t, p) for t, p, *_ in got]


def test_a_converted_bridge_under_an_acl_delivers_upstream(tmp_path: Path) -> None:
    """The acl_file names devices only: the bridge's local client (user bridge:up) may read its
    "out" filters all the same. A deny rule for it refuses the subscription: an error in the log
    and $SYS; the ACL fixed, SIGHUP subscribes again and messages go up (docs/bridge.md)."""
    mosquitto, upstream_port, port = mosquitto_tool("mosquitto"), free_port(), free_port()
    work = tmp_path / "mosquitto"
    work.mkdir()
    subprocess.run([mosquitto_tool("mosquitto_passwd"), "-c", "-b", str(work / "passwd"), "alice", "secret"],
                   check=True, timeout=20)  # fmt: skip
    devices = (
        "user alice\ntopic readwrite local/sensors/#\ntopic read $SYS/broker/bridge/#\npattern write devices/%c/out\n"
    )
    acl = work / "aclfile"
    acl.write_text(devices)
    conf = mosquitto_conf(
        work, port,
        f"allow_anonymous false\npassword_file passwd\nacl_file aclfile\n"
        f"connection up\naddress 127.0.0.1:{upstream_port}\ntopic sensors/# out 1 local/ remote/\n",
    )  # fmt: skip
    upstream = tmp_path / "upstream.conf"
    upstream.write_text(f"listener {upstream_port} 127.0.0.1\nallow_anonymous true\n")
    # From Mosquitto's directory, its file named as there: relative names from that directory.
    converted = run_cli("convert-mosquitto-conf", conf.name, "-o", str(tmp_path / "siskin.toml"), cwd=work)
    assert converted.returncode == 0, converted.stderr
    assert "acl_file and bridge(s) up: each bridge's local client (user bridge:NAME) may read" in converted.stderr
    alice = ("-u", "alice", "-P", "secret")
    with running([mosquitto, "-c", str(upstream)], upstream_port, tmp_path / "upstream.log"):
        cloud = RawClient(upstream_port)
        cloud.connect("cloud")
        assert cloud.subscribe("remote/sensors/#", 1) == 1
        b = BrokerProcess(tmp_path / "siskin", log_level="info")
        b.config_path.write_text((tmp_path / "siskin.toml").read_text())
        with b:
            b.wait_log(r"bridge up: connected to 127\.0\.0\.1", 15)
            pub(b.port, "local/sensors/t1", "1", "-q", "1", *alice)
            got = drain(cloud, until=arrived({"remote/sensors/t1": {1}}))
            assert [(t, p) for t, p, *_ in got] == [("remote/sensors/t1", b"1")]
            # A deny rule for the bridge: SIGHUP takes its subscription away, and says so.
            acl.write_text(devices + "user bridge:up\ntopic deny local/sensors/secret/#\n")
            b.proc.send_signal(signal.SIGHUP)  # type: ignore[union-attr]
            b.wait_log(r"bridge up: this broker refused its subscription local/sensors/# \(0x87\)")
            wait_until(lambda: _sys_says(b.port, alice, "local/sensors/#"), 10, "$SYS never named the refusal")
            pub(b.port, "local/sensors/t1", "2", "-q", "1", *alice)  # no bridge subscription: not queued
            # The ACL fixed: SIGHUP subscribes again, and what is published now goes up.
            acl.write_text(devices)
            b.proc.send_signal(signal.SIGHUP)  # type: ignore[union-attr]
            b.wait_log(r"bridge up: subscribed local/sensors/# here again")
            pub(b.port, "local/sensors/t1", "3", "-q", "1", *alice)
            got = drain(cloud, until=arrived({"remote/sensors/t1": {3}}))
            assert [(t, p) for t, p, *_ in got] == [("remote/sensors/t1", b"3")]
            assert _sys_says(b.port, alice, "-")
            assert b.stop() == 0
        cloud.close()


def _sys_says(port: int, login: tuple[str, ...], refused: str) -> bool:
    return sub(port, "$SYS/broker/bridge/up/refused_subscriptions", 1, *login) == [
        f"$SYS/broker/bridge/up/refused_subscriptions {refused}"
    ]


def test_a_mosquitto_bridge_backlog_goes_up_after_the_move(tmp_path: Path) -> None:
    """Mosquitto's bridge, its upstream down, queues what is published for it (in its local
    context, "local.gw-a"); import-mosquitto-db puts that queue into Siskin's bridge session, and
    the first start sends every message up, in order."""
    mosquitto, upstream_port, port = mosquitto_tool("mosquitto"), free_port(), free_port()
    bridge = f"connection up\naddress 127.0.0.1:{upstream_port}\nremote_clientid gw-a\ncleansession false\n"
    conf = mosquitto_conf(tmp_path / "mosquitto", port, bridge + "topic sensors/# out 1 local/ remote/\n")
    n = 6
    with running([mosquitto, "-c", str(conf)], port, tmp_path / "mosquitto.log") as proc:
        for i in range(n):  # the upstream is not there: Mosquitto queues them for its bridge
            pub(port, f"local/sensors/t{i % 2}", str(i), "-q", "1")
        pub(port, "local/other", "not bridged", "-q", "1")
        stop(proc)
    converted = run_cli("convert-mosquitto-conf", str(conf), "-o", str(tmp_path / "siskin.toml"))
    assert converted.returncode == 0, converted.stderr
    b = BrokerProcess(tmp_path / "siskin", log_level="info")
    b.config_path.write_text((tmp_path / "siskin.toml").read_text())
    db = str(tmp_path / "mosquitto" / "mosquitto.db")
    # Without the [[bridge]] it belongs to: said, and not counted as imported.
    alone = run_cli("import-mosquitto-db", db, "--data-dir", str(tmp_path / "elsewhere"))
    assert alone.returncode == 0, alone.stderr
    assert "0 queued" in alone.stdout
    assert f"left out: session 'local.gw-a' and its {n} queued message(s)" in alone.stdout
    imported = run_cli("import-mosquitto-db", db, "--data-dir", str(b.workdir / "data"), "--config", str(b.config_path))
    assert imported.returncode == 0, imported.stderr
    assert f"{n} queued and 0 in-flight messages" in imported.stdout
    assert f"bridge up: {n} message(s) for its upstream" in imported.stdout and "left out" not in imported.stdout
    upstream = tmp_path / "upstream.conf"
    upstream.write_text(f"listener {upstream_port} 127.0.0.1\nallow_anonymous true\n")
    with running([mosquitto, "-c", str(upstream)], upstream_port, tmp_path / "upstream.log"):
        cloud = RawClient(upstream_port)
        cloud.connect("cloud")
        assert cloud.subscribe("remote/#", 1) == 1
        with b:
            b.wait_log(r"restored 1 sessions, 1 subscriptions, 6 queued messages")
            got = drain(cloud, until=arrived({"remote/sensors/t0": {0, 2, 4}, "remote/sensors/t1": {1, 3, 5}}))
            assert [(t, p) for t, p, *_ in got] == [(f"remote/sensors/t{i % 2}", b"%d" % i) for i in range(n)]
            b.wait_log(r"bridge up: connected to")
            assert b.stop() == 0
            # SIGTERM with a bridge: its local connection ends at once, no 5 s timeout.
            assert "did not close in time" not in b.log_text()
        cloud.close()

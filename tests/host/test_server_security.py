"""Users, anonymous access and the ACL on the real host server, over real
sockets with real clients: paho (username_pw_set, MQTT 3.1.1 and 5),
mosquitto_pub/mosquitto_sub (-u/-P), mosquitto_passwd's own file, raw
sockets; start-up refusals of bad files, the start-up log's decision, and
SIGHUP reloads. The core's side of each rule: tests/core/test_security.py.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require, tool_path
from tests.host.broker_proc import REPO_ROOT, BrokerProcess, Paho, RawClient, run_cli, wait_until

ACL = """\
# anonymous clients (none here: allow_anonymous is false)
topic read public/#

user alice
topic readwrite home/+
topic deny home/secret
topic read $SYS/broker/uptime

user bob
topic read home/#
topic write home/secret

pattern readwrite devices/%c/#
"""


def siskin_passwd(path: Path, user: str, password: str, *flags: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "cpython_host", "passwd", "--stdin", "--iterations", "1000", *flags, str(path), user],
        cwd=REPO_ROOT,
        input=password + "\n",
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert proc.returncode == 0, proc.stderr


def mosquitto_tool(name: str) -> str:
    path = tool_path(name)
    require(name, path, "apt-get install mosquitto mosquitto-clients")
    assert path is not None
    return path


def start_secured(work: Path) -> BrokerProcess:
    """alice (siskin passwd) and bob (mosquitto_passwd, $7$) with the ACL above."""
    passwd = work / "passwd"
    siskin_passwd(passwd, "alice", "wonderland", "-c")
    subprocess.run([mosquitto_tool("mosquitto_passwd"), "-b", str(passwd), "bob", "builder"], check=True, timeout=20)
    assert passwd.read_text().count("$7$101$") == 1  # mosquitto's line, unchanged
    (work / "acl").write_text(ACL)
    security = {"password_file": "passwd", "acl_file": "acl", "allow_anonymous": False}
    return BrokerProcess(work, limits={"sys_interval": 1}, security=security)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """The broker of the tests whose logins all succeed: a failed login would
    hold back the next ones from 127.0.0.1 (the per-address penalty)."""
    with start_secured(tmp_path_factory.mktemp("secured")) as b:
        yield b
        assert b.alive(), b.log_text()
        assert "Traceback" not in b.log_text(), b.log_text()


@pytest.fixture
def attacked(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker of its own for a test that fails logins."""
    with start_secured(tmp_path) as b:
        yield b
        assert b.alive(), b.log_text()


def test_startup_log_says_what_is_on(secured: BrokerProcess) -> None:
    secured.wait_log(
        r"security: users: 2 in the password file; ACL: \d+ rules, deny by default; anonymous clients: refused"
    )


def test_paho_login_good_and_bad(attacked: BrokerProcess) -> None:
    for user, password in (("alice", "wonderland"), ("bob", "builder")):
        ok = Paho(attacked.port, "paho-" + user, username=user, password=password).connect()
        ok.client.disconnect()
        ok.client.loop_stop()
    for user, password in (("alice", "wrong"), ("mallory", "wonderland"), ("bob", "wonderland")):
        bad = Paho(attacked.port, "paho-bad", username=user, password=password)
        with pytest.raises(AssertionError, match="Bad user name or password"):
            bad.connect()
        bad.client.loop_stop()


def test_raw_connack_codes_311(attacked: BrokerProcess) -> None:
    # [MQTT-3.2.2-4] (3.1.1) [MQTT-3.2.2-5] (3.1.1) refused: Session Present 0, then closed.
    c = RawClient(attacked.port)
    assert c.connect("raw-anon") == b"\x00\x05"  # anonymous: not authorised
    assert c.closed_within(5)
    c = RawClient(attacked.port)
    assert c.connect("raw-bad", username="bob", password=b"nope") == b"\x00\x04"
    assert c.closed_within(5)


def test_brute_force_at_line_rate_tries_few_passwords(attacked: BrokerProcess) -> None:
    secured = attacked
    before = 0
    started = time.monotonic()
    for i in range(40):
        c = RawClient(secured.port)
        assert c.connect(f"bf{i}", username="victim", password=b"guess%d" % i) == b"\x00\x04"
        c.close()
    elapsed = time.monotonic() - started
    text = wait_until(
        lambda: secured.log_text().count("user victim") >= before + 40 and secured.log_text(), 10, "40 refusals logged"
    )
    checked = text.count("bad user name or password (user victim") - before - text.count("no password checked for")
    # One check, then one per penalty (1, 2, 4 ... s) while the attack lasts.
    assert 1 <= checked <= 2 + int(elapsed).bit_length(), (checked, elapsed)
    assert "failed logins of this user name from this address, no password checked for" in text


def test_one_stale_password_does_not_lock_out_its_neighbours(attacked: BrokerProcess) -> None:
    """A device with a stale password (alice) retrying from 127.0.0.1, as mosquitto_pub in a
    loop: the other devices on that address (bob) keep logging in, every time."""
    tool = mosquitto_tool("mosquitto_pub")

    def login(user: str, password: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [tool, "-p", str(attacked.port), "-u", user, "-P", password, "-i", f"dev-{user}", "-t", "home/secret",
             "-m", "x", "-q", "1"],
            capture_output=True, text=True, timeout=20,
        )  # fmt: skip

    for _ in range(20):
        stale = login("alice", "the-old-one")
        assert stale.returncode != 0 and "bad user name or password" in stale.stderr, stale
        ok = login("bob", "builder")
        assert ok.returncode == 0, ok.stderr
    text = attacked.log_text()
    assert "no password checked" in text  # the stale one is held back (its name, at its address) ...
    assert "(user bob" not in text  # ... and nobody else is refused or blamed
    # Its hold over, alice with her password gets in again.
    wait_until(lambda: login("alice", "wonderland").returncode == 0, 70, "alice after her hold")


def test_mosquitto_clients_with_acl(secured: BrokerProcess) -> None:
    pub = mosquitto_tool("mosquitto_pub")
    sub = mosquitto_tool("mosquitto_sub")
    base = ["-h", "127.0.0.1", "-p", str(secured.port), "-V", "mqttv311"]
    bob = ["-u", "bob", "-P", "builder", "-i", "ms-bob", "-t", "home/#", "-v", "-C", "2", "-W", "60", "-d"]
    # stdbuf -oL: its lines as they are printed, not when it exits (a pipe is block-buffered).
    listen = subprocess.Popen(
        ["stdbuf", "-oL", sub, *base, *bob],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # Its debug lines (-d) say when the SUBACK came: from then on it gets what is published.
    assert listen.stdout is not None
    while "received SUBACK" not in (line := listen.stdout.readline()):
        assert line, "mosquitto_sub ended before its SUBACK"
    alice = [*base, "-u", "alice", "-P", "wonderland"]
    # [MQTT-3.3.5-2] (3.1.1) an unauthorised PUBLISH is acknowledged (QoS 1) and not delivered.
    for topic, text in (
        ("home/secret", "from alice"),
        ("home/kitchen", "kettle"),
        ("garden/x", "no"),
        ("home/secret", "X"),
    ):
        who = alice if text != "X" else [*base, "-u", "bob", "-P", "builder"]
        run = subprocess.run(
            [pub, *who, "-q", "1", "-t", topic, "-m", text], capture_output=True, text=True, timeout=10
        )
        assert run.returncode == 0, run.stderr
    out, err = listen.communicate(timeout=70)
    messages = [line for line in out.splitlines() if not line.startswith(("Client ms-bob ", "Subscribed "))]
    assert messages == ["home/kitchen kettle", "home/secret X"], out + err
    # A subscription the ACL refuses: SUBACK 0x80, which mosquitto_sub reports.
    run = subprocess.run([sub, *alice, "-t", "#", "-E"], capture_output=True, text=True, timeout=10)
    assert "denied" in (run.stdout + run.stderr).lower(), run


def test_paho_v5_reason_codes(secured: BrokerProcess) -> None:
    c = Paho(secured.port, "dev1", username="alice", password="wonderland", protocol=5).connect()
    reasons = c.subscribe("home/+")  # home/secret is denied: not every topic readable
    assert [r.value for r in reasons] == [0x87]
    assert [r.value for r in c.subscribe("$share/g/devices/dev1/#", 1)] == [1]
    assert [r.value for r in c.subscribe("$share/g/devices/+/#", 1)] == [0x87]
    assert [r.value for r in c.subscribe("$SYS/#")] == [0x87]
    assert [r.value for r in c.subscribe("$SYS/broker/uptime")] == [0]
    got: list[int] = []
    c.client.on_publish = lambda client, userdata, mid, rc, props: got.append(rc.value)
    c.client.publish("home/secret", b"x", qos=1).wait_for_publish(5)
    c.client.publish("$SYS/broker/uptime", b"0", qos=1).wait_for_publish(5)
    c.client.publish("devices/dev1/state", b"on", qos=1).wait_for_publish(5)
    assert got == [0x87, 0x87, 0], got
    topics = set()
    while len(topics) < 2:
        topics.add(c.messages.get(timeout=5).topic)
    # Two more uptimes: a whole $SYS round (sys_interval 1) went out between
    # them, and of all its topics only uptime came.
    uptimes = 0
    while uptimes < 2:
        topic = c.messages.get(timeout=10).topic
        topics.add(topic)
        uptimes += topic == "$SYS/broker/uptime"
    assert topics == {"$SYS/broker/uptime", "devices/dev1/state"}, topics
    c.client.disconnect()
    c.client.loop_stop()
    # The will is judged like a PUBLISH: CONNACK 0x87.
    w = Paho(secured.port, "dev2", username="alice", password="wonderland", protocol=5)
    w.client.will_set("home/secret", b"bye", qos=1)
    with pytest.raises(AssertionError, match="Not authorized"):
        w.connect()
    w.client.loop_stop()


def test_another_users_client_id_is_refused(secured: BrokerProcess) -> None:
    bob = Paho(secured.port, "bobs-sensor", clean=False, username="bob", password="builder").connect()
    try:
        assert [r.value for r in bob.subscribe("home/#", 1)] == [1]
        for protocol in (4, 5):  # 3.1.1 CONNACK 0x05, v5 0x87 [MQTT-3.2.2-5] [MQTT-3.2.2-7]
            thief = Paho(secured.port, "bobs-sensor", username="alice", password="wonderland", protocol=protocol)
            with pytest.raises(AssertionError, match="Not authorized"):
                thief.connect()
            thief.client.loop_stop()
        secured.wait_log(
            r"client id bobs-sensor from 127\.0\.0\.1:\d+ \(user alice\) refused: its session belongs to user bob"
        )
        # bob was neither disconnected nor robbed of his subscription.
        assert not bob.disconnected.is_set()
        alice = Paho(secured.port, "alice-home", username="alice", password="wonderland").connect()
        alice.publish("home/kitchen", b"still bob's", 1)
        assert bob.get().payload == b"still bob's"
        alice.client.disconnect()
        alice.client.loop_stop()
    finally:
        bob.client.disconnect()
        bob.client.loop_stop()
    # Kept while bob is away: still his.
    thief = Paho(secured.port, "bobs-sensor", username="alice", password="wonderland")
    with pytest.raises(AssertionError, match="Not authorized"):
        thief.connect()
    thief.client.loop_stop()
    back = Paho(secured.port, "bobs-sensor", clean=False, username="bob", password="builder").connect()
    assert back.session_present
    back.client.disconnect()
    back.client.loop_stop()


def test_log_lines_cannot_be_forged(attacked: BrokerProcess) -> None:
    secured = attacked
    c = RawClient(secured.port)
    c.connect("x\nERROR siskin.core: forged", username="bob\r\x1b[2J", password=b"s3cr3t-pw")
    c.close()
    text = secured.wait_log(r"x\\nERROR siskin.core: forged").string
    assert "\nERROR siskin.core: forged" not in text
    assert "bob\\r\\x1b[2J" in text
    assert "s3cr3t-pw" not in text


def test_sighup_reloads_and_rechecks(tmp_path: Path) -> None:
    (tmp_path / "acl").write_text("topic readwrite #\n")
    with BrokerProcess(tmp_path, security={"acl_file": "acl"}) as b:
        c = RawClient(b.port)
        assert c.connect("anon") == b"\x00\x00"  # loopback, nothing set: anonymous allowed
        assert c.subscribe("a/#", 0) == 0
        (tmp_path / "acl").write_text("topic read b/#\n")
        b.proc.send_signal(signal.SIGHUP)  # type: ignore[union-attr]
        b.wait_log(r"SIGHUP: security reloaded")
        b.wait_log(r"anon: subscription a/# removed")
        assert c.subscribe("a/#", 0, packet_id=2) == 0x80
        # A bad file on reload: logged, the rules in force stay.
        (tmp_path / "acl").write_text("topic read b/#\nallow everything\n")
        b.proc.send_signal(signal.SIGHUP)  # type: ignore[union-attr]
        b.wait_log(r"acl:2: unknown keyword 'allow'.*keeping the users and rules in force")
        assert c.subscribe("b/#", 0, packet_id=3) == 0
        # Users added by a reload: new anonymous clients are refused, the
        # connected one stays; the new user logs in.
        siskin_passwd(tmp_path / "passwd", "dora", "explorer", "-c")
        (tmp_path / "acl").write_text("topic read b/#\nuser dora\ntopic read d/#\n")
        b.config_path.write_text(b.config_path.read_text() + 'password_file = "passwd"\n')
        b.proc.send_signal(signal.SIGHUP)  # type: ignore[union-attr]
        b.wait_log(r"SIGHUP: security reloaded: users: 1 in the password file")
        assert RawClient(b.port).connect("anon2") == b"\x00\x05"
        dora = RawClient(b.port)
        assert dora.connect("dora", username="dora", password=b"explorer") == b"\x00\x00"
        assert dora.subscribe("d/#", 1) == 1
        assert c.subscribe("b/x", 0, packet_id=4) == 0
        assert b.alive()


def test_non_loopback_listener_refuses_anonymous(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path, extra_args=("--host", "0.0.0.0")) as b:
        b.wait_log(r"not loopback-only\) without users: anonymous clients are refused")
        c = RawClient(b.port)
        assert c.connect("anon") == b"\x00\x05"
    with BrokerProcess(tmp_path / "open", extra_args=("--host", "0.0.0.0"), security={"allow_anonymous": True}) as b:
        assert RawClient(b.port).connect("anon") == b"\x00\x00"


@pytest.mark.parametrize(
    ("name", "text", "words"),
    [
        ("passwd", "alice:secret\n", "passwd:1: user 'alice': not a hashed password"),
        ("passwd", "# ok\n\nbob\n", "passwd:3: wants USER:HASH"),
        ("acl", "topic read a\nuser bob\nallow all\n", "acl:3: unknown keyword 'allow'"),
        ("acl", "topic everything a\n", "acl:1: unknown access 'everything'"),
    ],
)
def test_bad_files_stop_startup(tmp_path: Path, name: str, text: str, words: str) -> None:
    (tmp_path / name).write_text(text)
    key = "password_file" if name == "passwd" else "acl_file"
    cfg = tmp_path / "site.toml"
    cfg.write_text(f'[security]\n{key} = "{name}"\n')
    proc = run_cli("--config", str(cfg), "--port", "0")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"siskin: config error: {tmp_path}/{words}"), proc.stderr


def test_passwd_command(tmp_path: Path) -> None:
    from common.broker.users import Users

    f = tmp_path / "pw"
    siskin_passwd(f, "carol", "one", "-c")
    f.write_text("# kept\n" + f.read_text())
    siskin_passwd(f, "dave", "two")
    siskin_passwd(f, "carol", "three")  # changed in place
    assert f.stat().st_mode & 0o777 == 0o600
    users = Users.parse(f.read_text(), str(f))
    assert users.check("carol", b"three") and not users.check("carol", b"one")
    assert users.check("dave", b"two")
    assert f.read_text().splitlines()[0] == "# kept"
    assert f.read_text().splitlines()[1].startswith("carol:$pbkdf2-sha256$1000$")
    proc = run_cli("passwd", "-D", str(f), "carol")
    assert proc.returncode == 0, proc.stderr
    assert "carol" not in f.read_text()
    proc = run_cli("passwd", "-D", str(f), "carol")
    assert proc.returncode == 2 and "not in" in proc.stderr
    proc = run_cli("passwd", str(tmp_path / "missing"), "x")
    assert proc.returncode == 2 and "use -c to create it" in proc.stderr
    help_text = run_cli("passwd", "--help").stdout
    assert "mosquitto_passwd" in help_text and "examples:" in help_text
    # mosquitto's broker-side tool reads what mosquitto_passwd writes; we read it too.
    subprocess.run([mosquitto_tool("mosquitto_passwd"), "-b", str(f), "erin", "four"], check=True, timeout=20)
    assert Users.parse(f.read_text(), str(f)).check("erin", b"four")


def test_passwd_keeps_owner_group_and_mode(tmp_path: Path) -> None:
    """docs/install.md gives the file to the group siskin (chgrp, chmod 640) so the service can
    read it: a later `siskin passwd` must not take that away (it used to write root:root 0600)."""
    import os

    f = tmp_path / "pw"
    siskin_passwd(f, "carol", "one", "-c")
    assert f.stat().st_mode & 0o777 == 0o600  # a new file: only its owner reads it
    if os.geteuid() == 0:
        uid, gid = 1, 1  # daemon:daemon, anyone but root proves the owner is kept
    else:
        others = [g for g in os.getgroups() if g != os.getegid()]
        if not others:
            pytest.skip("needs root or a second group to hand the file to")
        uid, gid = os.geteuid(), others[0]
    os.chown(f, uid, gid)
    os.chmod(f, 0o640)
    siskin_passwd(f, "dave", "two")  # add
    siskin_passwd(f, "carol", "three")  # change
    proc = run_cli("passwd", "-D", str(f), "dave")  # delete
    assert proc.returncode == 0, proc.stderr
    st = f.stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (uid, gid, 0o640)
    assert [p.name for p in tmp_path.iterdir()] == ["pw"]  # no temporary file left


def test_toml_rules_and_security_key_errors(tmp_path: Path) -> None:
    from cpython_host.config import ConfigError, load_config, load_security

    cfg = tmp_path / "site.toml"
    cfg.write_text(
        "[security]\nallow_anonymous = true\nacl = [\n"
        '  { topic = "public/#", access = "read" },\n'
        '  { user = "alice", topic = "home/#" },\n'
        '  { pattern = "devices/%c/#", access = "write" },\n]\n'
    )
    users, acl, allow, _ = load_security(load_config(str(cfg)))
    assert users is None and allow is True
    assert acl.for_client(None, "x").may_subscribe("public/#")
    assert acl.for_client("alice", "d").can_write("home/a") and acl.for_client("alice", "d").can_write("devices/d/t")
    for text, words in (
        (
            "[security]\nallow_anonymos = true\n",
            "[security]: unknown key 'allow_anonymos'; did you mean 'allow_anonymous'?",
        ),
        ("[security]\nallow_anonymous = 1\n", "[security]: allow_anonymous = 1: wants true or false"),
        ('[security]\nacl = "topic a"\n', "[security]: acl wants a list of tables"),
        ('[security]\nacl = [{ topic = "a", access = "rw" }]\n', "[security] acl rule 1: access = 'rw'"),
        ('[security]\npassword_file = "nope"\n', "nope: cannot read the password_file"),
    ):
        cfg.write_text(text)
        with pytest.raises(ConfigError) as e:
            load_security(load_config(str(cfg)))
        assert words in str(e.value), str(e.value)


def test_certificate_identity_feeds_the_acl(tmp_path: Path) -> None:
    # The user name a client claims in CONNECT does not matter on a mutual TLS
    # listener with use_identity_as_username: its certificate's CN does.
    from tests.host.test_server_tls import Pki, TlsRawClient, tls_client

    pki = Pki(tmp_path)
    (tmp_path / "acl").write_text("user alice\ntopic readwrite alice/#\nuser bob\ntopic readwrite bob/#\n")
    mutual = pki.listener(cafile=pki.ca_file, require_certificate=True, use_identity_as_username=True)
    b = BrokerProcess(
        tmp_path / "b",
        listeners=[{"port": 0}, mutual],
        security={"acl_file": str(tmp_path / "acl"), "allow_anonymous": False},
    )
    with b:
        ports = wait_until(lambda: len(b.ports()) == 2 and b.ports(), 5, b.log_text)
        c = TlsRawClient(tls_client(ports[1], pki.client_context(pki.alice)))
        assert c.connect("cert-client", username="bob", password=b"anything") == b"\x00\x00"
        assert c.subscribe("alice/#", 1) == 1
        assert c.subscribe("bob/#", 0, packet_id=2) == 0x80
        assert RawClient(ports[0]).connect("plain-anon") == b"\x00\x05"  # no identity on the plain listener

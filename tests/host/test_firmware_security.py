"""Users, ACL and the anonymous rule on the firmware (firmware/main.py under
the MicroPython unix port), over real sockets: the device config names the
files, the board refuses a bad one at start, logs its decision, and answers
as the host does (tests/host/test_server_security.py)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from common.broker.users import format_hash
from tests.host.broker_proc import RawClient
from tests.host.test_server_security import ACL
from tests.host.upy_broker_proc import UpyBrokerProcess, micropython


def passwd_line(user: str, password: str) -> str:
    salt = b"board-salt-1"
    return f"{user}:{format_hash(200, salt, hashlib.pbkdf2_hmac('sha256', password.encode(), salt, 200))}\n"


def test_board_users_and_acl(tmp_path: Path) -> None:
    micropython()
    (tmp_path / "passwd").write_text(passwd_line("alice", "wonderland") + passwd_line("bob", "builder"))
    (tmp_path / "acl").write_text(ACL)
    device = {"password_file": str(tmp_path / "passwd"), "acl_file": str(tmp_path / "acl")}
    with UpyBrokerProcess(tmp_path, device=device) as b:
        b.wait_log(
            r"security: users: 2 in the password file; ACL: \d+ rules, deny by default; anonymous clients: refused"
        )
        bob = RawClient(b.port)
        assert bob.connect("bob", username="bob", password=b"builder") == b"\x00\x00"
        assert bob.subscribe("home/#", 1) == 1
        alice = RawClient(b.port)
        assert alice.connect("alice", username="alice", password=b"wonderland") == b"\x00\x00"
        assert alice.subscribe("#", 0) == 0x80
        assert alice.subscribe("$SYS/broker/uptime", 0, packet_id=2) == 0
        for kwargs, code in (({}, b"\x00\x05"), ({"username": "alice", "password": b"guess"}, b"\x00\x04")):
            c = RawClient(b.port)
            assert c.connect("x", **kwargs) == code
            assert c.closed_within(5)  # (the board has few sockets: wait for this one to go)
            c.close()
        b.wait_log(r"bad user name or password \(user alice, client id x, from 127\.0\.0\.1:\d+\)")
        assert b.alive()


def test_board_refuses_bad_file_and_anonymous_on_wifi(tmp_path: Path) -> None:
    micropython()
    (tmp_path / "passwd").write_text("carol:$7$101$c2FsdA==$aGFzaGhhc2hoYXNoaGFzaA==\n")
    b = UpyBrokerProcess(tmp_path, device={"password_file": str(tmp_path / "passwd")})
    try:
        b.start()
    except RuntimeError as e:
        assert "passwd:1: user 'carol': this port's hashlib has no sha512" in str(e), str(e)
    else:
        b.kill()
        raise AssertionError("a $7$ line started on MicroPython")
    with UpyBrokerProcess(tmp_path / "wifi", device={"host": "0.0.0.0"}) as b:
        b.wait_log(r"not loopback-only\) without users: anonymous clients are refused")
        assert RawClient(b.port).connect("anon") == b"\x00\x05"


def test_board_jwt_hs256_logins(tmp_path: Path) -> None:
    # The device config's "jwt" object (firmware/boardcfg.py load_jwt): the
    # core verifies HS256 with the port's hashlib; exp, aud and the signature
    # are checked, the token's sub is the user, and its ACL claim applies.
    from tests.host.test_jwt_login import SECRET, claims, token

    micropython()
    (tmp_path / "secret").write_bytes(SECRET + b"\n")
    device = {
        "allow_anonymous": False,
        "jwt": {"secret_file": "secret", "audience": "siskin", "algorithms": ["HS256"]},
    }
    acl = {"acl": {"publish": ["dev/%u/#"], "subscribe": ["dev/%u/#"]}}
    with UpyBrokerProcess(tmp_path, device=device) as b:
        alice = RawClient(b.port)
        assert alice.connect("a1", username="alice", password=token(claims(**acl)).encode()) == b"\x00\x00"
        assert alice.subscribe("dev/alice/#", 1) == 1
        assert alice.subscribe("dev/bob/#", 1, packet_id=2) == 0x80  # outside the token's ACL claim
        refused = (
            token(claims(ttl=-60)),  # expired
            token(claims(aud="elsewhere")),  # another audience
            token(claims(), key=b"not-the-secret-not-the-secret-000"),  # forged signature
            token(claims(), alg="HS512"),  # an algorithm narrowed away
            token(claims(), alg="none"),  # alg none
        )
        for bad in refused:
            c = RawClient(b.port)
            assert c.connect("x", username="alice", password=bad.encode()) == b"\x00\x04", bad
            assert c.closed_within(5)
            c.close()
        b.wait_log(r"bad token: expired \(exp \d+, now \d+, leeway 0 s\) \(client id x, from 127\.0\.0\.1")
        b.wait_log(r"bad token: bad signature \(client id x")
        assert b.alive()
        alice.close()


def test_board_refuses_a_short_jwt_secret(tmp_path: Path) -> None:
    micropython()
    (tmp_path / "secret").write_bytes(b"short\n")
    b = UpyBrokerProcess(tmp_path, device={"jwt": {"secret_file": "secret"}})
    try:
        b.start()
    except RuntimeError as e:
        assert "an HMAC secret of 5 bytes; at least 32 wanted" in str(e), str(e)
    else:
        b.kill()
        raise AssertionError("a 5-byte JWT secret started on MicroPython")

"""JWT logins on the real host server ([security.jwt]) with real clients:
paho 3.1.1 and 5.0, mosquitto_pub; tokens minted here with the standard
library's hmac and the `cryptography` package (independent of the core's
code). Each attack of docs/security.md "JWT logins", the ACL from claims
with the file ACL, exp enforced during the session (v5 DISCONNECT 0xA0,
3.1.1 close), the host's RS/ES/EdDSA keys, and start-up refusals of bad keys.
The core's side: tests/core/test_jwt.py."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from common.broker.settings import ConfigError
from cpython_host.auth.jwt_keys import public_key, secret_key
from tests.host.broker_proc import BrokerProcess, Paho, RawClient, run_cli, wait_until
from tests.host.test_server_security import mosquitto_tool

SECRET = b"0123456789abcdef0123456789abcdef-hs"
ACL = "user alice\ntopic read shared/#\ntopic deny shared/secret\n"


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def token(claims: dict[str, Any], alg: str = "HS256", key: Any = SECRET, header: dict[str, Any] | None = None) -> str:
    signing_input = (
        b64url(json.dumps(header or {"alg": alg, "typ": "JWT"}).encode()) + "." + b64url(json.dumps(claims).encode())
    ).encode()
    if alg.startswith("HS"):
        sig = hmac.new(key, signing_input, getattr(hashlib, "sha" + alg[2:])).digest()
    elif alg.startswith("RS"):
        sig = key.sign(signing_input, padding.PKCS1v15(), hashes.SHA256())
    elif alg == "ES256":
        r, s = decode_dss_signature(key.sign(signing_input, ec.ECDSA(hashes.SHA256())))
        sig = r.to_bytes(32, "big") + s.to_bytes(32, "big")
    elif alg == "EdDSA":
        sig = key.sign(signing_input)
    else:
        sig = b""
    return signing_input.decode() + "." + b64url(sig)


def pem(public: Any) -> bytes:
    return public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def claims(user: str = "alice", ttl: float = 300, **more: Any) -> dict[str, Any]:
    return {"sub": user, "exp": int(time.time() + ttl), "iss": "https://auth.test", "aud": "siskin", **more}


def start(work: Path, **jwt: Any) -> BrokerProcess:
    (work / "secret").write_bytes(SECRET + b"\n")
    (work / "rsa.pem").write_bytes(pem(RSA_KEY.public_key()))
    (work / "acl").write_text(ACL)
    b = BrokerProcess(work, security={"acl_file": "acl", "allow_anonymous": False})
    options = {
        "secret_file": "secret",
        "public_key_file": "rsa.pem",
        "issuer": "https://auth.test",
        "audience": "siskin",
        **jwt,
    }
    with b.config_path.open("a") as f:
        f.write("[security.jwt]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in options.items()))
    return b


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with start(tmp_path_factory.mktemp("jwt")) as b:
        yield b
        assert b.alive(), b.log_text()
        assert "Traceback" not in b.log_text(), b.log_text()


def refused_311(b: BrokerProcess, tok: str, why: str, user: str = "alice") -> None:
    c = RawClient(b.port)
    assert c.connect("atk", username=user, password=tok.encode()) == b"\x00\x04"  # [MQTT-3.2.2-5]
    assert c.closed_within(5)
    b.wait_log("bad token: " + why)


def test_paho_v5_and_311_log_in_with_tokens(broker: BrokerProcess) -> None:
    v5 = Paho(broker.port, "p5", username=None, protocol=5)
    v5.client.username_pw_set("alice", token(claims()))
    v5.connect()
    v311 = Paho(broker.port, "p4", username="alice", password=token(claims(), "RS256", RSA_KEY))
    v311.connect()
    v5.close()
    v311.close()
    broker.wait_log(r"p4 connected \(level 4")


def attacks() -> list[tuple[str, str, str]]:
    """(name, token, why refused): made when the test runs, not when it is
    collected, so that a time claim (nbf 120 s ahead) still means it then."""
    return [
        ("alg none", token(claims(), "none", header={"alg": "none"}), "no key for alg none"),
        (
            "HS256 under the RSA public key as the secret",
            token(claims(), "HS256", pem(RSA_KEY.public_key())),
            "bad signature",
        ),
        ("expired", token(claims(ttl=-5)), "expired"),
        ("not yet valid", token(claims(nbf=int(time.time()) + 120)), "not valid yet"),
        ("another audience", token(claims(aud="other")), "audience is not siskin"),
        ("another issuer", token(claims(iss="https://evil.test")), "issuer is not https://auth.test"),
        (
            "tampered signature",
            token(claims())[:-3] + ("AAA" if not token(claims()).endswith("AAA") else "BBB"),
            "bad signature",
        ),
        ("malformed base64", "eyJhbGciOiJIUzI1NiJ9.!!!.sig", "malformed base64url"),
        (
            "malformed JSON",
            b64url(b'{"alg":"HS256"') + "." + b64url(b"{}") + ".c2ln",
            "header or payload is not a JSON object",
        ),
        ("oversized", token(claims(pad="x" * 6000)), r"token of \d+ bytes over max_token_bytes 4096"),
    ]


ATTACKS = [name for name, _, _ in attacks()]


@pytest.mark.parametrize("name", ATTACKS)
def test_attacks_are_refused(broker: BrokerProcess, name: str) -> None:
    _, tok, why = next(a for a in attacks() if a[0] == name)
    refused_311(broker, tok, why)


def test_key_confusion_with_only_a_public_key(tmp_path: Path) -> None:
    # Without a secret, an HS token signed with the public key finds no key at all.
    with _public_only(tmp_path) as b:
        refused_311(b, token(claims(), "HS256", pem(RSA_KEY.public_key())), "no key for alg HS256")
        ok = RawClient(b.port)
        assert ok.connect("ok", username="alice", password=token(claims(), "RS256", RSA_KEY).encode()) == b"\x00\x00"


def _public_only(work: Path) -> BrokerProcess:
    (work / "rsa.pem").write_bytes(pem(RSA_KEY.public_key()))
    b = BrokerProcess(work, security={"allow_anonymous": False})
    with b.config_path.open("a") as f:
        f.write('[security.jwt]\npublic_key_file = "rsa.pem"\n')
    return b


def test_acl_from_claims_with_the_file_acl(broker: BrokerProcess) -> None:
    pub = mosquitto_tool("mosquitto_pub")
    acl = {"publish": ["devices/%c/out", "shared/%u"], "subscribe": ["devices/+/out"]}
    sub = Paho(broker.port, "watch", protocol=5)
    sub.client.username_pw_set("alice", token(claims(acl=acl)))
    sub.connect()
    assert [r.value for r in sub.subscribe("devices/+/out", 1)] == [1]
    assert [r.value for r in sub.subscribe("devices/#", 1)] == [0x87]  # wider than the claim
    assert [r.value for r in sub.subscribe("shared/#", 1)] == [0x87]  # the file's deny shared/secret
    assert [r.value for r in sub.subscribe("shared/x", 1)] == [1]  # the file's read rule
    tok = token(claims(acl=acl))
    for topic, payload in (("devices/dev9/out", "mine"), ("devices/other/out", "not mine"), ("shared/secret", "no")):
        subprocess.run(
            [
                pub,
                "-p",
                str(broker.port),
                "-i",
                "dev9",
                "-u",
                "alice",
                "-P",
                tok,
                "-q",
                "1",
                "-t",
                topic,
                "-m",
                payload,
            ],
            check=True,
            timeout=20,
        )
    msg = sub.get()
    assert (msg.topic, msg.payload) == ("devices/dev9/out", b"mine")
    sub.get_nothing(0.5)
    broker.wait_log(r"dev9: PUBLISH to devices/other/out refused by the ACL")
    sub.close()


def _disconnect_watch(p: Paho) -> tuple[threading.Event, list[Any]]:
    got: list[Any] = []
    done = threading.Event()

    def on_disconnect(client: Any, userdata: Any, flags: Any, rc: Any, props: Any) -> None:
        got.append((time.time(), rc))
        done.set()

    p.client.on_disconnect = on_disconnect
    return done, got


def test_exp_enforced_during_the_session(broker: BrokerProcess) -> None:
    exp = int(time.time()) + 3
    v5 = Paho(broker.port, "short5", protocol=5, keep_alive=60)
    v5.client.username_pw_set("alice", token({**claims(), "exp": exp}))
    done5, got5 = _disconnect_watch(v5)
    v311 = RawClient(broker.port)
    assert v311.connect("short4", username="alice", password=token({**claims(), "exp": exp}).encode()) == b"\x00\x00"
    keeps = Paho(broker.port, "long5", protocol=5)
    keeps.client.username_pw_set("alice", token(claims(ttl=600)))
    keeps.connect()
    v5.connect()
    assert done5.wait(10), "no DISCONNECT after the token expired"
    at, rc = got5[0]
    assert rc.value == 0xA0, rc  # Maximum connect time
    assert exp <= at < exp + 1.0, at - exp  # the bound: within 1 s of expiry
    assert v311.closed_within(5)  # 3.1.1: closed, no packet
    broker.wait_log(rf"closing short4 \(user alice\): its token expired at {exp}; sent no code")
    broker.wait_log(rf"closing short5 \(user alice\): its token expired at {exp}; sent DISCONNECT reason 0xa0")
    assert keeps.client.is_connected()
    keeps.close()
    v5.client.loop_stop()


def test_host_keys(tmp_path: Path) -> None:
    ec_key = ec.generate_private_key(ec.SECP256R1())
    ed_key = ed25519.Ed25519PrivateKey.generate()
    for alg, priv in (("RS256", RSA_KEY), ("ES256", ec_key), ("EdDSA", ed_key)):
        path = tmp_path / f"{alg}.pem"
        path.write_bytes(pem(priv.public_key()))
        key = public_key(path, None)
        assert key.algorithms in (["RS256", "RS384", "RS512"], ["ES256"], ["EdDSA"])
        good = token({"a": 1}, alg, priv)
        head, body, s = good.split(".")
        sig = base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
        assert key.verify(alg, (head + "." + body).encode(), sig)
        assert not key.verify(alg, (head + "." + body + "x").encode(), sig)
        assert not key.verify("HS256", (head + "." + body).encode(), sig)  # bound to its type
    with pytest.raises(ConfigError, match="at least 32 wanted"):
        (tmp_path / "short").write_bytes(b"short\n")
        secret_key(tmp_path / "short", None)
    with pytest.raises(ConfigError, match="a PEM key is not an HMAC secret"):
        secret_key(tmp_path / "RS256.pem", None)
    with pytest.raises(ConfigError, match="none of algorithms"):
        public_key(tmp_path / "ES256.pem", ["RS256"])


def test_bad_jwt_config_stops_startup(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path, security={"allow_anonymous": False})
    with b.config_path.open("a") as f:
        f.write('[security.jwt]\nsecret_file = "missing"\n')
    proc = run_cli("--config", str(b.config_path))
    assert proc.returncode == 2
    assert "cannot read the JWT key" in proc.stderr
    with b.config_path.open("a") as f:
        f.write("leewy = 5\n")
    proc = run_cli("--config", str(b.config_path))
    assert proc.returncode == 2 and "[security.jwt]: unknown key 'leewy'" in proc.stderr, proc.stderr


# ---------------------------------------------------------------- JWKS


class JwksServer:
    """A key set on loopback (the standard library's http.server in a thread)."""

    def __init__(self, keys: list[dict[str, Any]]) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.body = json.dumps({"keys": keys}).encode()
        self.fetches = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                outer.fetches += 1
                self.send_response(200)
                self.send_header("Content-Length", str(len(outer.body)))
                self.end_headers()
                self.wfile.write(outer.body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/jwks.json"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def serve(self, keys: list[dict[str, Any]]) -> None:
        self.body = json.dumps({"keys": keys}).encode()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def jwk_rsa(kid: str, key: Any, **more: Any) -> dict[str, Any]:
    n = key.public_key().public_numbers()
    return {
        "kty": "RSA",
        "kid": kid,
        "n": b64url(n.n.to_bytes(256, "big")),
        "e": b64url(n.e.to_bytes(3, "big")),
        **more,
    }


def jwk_ec(kid: str, key: Any) -> dict[str, Any]:
    n = key.public_key().public_numbers()
    return {
        "kty": "EC",
        "crv": "P-256",
        "kid": kid,
        "x": b64url(n.x.to_bytes(32, "big")),
        "y": b64url(n.y.to_bytes(32, "big")),
    }


def jwks_broker(work: Path, url: str) -> BrokerProcess:
    b = BrokerProcess(work, security={"allow_anonymous": False})
    with b.config_path.open("a") as f:
        f.write(f'[security.jwt]\njwks_url = "{url}"\njwks_refresh = 10\n')
    return b


def signed(kid: str, alg: str, key: Any) -> str:
    return token(claims(), alg, key, header={"alg": alg, "kid": kid})


def connack_for(b: BrokerProcess, tok: str) -> bytes:
    c = RawClient(b.port)
    try:
        return c.connect("jwks", username="alice", password=tok.encode())
    finally:
        c.close()


def test_jwks_keys_and_their_rotation(tmp_path: Path) -> None:
    k1 = RSA_KEY
    k2 = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    kec = ec.generate_private_key(ec.SECP256R1())
    server = JwksServer([jwk_rsa("k1", k1), jwk_ec("kec", kec)])
    try:
        with jwks_broker(tmp_path, server.url) as b:
            b.wait_log(r"JWKS http://127\.0\.0\.1:\d+/jwks\.json: 2 key\(s\) \(kid k1, kec\)")
            assert connack_for(b, signed("k1", "RS256", k1)) == b"\x00\x00"
            assert connack_for(b, signed("kec", "ES256", kec)) == b"\x00\x00"
            # The issuer rotates to k2: a token naming it makes the broker fetch
            # again (at most once per 10 s); refused until the new set is in.
            server.serve([jwk_rsa("k2", k2)])
            new = signed("k2", "RS256", k2)
            wait_until(lambda: connack_for(b, new) == b"\x00\x00", 30, "the rotated key taken")
            b.wait_log(r"bad token: no key for alg RS256 and kid k2")
            b.wait_log(r"JWKS http://127\.0\.0\.1:\d+/jwks\.json: 1 key\(s\) \(kid k2\)")
            assert connack_for(b, signed("k1", "RS256", k1)) == b"\x00\x04"  # k1 is gone
            assert "Traceback" not in b.log_text()
    finally:
        server.stop()


def test_a_forged_key_set_cannot_add_an_hmac_secret(tmp_path: Path) -> None:
    secret = b"an attacker's secret of 32 bytes!!"
    forged = [
        {"kty": "oct", "kid": "evil", "k": b64url(secret)},  # a symmetric key from a URL: never
        jwk_rsa("confused", RSA_KEY, alg="HS256"),  # an RSA key "for HS256": never
        {"kty": "RSA", "kid": "broken", "n": "!!", "e": "AQAB"},
        jwk_rsa("ok", RSA_KEY, use="enc"),  # not for signatures
    ]
    server = JwksServer(forged)
    try:
        with jwks_broker(tmp_path, server.url) as b:
            b.wait_log(r"JWKS http://127\.0\.0\.1:\d+/jwks\.json: 0 key\(s\)")
            for kid, why in (
                ("evil", "kty 'oct'"),
                ("confused", "none of algorithms \\['HS256'\\]"),
                ("broken", "unreadable"),
                ("ok", "use 'enc'"),
            ):
                b.wait_log(rf"key left out: JWK '{kid}': .*{why}")
            assert (
                connack_for(b, token(claims(), "HS256", secret, header={"alg": "HS256", "kid": "evil"})) == b"\x00\x04"
            )
            assert (
                connack_for(
                    b, token(claims(), "HS256", pem(RSA_KEY.public_key()), header={"alg": "HS256", "kid": "confused"})
                )
                == b"\x00\x04"
            )
            assert connack_for(b, signed("confused", "RS256", RSA_KEY)) == b"\x00\x04"
    finally:
        server.stop()


def test_key_set_away_at_start(tmp_path: Path) -> None:
    server = JwksServer([])
    url = server.url
    server.stop()  # gone: the broker starts without those keys, and says so
    with jwks_broker(tmp_path, url) as b:
        b.wait_log(r"JWKS http://127\.0\.0\.1:\d+/jwks\.json: URLError: .*; keeping the 0 key\(s\) in force")
        assert connack_for(b, signed("k1", "RS256", RSA_KEY)) == b"\x00\x04"

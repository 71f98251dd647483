# JWT logins in the core, on both interpreters: the token codec and its HMAC
# (RFC 7515's own example as the golden vector), each attack on the login
# (alg none, key confusion, expired, not yet valid, wrong audience and
# issuer, a tampered signature, malformed base64/JSON, an oversized token),
# the ACL from claims combined with the file ACL, and exp enforced during
# the session (v5 DISCONNECT 0xA0, 3.1.1 close) through the broker's tick.

import binascii
import hashlib
import json
import unittest

from common.broker import security_files
from common.broker.acl import Acl
from common.broker.jwt_auth import JwtAuth, Key
from common.crypto.hmac256 import hmac_with
from common.crypto.jws import HMAC_ALGORITHMS, b64url_decode, check_claims, decode, hmac_algorithms, hmac_verifier
from common.mqtt import consts as C
from tests.core.harness import Harness

SECRET = b"a shared secret of 32 bytes....."
WALL = 1700000000


def b64url(raw):
    return binascii.b2a_base64(raw).strip().decode().replace("+", "-").replace("/", "_").replace("=", "")


def mint(claims, secret=SECRET, alg="HS256", header=None, raw_payload=None):
    """A token signed with our own HMAC (on CPython the tests below check
    it against the standard library's hmac)."""
    head = b64url(json.dumps(header or {"alg": alg, "typ": "JWT"}).encode())
    body = b64url(raw_payload if raw_payload is not None else json.dumps(claims).encode())
    signing_input = (head + "." + body).encode()
    name, block = HMAC_ALGORITHMS.get(alg, ("sha256", 64))
    sig = hmac_with(getattr(hashlib, name), block, secret, signing_input)
    return (head + "." + body + "." + b64url(sig)).encode()


class Clock:
    def __init__(self, t=WALL):
        self.t = t

    def __call__(self):
        return self.t


def jwt_harness(acl=None, clock=None, **options):
    h = Harness()
    clock = clock or Clock()
    keys = [Key(None, hmac_algorithms(), hmac_verifier(SECRET, hmac_algorithms()))]
    h.broker.jwt = JwtAuth(keys, clock, options)
    security_files.set_security(h.broker, None, Acl.parse(acl, "acl") if acl is not None else None, False, h.now)
    return h, clock


def claims(user="alice", exp=WALL + 60, **more):
    c = {"sub": user, "exp": exp}
    for k in more:
        c[k] = more[k]
    return c


class TestCodec(unittest.TestCase):
    # RFC 7515 Appendix A.1: the HS256 example, key and token as printed there.
    RFC_KEY = "AyM1SysPpbyDfgZld3umj1qzKObwVMkoqQ-EstJQLr_T-1qS0gZH75aKtMN3Yj0iPS4hcgUuTwjAzZr1Z9CAow"
    RFC_TOKEN = (
        "eyJ0eXAiOiJKV1QiLA0KICJhbGciOiJIUzI1NiJ9"
        ".eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFtcGxlLmNvbS9pc19yb290Ijp0cnVlfQ"
        ".dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
    )

    def test_rfc7515_example(self):
        header, c, signing_input, sig = decode(self.RFC_TOKEN, 4096)
        self.assertEqual(header["alg"], "HS256")
        self.assertEqual(c["iss"], "joe")
        verify = hmac_verifier(b64url_decode(self.RFC_KEY), ["HS256"])
        self.assertTrue(verify("HS256", signing_input, sig))
        self.assertFalse(verify("HS256", signing_input + b"x", sig))
        self.assertIsNone(check_claims(c, 1300819379, 0, "joe", None, True))
        self.assertEqual(check_claims(c, 1300819380, 0, "joe", None, True)[:7], "expired")

    def test_mint_matches_the_standard_library(self):
        try:
            import hmac
        except ImportError:
            self.skipTest("no hmac module (MicroPython): the RFC vector covers it")
        for alg in hmac_algorithms():
            token = mint({"sub": "a"}, alg=alg)
            head, body, sig = token.split(b".")
            want = hmac.new(SECRET, head + b"." + body, HMAC_ALGORITHMS[alg][0]).digest()
            self.assertEqual(b64url_decode(sig.decode()), want)

    def test_hmac_algorithms_of_this_port(self):
        algs = hmac_algorithms()
        self.assertIn("HS256", algs)  # every port, boards included
        self.assertEqual("HS512" in algs, hasattr(hashlib, "sha512"))

    def test_malformed(self):
        good = mint(claims()).decode()
        head, body, sig = good.split(".")
        cases = {
            "": "no token",
            "a.b": "not three dot-separated parts",
            good + ".x": "not three dot-separated parts",
            head + "." + body + "!." + sig: "malformed base64url",
            head + "." + body[:-3] + "=." + sig: "malformed base64url",
            "abcde." + body + "." + sig: "malformed base64url",
            b64url(b"[1,2]") + "." + body + "." + sig: "header or payload is not a JSON object",
            head + "." + b64url(b"{not json") + "." + sig: "header or payload is not a JSON object",
            b64url(b'{"typ":"JWT"}') + "." + body + "." + sig: "no algorithm in the header",
            b64url(b'{"alg":5}') + "." + body + "." + sig: "no algorithm in the header",
        }
        for token in cases:
            got = decode(token, 4096)
            self.assertTrue(isinstance(got, str) and got.startswith(cases[token]), (token, got))
        self.assertEqual(decode(good.encode() + b"\xff", 4096), "a character outside base64url")
        self.assertEqual(decode("x" * 4097, 4096), "token of 4097 bytes over max_token_bytes 4096")

    def test_claims(self):
        c = {"exp": WALL, "nbf": WALL - 10, "iss": "me", "aud": ["them", "us"]}
        self.assertIsNone(check_claims(c, WALL - 1, 0, "me", "us", True))
        self.assertEqual(check_claims(c, WALL, 0, None, None, True)[:7], "expired")
        self.assertIsNone(check_claims(c, WALL + 4, 5, None, None, True))  # leeway
        self.assertEqual(check_claims(c, WALL - 11, 0, None, None, True)[:13], "not valid yet")
        self.assertIsNone(check_claims(c, WALL - 11, 1, None, None, True))
        self.assertEqual(check_claims(c, WALL - 1, 0, "you", None, True), "issuer is not you")
        self.assertEqual(check_claims(c, WALL - 1, 0, None, "others", True), "audience is not others")
        self.assertEqual(check_claims({"aud": "us"}, WALL, 0, None, "us", False), None)
        self.assertEqual(check_claims({}, WALL, 0, None, None, True), "no exp claim (require_exp)")
        self.assertEqual(check_claims({"exp": True}, WALL, 0, None, None, True), "exp is not a number")
        self.assertEqual(check_claims({"exp": "9999999999"}, WALL, 0, None, None, True), "exp is not a number")
        self.assertEqual(check_claims({"nbf": [1]}, WALL, 0, None, None, False), "nbf is not a number")


class TestLogin(unittest.TestCase):
    def connect(self, h, token, level=5, username=None, client_id="dev1"):
        c = h.client(level)
        ack = c.connect(client_id, username=username, password=token)
        return c, ack

    def refused(self, token, options=None, username=None, level=5):
        h, _ = jwt_harness(**(options or {}))
        lines = []
        h.broker.set_logger(lambda level, text: lines.append(text))
        c, ack = self.connect(h, token, level, username)
        want = C.RC_BAD_USER_NAME_OR_PASSWORD if level == 5 else C.CONNACK_REFUSED_BAD_USERNAME_PASSWORD
        self.assertEqual(ack.reason, want)
        self.assertTrue(c.closed)
        self.assertEqual(h.broker.jwt.refused, 1)
        self.assertEqual(h.broker.stats.login_failed, 1)
        line = next(x for x in lines if "bad token" in x)
        self.assertNotIn(token.decode() if isinstance(token, bytes) else token, line)  # never logged
        return line

    def test_valid_token_sets_the_user(self):
        h, _ = jwt_harness()
        for level in (4, 5):
            c, ack = self.connect(
                h, mint(claims()), level, username="alice" if level == 4 else None, client_id="c%d" % level
            )
            self.assertEqual(ack.reason, 0)
            self.assertEqual(h.broker.connections.by_id[c.cid].user, "alice")
            self.assertEqual(h.broker.sessions.find("c%d" % level).user, "alice")

    def test_token_in_user_name(self):
        h, _ = jwt_harness(token_in="username")
        c, ack = self.connect(h, None, username=mint(claims()).decode())
        self.assertEqual(ack.reason, 0)
        self.assertEqual(h.broker.connections.by_id[c.cid].user, "alice")

    def test_user_name_must_be_the_tokens(self):
        self.assertIn("is not the token's", self.refused(mint(claims()), username="bob"))
        h, _ = jwt_harness()
        self.assertEqual(self.connect(h, mint(claims()), username="alice")[1].reason, 0)

    def test_no_token_goes_to_the_other_rules(self):
        h, _ = jwt_harness()  # allow_anonymous false
        self.assertEqual(self.connect(h, None)[1].reason, C.RC_NOT_AUTHORIZED)

    # ---------------------------------------------------------------- attacks

    def test_alg_none(self):
        token = mint(claims(), header={"alg": "none"})
        head, body, _sig = token.split(b".")
        for t in (token, head + b"." + body + b"."):
            self.assertIn("no key for alg none", self.refused(t))

    def test_alg_not_of_the_key(self):
        # An HMAC secret verifies HS* only, whatever the header says.
        self.assertIn("no key for alg RS256", self.refused(mint(claims(), header={"alg": "RS256"})))

    def test_expired(self):
        self.assertIn("expired", self.refused(mint(claims(exp=WALL - 1))))
        self.assertIn("expired", self.refused(mint(claims(exp=WALL))))

    def test_leeway(self):
        h, _ = jwt_harness(leeway=30)
        self.assertEqual(self.connect(h, mint(claims(exp=WALL - 29)))[1].reason, 0)

    def test_not_yet_valid(self):
        self.assertIn("not valid yet", self.refused(mint(claims(nbf=WALL + 5))))

    def test_wrong_audience(self):
        self.assertIn("audience", self.refused(mint(claims(aud="other-broker")), {"audience": "siskin"}))
        self.assertIn("audience", self.refused(mint(claims()), {"audience": "siskin"}))  # none given

    def test_wrong_issuer(self):
        self.assertIn("issuer", self.refused(mint(claims(iss="evil")), {"issuer": "https://auth.example"}))

    def test_tampered_signature(self):
        token = mint(claims())
        head, body, sig = token.split(b".")
        raw = bytearray(b64url_decode(sig.decode()))
        raw[0] ^= 1
        self.assertIn("bad signature", self.refused(head + b"." + body + b"." + b64url(bytes(raw)).encode()))
        # Claims swapped under a valid signature of others.
        other = mint(claims(user="admin")).split(b".")[1]
        self.assertIn("bad signature", self.refused(head + b"." + other + b"." + sig))
        self.assertIn("bad signature", self.refused(mint(claims(), secret=b"another secret")))

    def test_malformed_token(self):
        self.assertIn("malformed base64url", self.refused(b"ey!J.e30.e30"))
        self.assertIn("not a JSON object", self.refused(mint(None, raw_payload=b'{"sub": ')))
        # (3.1.1 sends a password only with a user name [MQTT-3.1.2-22])
        self.assertIn("three", self.refused(b"secret", username="alice", level=4))

    def test_oversized_token(self):
        big = mint(claims(pad="x" * 5000))
        self.assertIn("over max_token_bytes 4096", self.refused(big))

    def test_no_user(self):
        self.assertIn("no sub claim", self.refused(mint({"exp": WALL + 60})))
        self.assertIn("no sub claim", self.refused(mint({"exp": WALL + 60, "sub": 7})))

    def test_bad_acl_claim(self):
        for acl in ("x", {"write": []}, {"publish": "a/b"}, {"publish": ["a/#/b"]}, {"subscribe": [5]}):
            self.assertIn("acl", self.refused(mint(claims(acl=acl))))


class TestClaimsAcl(unittest.TestCase):
    FILE = "user alice\ntopic read shared/#\ntopic deny shared/secret\n"

    def test_rules_from_claims(self):
        h, _ = jwt_harness(acl=self.FILE)
        token = mint(claims(acl={"publish": ["devices/%c/out"], "subscribe": ["cmd/%u/#"]}))
        c = h.client(5)
        self.assertEqual(c.connect("dev1", password=token).reason, 0)
        rules = h.broker.connections.by_id[c.cid].acl
        self.assertTrue(rules.can_write("devices/dev1/out"))
        self.assertFalse(rules.can_write("devices/dev2/out"))
        self.assertTrue(rules.may_subscribe("cmd/alice/#"))
        self.assertFalse(rules.can_write("cmd/alice/x"))  # subscribe grants read only
        self.assertTrue(rules.can_read("shared/x"))  # the file's rules too
        self.assertFalse(rules.can_read("shared/secret"))  # and its deny wins
        self.assertEqual(c.subscribe("cmd/alice/#", qos=1).reasons, [1])
        self.assertEqual(c.subscribe("cmd/bob/#", qos=1, packet_id=2).reasons, [C.RC_NOT_AUTHORIZED])

    def test_claims_without_a_file_acl_deny_the_rest(self):
        h, _ = jwt_harness()
        c = h.client(5)
        c.connect("dev1", password=mint(claims(acl={"publish": ["a/%c"]})))
        rules = h.broker.connections.by_id[c.cid].acl
        self.assertTrue(rules.can_write("a/dev1"))
        self.assertFalse(rules.can_write("b"))
        self.assertFalse(rules.can_read("a/dev1"))
        # A token without the claim: no file ACL, no rules: everything.
        d = h.client(5)
        d.connect("dev2", password=mint(claims(user="bob")))
        self.assertIsNone(h.broker.connections.by_id[d.cid].acl)

    def test_widening_client_id_gets_no_rules(self):
        h, _ = jwt_harness()
        lines = []
        h.broker.set_logger(lambda level, text: lines.append(text))
        c = h.client(5)
        c.connect("x+", password=mint(claims(acl={"publish": ["a/%c"]})))
        rules = h.broker.connections.by_id[c.cid].acl
        self.assertEqual(rules.rules, [])
        self.assertFalse(rules.can_write("a/x+"))
        self.assertTrue([x for x in lines if "no ACL rules" in x])

    def test_reload_keeps_the_claims(self):
        h, _ = jwt_harness(acl=self.FILE)
        c = h.client(5)
        c.connect("dev1", password=mint(claims(acl={"publish": ["a/%c"]})))
        security_files.set_security(h.broker, None, Acl.parse("user alice\ntopic read other/#\n", "acl"), False, h.now)
        rules = h.broker.connections.by_id[c.cid].acl
        self.assertTrue(rules.can_write("a/dev1"))
        self.assertTrue(rules.can_read("other/x"))
        self.assertFalse(rules.can_read("shared/x"))


class TestExpiryInSession(unittest.TestCase):
    def test_v5_disconnect_0xa0_when_the_token_expires(self):
        h, clock = jwt_harness()
        c = h.client(5)
        self.assertEqual(c.connect("dev1", password=mint(claims(exp=WALL + 3))).reason, 0)
        other = h.client(5)
        other.connect("dev2", password=mint(claims(user="bob", exp=WALL + 100)))
        clock.t = WALL + 2.5
        h.advance(1)
        self.assertFalse(c.closed)
        # Less than a second before it: the broker's connection deadline is set to it.
        due = h.broker.conn_due
        self.assertEqual(due, ((h.now * 1000 + 501) & 0x3FFFFFFF))
        clock.t = WALL + 3
        h.advance(1)
        pkt = c.expect(C.DISCONNECT)
        self.assertEqual(pkt.reason, 0xA0)  # Maximum connect time
        self.assertTrue(c.closed)
        self.assertFalse(other.closed)
        self.assertEqual(h.broker.stats.closed_token_expired, 1)
        self.assertEqual(h.broker.jwt.due, WALL + 100)

    def test_v311_closed_when_the_token_expires(self):
        h, clock = jwt_harness(leeway=2)
        c = h.client(4)
        self.assertEqual(c.connect("dev1", username="alice", password=mint(claims(exp=WALL + 3))).reason, 0)
        clock.t = WALL + 4.9  # within the leeway
        h.advance(1)
        self.assertFalse(c.closed)
        clock.t = WALL + 5
        h.advance(1)
        self.assertTrue(c.closed)
        self.assertEqual(c.take(), [])  # 3.1.1 has no DISCONNECT from the server

    def test_reconnect_with_a_new_token(self):
        h, clock = jwt_harness()
        c = h.client(5)
        c.connect("dev1", password=mint(claims(exp=WALL + 3)))
        c.disconnect()
        d = h.client(5)
        d.connect("dev1", password=mint(claims(exp=WALL + 300)))
        clock.t = WALL + 10
        h.advance(1)
        self.assertFalse(d.closed)
        self.assertEqual(h.broker.stats.closed_token_expired, 0)

    def test_no_exp_when_not_required(self):
        h, clock = jwt_harness(require_exp=False)
        c = h.client(5)
        self.assertEqual(c.connect("dev1", password=mint({"sub": "alice"})).reason, 0)
        clock.t = WALL + 10**6
        h.advance(1)
        self.assertFalse(c.closed)

    def test_a_reused_connection_id_gets_nothing_of_the_token(self):
        h, clock = jwt_harness()
        c = h.client(5)
        c.connect("dev1", password=mint(claims(exp=WALL + 3, acl={"publish": ["a/#"]})))
        c.drop()
        security_files.set_security(h.broker, None, None, True, h.now)  # anonymous clients now allowed
        d = h.client(5)
        self.assertEqual(d.cid, c.cid)
        self.assertEqual(d.connect("anon").reason, 0)
        self.assertIsNone(h.broker.connections.by_id[d.cid].acl)  # not the token's rules
        clock.t = WALL + 10
        h.advance(1)
        self.assertFalse(d.closed)  # nor its expiry
        self.assertEqual(h.broker.stats.closed_token_expired, 0)

# v5 enhanced authentication with SCRAM-SHA-256 (RFC 7677), on both
# interpreters: the primitives against the RFC's example, then the whole
# CONNECT/AUTH/CONNACK exchange and re-authentication on the harness.

import unittest

from common.crypto.auth_scram import b64, client_proof, hmac_sha256, make_credentials, unb64
from common.mqtt import consts as C
from common.mqtt.packets import Auth, prop_get
from tests.core.harness import Harness

# RFC 7677 section 3.
RFC_SALT = "W22ZaJ0SNY7soEsUEjb6gQ=="
RFC_CNONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_NONCE = "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_AUTH_MESSAGE = (
    "n=user,r=" + RFC_CNONCE + ",r=" + RFC_NONCE + ",s=" + RFC_SALT + ",i=4096,c=biws,r=" + RFC_NONCE
)

SALT = b"0123456789abcdef"
ITER = 64  # small, so the MicroPython run stays quick


class TestPrimitives(unittest.TestCase):
    def test_hmac_sha256_rfc4231_case_2(self):
        mac = hmac_sha256(b"Jefe", b"what do ya want for nothing?")
        self.assertEqual(b64(mac), "W9zBRr9gdU5qBCQmCJV1x1oAPwidJzmDnexYuWTsOEM=")

    def test_rfc7677_proof_and_signature(self):
        proof, server_sig = client_proof("pencil", unb64(RFC_SALT), 4096, RFC_AUTH_MESSAGE.encode())
        self.assertEqual(b64(proof), "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
        self.assertEqual(b64(server_sig), "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")


def scram_harness():
    return Harness(scram_users=[make_credentials("alice", "secret", SALT, ITER)])


def auth_props(data):
    return [(C.PROP_AUTHENTICATION_METHOD, "SCRAM-SHA-256"), (C.PROP_AUTHENTICATION_DATA, data)]


def exchange(c, password, reason=None):
    """Run client-first .. client-final; returns the server's last packet."""
    first_bare = "n=alice,r=cn0nce"
    if reason is None:
        c.connect("a", props=auth_props(("n,," + first_bare).encode()))
    else:
        c.send(Auth(reason, auth_props(("n,," + first_bare).encode())))
    challenge = c.expect(C.AUTH)
    assert challenge.reason == C.RC_CONTINUE_AUTHENTICATION
    server_first = prop_get(challenge.props, C.PROP_AUTHENTICATION_DATA).decode()
    fields = {}
    for part in server_first.split(","):
        fields[part[0]] = part[2:]
    without_proof = "c=biws,r=" + fields["r"]
    auth_message = (first_bare + "," + server_first + "," + without_proof).encode()
    proof, server_sig = client_proof(password, unb64(fields["s"]), int(fields["i"]), auth_message)
    c.send(Auth(C.RC_CONTINUE_AUTHENTICATION, auth_props((without_proof + ",p=" + b64(proof)).encode())))
    return server_sig


class TestExchange(unittest.TestCase):
    def test_successful_exchange_proves_the_server(self):
        h = scram_harness()
        c = h.client(level=5)
        server_sig = exchange(c, "secret")
        ack = c.expect(C.CONNACK)
        self.assertEqual(ack.reason, C.RC_SUCCESS)
        self.assertEqual(prop_get(ack.props, C.PROP_AUTHENTICATION_METHOD), "SCRAM-SHA-256")
        final = prop_get(ack.props, C.PROP_AUTHENTICATION_DATA).decode()
        self.assertEqual(final, "v=" + b64(server_sig))
        self.assertFalse(c.closed)

    def test_wrong_password_refused(self):
        h = scram_harness()
        c = h.client(level=5)
        exchange(c, "guess")
        self.assertEqual(c.expect(C.CONNACK).reason, C.RC_NOT_AUTHORIZED)
        self.assertTrue(c.closed)

    def test_unknown_user_refused_after_the_same_exchange(self):
        h = scram_harness()
        c = h.client(level=5)
        c.connect("a", props=auth_props(b"n,,n=mallory,r=x"))
        self.assertEqual(c.expect(C.AUTH).reason, C.RC_CONTINUE_AUTHENTICATION)
        c.send(Auth(C.RC_CONTINUE_AUTHENTICATION, auth_props(b"c=biws,r=x,p=AAAA")))
        self.assertEqual(c.expect(C.CONNACK).reason, C.RC_NOT_AUTHORIZED)

    def test_unknown_method_0x8c(self):
        h = scram_harness()
        c = h.client(level=5)
        ack = c.connect("a", props=[(C.PROP_AUTHENTICATION_METHOD, "OTHER")])
        self.assertEqual(ack.reason, C.RC_BAD_AUTHENTICATION_METHOD)

    def test_garbage_client_first_refused(self):
        h = scram_harness()
        c = h.client(level=5)
        ack = c.connect("a", props=auth_props(b"\xff\xfe"))
        self.assertEqual(ack.reason, C.RC_NOT_AUTHORIZED)

    def test_reauthentication(self):
        # [MQTT-4.12.1-1]
        h = scram_harness()
        c = h.client(level=5)
        exchange(c, "secret")
        c.expect(C.CONNACK)
        exchange(c, "secret", reason=C.RC_REAUTHENTICATE)
        self.assertEqual(c.expect(C.AUTH).reason, C.RC_SUCCESS)
        exchange(c, "wrong", reason=C.RC_REAUTHENTICATE)
        self.assertEqual(c.expect(C.DISCONNECT).reason, C.RC_NOT_AUTHORIZED)  # [MQTT-4.12.1-2]

    def test_auth_without_method_is_protocol_error(self):
        # [MQTT-4.12.0-1]
        h = scram_harness()
        c = h.client(level=5)
        c.connect("a")
        c.send(Auth(C.RC_REAUTHENTICATE, auth_props(b"n,,n=alice,r=x")))
        self.assertEqual(c.expect(C.DISCONNECT).reason, C.RC_PROTOCOL_ERROR)

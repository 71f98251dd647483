# SCRAM-SHA-256 (RFC 5802, RFC 7677) as an MQTT v5 enhanced-authentication
# method, usable on CPython and MicroPython (hashlib.sha256 + our own HMAC).
#
# Pluggable method interface (what handle_connect drives): an object with
#   name                       the Authentication Method string
#   start(data, entropy)    -> (status, out_data, state)
#   step(state, data)       -> (status, out_data, state)
# status is CONTINUE (send AUTH 0x18 with out_data and wait for the client's
# AUTH), SUCCESS (out_data goes in CONNACK or AUTH 0x00; state is then the
# user name the exchange proved, for the ACL) or FAIL.
#
# The server keeps no passwords: each user is "user:salt:iterations:
# StoredKey:ServerKey" (base64 fields), made by make_credentials(). The
# exchange: client-first "n,,n=user,r=cnonce" in CONNECT; server-first
# "r=cnonce+snonce,s=salt,i=n" in AUTH; client-final "c=biws,r=..,p=proof"
# in AUTH; server-final "v=signature" in CONNACK.

import binascii
import hashlib

from common.crypto.hmac256 import hmac_sha256

CONTINUE = 0
SUCCESS = 1
FAIL = 2

METHOD_NAME = "SCRAM-SHA-256"


def _sha256(data):
    return hashlib.sha256(data).digest()


def _xor(a, b):
    return bytes([a[i] ^ b[i] for i in range(len(a))])


def b64(data):
    return binascii.b2a_base64(data).strip().decode()


def unb64(text):
    # Bytes in: some ports' binascii (the WebAssembly one) refuses str.
    return binascii.a2b_base64(text.encode() if isinstance(text, str) else text)


def salted_password(password, salt, iterations):
    """Hi() of RFC 5802: PBKDF2-HMAC-SHA-256 with one block."""
    u = hmac_sha256(password, salt + b"\x00\x00\x00\x01")
    result = u
    for _ in range(iterations - 1):
        u = hmac_sha256(password, u)
        result = _xor(result, u)
    return result


def make_credentials(user, password, salt, iterations=4096):
    """The configuration line for `user` (the password is not kept)."""
    sp = salted_password(password.encode(), salt, iterations)
    stored = _sha256(hmac_sha256(sp, b"Client Key"))
    server = hmac_sha256(sp, b"Server Key")
    return "%s:%s:%d:%s:%s" % (user, b64(salt), iterations, b64(stored), b64(server))


def client_proof(password, salt, iterations, auth_message):
    """What a client sends as p= (used by tests and the bridge)."""
    sp = salted_password(password.encode(), salt, iterations)
    client_key = hmac_sha256(sp, b"Client Key")
    signature = hmac_sha256(_sha256(client_key), auth_message)
    return _xor(client_key, signature), hmac_sha256(hmac_sha256(sp, b"Server Key"), auth_message)


def _attributes(text):
    """Parse "a=1,b=2" into a list of (name, value) without dicts."""
    out = []
    for part in text.split(","):
        if len(part) < 2 or part[1] != "=":
            return None
        out.append((part[0], part[2:]))
    return out


def _attr(attrs, name):
    for k, v in attrs:
        if k == name:
            return v
    return None


class ScramSha256:
    name = METHOD_NAME

    def __init__(self, lines):
        self.users = {}
        for line in lines:
            fields = line.split(":")
            if len(fields) != 5:
                raise ValueError("SCRAM user line needs user:salt:iterations:stored_key:server_key")
            self.users[fields[0]] = (unb64(fields[1]), int(fields[2]), unb64(fields[3]), unb64(fields[4]))

    def start(self, data, entropy):
        try:
            text = bytes(data).decode()
        except UnicodeError:
            return FAIL, None, None
        if not text.startswith("n,,"):
            return FAIL, None, None  # no channel binding, no authzid
        bare = text[3:]
        attrs = _attributes(bare)
        if attrs is None:
            return FAIL, None, None
        user = _attr(attrs, "n")
        cnonce = _attr(attrs, "r")
        if user is None or not cnonce:
            return FAIL, None, None
        user = user.replace("=2C", ",").replace("=3D", "=")
        creds = self.users.get(user)
        if creds is None:
            # Answer as for a known user so a prober cannot tell them apart.
            creds = (entropy(16), 4096, None, None)
        nonce = cnonce + b64(entropy(18))
        server_first = "r=%s,s=%s,i=%d" % (nonce, b64(creds[0]), creds[1])
        return CONTINUE, server_first.encode(), (bare, server_first, nonce, creds, user)

    def step(self, state, data):
        bare, server_first, nonce, creds, user = state
        try:
            text = bytes(data).decode()
        except UnicodeError:
            return FAIL, None, None
        attrs = _attributes(text)
        if attrs is None or _attr(attrs, "r") != nonce or _attr(attrs, "c") != "biws":
            return FAIL, None, None
        proof = _attr(attrs, "p")
        if proof is None or creds[2] is None:
            return FAIL, None, None
        without_proof = text[: text.rfind(",p=")]
        auth_message = (bare + "," + server_first + "," + without_proof).encode()
        try:
            proof = unb64(proof)
        except ValueError:
            return FAIL, None, None
        signature = hmac_sha256(creds[2], auth_message)
        if len(proof) != len(signature) or _sha256(_xor(proof, signature)) != creds[2]:
            return FAIL, None, None
        server_sig = hmac_sha256(creds[3], auth_message)
        return SUCCESS, ("v=" + b64(server_sig)).encode(), user

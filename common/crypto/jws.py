# JSON Web Tokens (RFC 7519) in JWS compact form (RFC 7515): decode one,
# verify an HMAC signature, check its time and audience claims.
#
# Theory of operation. A token is HEADER.PAYLOAD.SIGNATURE, each part
# base64url without padding. decode() refuses, with a reason, anything that
# is not exactly that: too long, not three parts, a character outside the
# base64url alphabet, a header or payload that is not a JSON object, a header
# without a string "alg". It never verifies: the caller picks a key for the
# header's "alg" (and "kid") and runs its verify(alg, signing_input,
# signature). HMAC keys (HS256/384/512) are verified here on hashlib alone
# (common/crypto/hmac256.py), so every port can: MicroPython's hashlib has
# SHA-256 only (unix, wasm, ESP32, RP2040 builds), so HS384/HS512 are the
# host's (hmac_algorithms() says what this port offers). Signatures with
# public keys (RS256, ES256, EdDSA) are the host's: cpython_host/auth/jwt_keys.py.
# A key is bound to its algorithms when it is loaded (an HMAC secret to HS*,
# an RSA key to RS*, ...), never by the token, so "alg": "none" and a public
# key used as an HMAC secret find no key.
#
# check_claims() judges exp, nbf (with a leeway, seconds), iss and aud
# against the wall clock the shell passes in (the core reads no clock).

import binascii
import hashlib
import json

from common.crypto.hmac256 import hmac_with
from common.crypto.pbkdf2 import same_bytes

# HS algorithm -> (hashlib name, block size)
HMAC_ALGORITHMS = {"HS256": ("sha256", 64), "HS384": ("sha384", 128), "HS512": ("sha512", 128)}
B64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def hmac_algorithms():
    """The HS algorithms this port's hashlib can compute (sorted)."""
    return sorted([a for a, (name, _b) in HMAC_ALGORITHMS.items() if hasattr(hashlib, name)])


def b64url_decode(text):
    """The bytes of unpadded base64url `text` (str); ValueError when it is not."""
    n = len(text)
    if n % 4 == 1:
        raise ValueError("bad base64url length")
    for ch in text:
        if ch not in B64URL:
            raise ValueError("a character outside base64url")
    text = text.replace("-", "+").replace("_", "/") + "=" * (-n % 4)
    return binascii.a2b_base64(text.encode())  # (bytes: the wasm port's binascii takes no str)


def _json_object(raw):
    try:
        value = json.loads(raw)
    except ValueError:  # (JSONDecodeError is one; MicroPython raises ValueError)
        return None
    return value if isinstance(value, dict) else None


def decode(token, max_bytes):
    """(header, claims, signing input, signature) of `token` (bytes or
    str); a reason (str) when it is not a well-formed JWS compact token."""
    if token is None or len(token) == 0:
        return "no token"
    if len(token) > max_bytes:
        return "token of %d bytes over max_token_bytes %d" % (len(token), max_bytes)
    if isinstance(token, str):
        text = token
    else:
        for b in token:
            if b > 0x7E:
                return "a character outside base64url"
        text = token.decode()
    first = text.find(".")
    second = text.find(".", first + 1) if first >= 0 else -1
    if first < 0 or second < 0 or text.find(".", second + 1) >= 0:
        return "not three dot-separated parts"
    try:
        header = _json_object(b64url_decode(text[:first]))
        claims = _json_object(b64url_decode(text[first + 1 : second]))
        signature = b64url_decode(text[second + 1 :])
    except ValueError as e:
        return "malformed base64url (%s)" % e.args[0]
    if header is None or claims is None:
        return "header or payload is not a JSON object"
    alg = header.get("alg")
    if not isinstance(alg, str):
        return "no algorithm in the header"
    return header, claims, text[:second].encode(), signature


def hmac_verifier(secret, algorithms):
    """verify(alg, signing_input, signature) for an HMAC `secret` (bytes),
    for the HS `algorithms` (a list) only."""

    def verify(alg, signing_input, signature):
        if alg not in algorithms:
            return False
        name, block = HMAC_ALGORITHMS[alg]
        new_hash = getattr(hashlib, name)
        return same_bytes(hmac_with(new_hash, block, secret, signing_input), signature)

    return verify


def _number(value):
    # A NumericDate: a JSON number, not true/false (bool is an int in Python).
    return value is not True and value is not False and isinstance(value, (int, float))


def check_claims(claims, wall, leeway, issuer, audience, require_exp):
    """None when the claims hold at wall-clock time `wall` (s since 1970),
    else the reason. exp and nbf get `leeway` seconds; `issuer` and
    `audience` (None: not checked) must be the token's iss and among its aud."""
    exp = claims.get("exp")
    if exp is None:
        if require_exp:
            return "no exp claim (require_exp)"
    elif not _number(exp):
        return "exp is not a number"
    elif wall >= exp + leeway:
        return "expired (exp %d, now %d, leeway %d s)" % (exp, wall, leeway)
    nbf = claims.get("nbf")
    if nbf is not None:
        if not _number(nbf):
            return "nbf is not a number"
        if wall + leeway < nbf:
            return "not valid yet (nbf %d, now %d, leeway %d s)" % (nbf, wall, leeway)
    if issuer is not None and claims.get("iss") != issuer:
        return "issuer is not %s" % issuer
    if audience is not None:
        aud = claims.get("aud")
        if not (aud == audience or (isinstance(aud, list) and audience in aud)):
            return "audience is not %s" % audience
    return None

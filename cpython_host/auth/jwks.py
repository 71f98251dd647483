"""Public keys for JWT logins: `key_of` binds a `cryptography` public key
(a PEM file's, cpython_host/auth/jwt_keys.py, or a JWK's) to the algorithms of
its type; `Jwks` is an issuer's key set (JWKS, RFC 7517) fetched from
`jwks_url` and kept fresh ([security.jwt] jwks_url, jwks_refresh).

Theory of operation. At start the set is fetched once (before the event
loop runs; a failure is logged and the broker starts without those keys).
Then it is fetched again, in a worker thread so the event loop never waits,
every `jwks_refresh` seconds (JwtAuth.refresh, called at each broker tick)
and when a token names a kid no key has (JwtAuth.missing: a rotated key),
at most once per MIN_GAP seconds; that login is refused, the next one finds
the key. A fetch that fails (no answer within TIMEOUT, not HTTP 200, not a
JSON key set) keeps the keys in force and is logged.

Each key is bound to the algorithms of its type (RSA: RS*, EC P-256: ES256,
P-384: ES384, Ed25519: EdDSA; cpython_host/jwt_keys.key_of); a key whose
"alg" names another (an RSA key "for HS256"), an "oct" (symmetric) key, a
key "use"d for something else than "sig", or one that cannot be read is
left out and logged: a tampered key set can add keys, but never make a
public key an HMAC secret. Serve the set over https (verified against the
system's CAs): over plain http anyone on the path can add keys.
"""

from __future__ import annotations

import base64
import json
import logging
import ssl
import time
from collections.abc import Callable
from typing import Any

from common.broker.jwt_auth import JwtAuth, Key, narrowed
from common.broker.settings import ConfigError

log = logging.getLogger("siskin.host")

TIMEOUT = 5.0  # s for one fetch
MIN_GAP = 10.0  # s between two fetches at least
BODY_MAX = 1 << 20


def _b64int(text: str) -> int:
    return int.from_bytes(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)), "big")


def key_from_jwk(jwk: Any, narrow: list[str] | None) -> Key:
    """The Key of one JWK; ConfigError (why) when it is left out."""
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

    if not isinstance(jwk, dict):
        raise ConfigError("not a JSON object")
    kid = jwk.get("kid")
    where = f"JWK {kid!r}"
    kty = jwk.get("kty")
    if jwk.get("use", "sig") != "sig":
        raise ConfigError(f"{where}: use {jwk.get('use')!r}, not sig")
    try:
        if kty == "RSA":
            key: Any = rsa.RSAPublicNumbers(_b64int(jwk["e"]), _b64int(jwk["n"])).public_key()
        elif kty == "EC":
            curves = {"P-256": ec.SECP256R1(), "P-384": ec.SECP384R1()}
            curve = curves[jwk["crv"]]
            key = ec.EllipticCurvePublicNumbers(_b64int(jwk["x"]), _b64int(jwk["y"]), curve).public_key()
        elif kty == "OKP" and jwk.get("crv") == "Ed25519":
            key = ed25519.Ed25519PublicKey.from_public_bytes(
                base64.urlsafe_b64decode(jwk["x"] + "=" * (-len(jwk["x"]) % 4))
            )
        else:
            raise ConfigError(
                f"{where}: kty {kty!r} (RSA, EC and OKP Ed25519 keys are read; a symmetric key is never taken from a URL)"
            )
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"{where}: unreadable ({type(e).__name__}: {e})") from None
    alg = jwk.get("alg")
    if alg is not None:
        narrow = [alg] if narrow is None or alg in narrow else []
    return key_of(key, where, narrow, kid if isinstance(kid, str) else None)


def key_of(key: Any, where: str, narrow: list[str] | None, kid: str | None = None) -> Key:
    """The Key of a `cryptography` public key: the algorithms of its type
    (narrowed), ConfigError for a type or size JWS does not use."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
    from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

    sha: dict[str, Callable[[], hashes.HashAlgorithm]] = {
        "256": hashes.SHA256,
        "384": hashes.SHA384,
        "512": hashes.SHA512,
    }
    if isinstance(key, rsa.RSAPublicKey):
        if key.key_size < 2048:
            raise ConfigError(f"{where}: an RSA key of {key.key_size} bits; at least 2048 wanted.")
        algs = ["RS256", "RS384", "RS512"]

        def check(alg: str, data: bytes, sig: bytes) -> None:
            key.verify(sig, data, padding.PKCS1v15(), sha[alg[2:]]())

    elif isinstance(key, ec.EllipticCurvePublicKey):
        sizes = {"secp256r1": ("ES256", 32), "secp384r1": ("ES384", 48)}
        if key.curve.name not in sizes:
            raise ConfigError(f"{where}: EC curve {key.curve.name}; JWS wants P-256 (ES256) or P-384 (ES384).")
        name, size = sizes[key.curve.name]
        algs = [name]

        def check(alg: str, data: bytes, sig: bytes) -> None:
            if len(sig) != 2 * size:
                raise InvalidSignature
            r = int.from_bytes(sig[:size], "big")
            s = int.from_bytes(sig[size:], "big")
            key.verify(encode_dss_signature(r, s), data, ec.ECDSA(sha[alg[2:]]()))

    elif isinstance(key, ed25519.Ed25519PublicKey):
        algs = ["EdDSA"]

        def check(alg: str, data: bytes, sig: bytes) -> None:
            key.verify(sig, data)

    else:
        raise ConfigError(f"{where}: a {type(key).__name__}; JWT keys are RSA, EC P-256/P-384 or Ed25519.")
    algs = narrowed(where, algs, narrow)

    def verify(alg: str, data: bytes, sig: bytes) -> bool:
        if alg not in algs:
            return False
        try:
            check(alg, data, sig)
        except InvalidSignature:
            return False
        return True

    return Key(kid, algs, verify)


class Jwks:
    def __init__(self, jwt: JwtAuth, url: str, refresh: float, narrow: list[str] | None) -> None:
        if not url.startswith(("https://", "http://")):
            raise ConfigError(f"jwks_url {url!r}: wants https:// (or http:// on a trusted network)")
        self.jwt = jwt
        self.url = url
        self.refresh_s = refresh
        self.narrow = narrow
        self.own = list(jwt.keys)  # the config's keys, kept beside the fetched ones
        self.fetched: list[Key] = []
        self.at = 0.0  # monotonic s of the last fetch started
        self.running = False
        self.context = ssl.create_default_context() if url.startswith("https://") else None

    def start(self) -> None:
        """Hook into the JwtAuth and fetch: now at start-up (no event loop
        yet), in a worker thread on a reload (SIGHUP: the keys fetched
        before stay in force meanwhile, jwt_keys.install)."""
        import asyncio

        self.jwt.refresh = self._maybe_refresh
        self.jwt.missing = self._missing
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            self.at = time.monotonic()
            self._apply(self._fetch())
            return
        self._start_fetch(True)

    def carry(self, before: Jwks) -> None:
        """A reload: the keys `before` fetched serve until this one's fetch ends."""
        if not self.fetched:
            self.fetched = before.fetched
            self.jwt.keys = self.own + before.fetched

    def _fetch(self) -> list[Key] | str:
        """The keys of the set, or why not (runs in a worker thread after start)."""
        try:
            import urllib.request  # (here: it brings http and email, which a broker without a JWKS URL never needs)

            with urllib.request.urlopen(self.url, timeout=TIMEOUT, context=self.context) as answer:
                if answer.status != 200:
                    return f"HTTP {answer.status}"
                body = answer.read(BODY_MAX + 1)
        except (OSError, ValueError) as e:
            return f"{type(e).__name__}: {e}"
        if len(body) > BODY_MAX:
            return f"a key set over {BODY_MAX} bytes"
        try:
            doc = json.loads(body)
        except ValueError:
            return "not JSON"
        if not isinstance(doc, dict) or not isinstance(doc.get("keys"), list):
            return 'not a key set {"keys": [...]}'
        keys = []
        for jwk in doc["keys"]:
            try:
                keys.append(key_from_jwk(jwk, self.narrow))
            except ConfigError as e:
                log.warning("JWKS %s: key left out: %s", self.url, e)
        return keys

    def _apply(self, got: list[Key] | str) -> None:
        self.running = False
        if isinstance(got, str):
            log.warning("JWKS %s: %s; keeping the %d key(s) in force", self.url, got, len(self.fetched))
            return
        self.fetched = got
        self.jwt.keys = self.own + got
        log.info("JWKS %s: %d key(s) (kid %s)", self.url, len(got), ", ".join(str(k.kid) for k in got) or "-")

    def _start_fetch(self, now: bool = False) -> None:
        import asyncio

        if self.running or (not now and time.monotonic() - self.at < MIN_GAP):
            return
        self.running = True
        self.at = time.monotonic()
        future = asyncio.get_running_loop().run_in_executor(None, self._fetch)
        future.add_done_callback(lambda f: self._apply(f.result() if not f.exception() else f"{f.exception()!r}"))

    def _maybe_refresh(self) -> None:
        if time.monotonic() - self.at >= self.refresh_s:
            self._start_fetch()

    def _missing(self, kid: Any) -> None:
        self._start_fetch()

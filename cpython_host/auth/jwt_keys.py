"""JWT logins on the host: [security.jwt] made into the core's JwtAuth
(common/broker/jwt_auth.py), with the keys only the host verifies.

An HMAC secret (`secret_file`) verifies HS256/384/512 in the core
(common/crypto/jws.py). A public key (`public_key_file`, PEM: a public key
or a certificate) verifies with the `cryptography` package: RSA keys
RS256/384/512 (PKCS #1 v1.5), EC P-256 ES256 and P-384 ES384 (the JWS
r || s signature), Ed25519 EdDSA. Each key verifies only the algorithms of
its type: a token's "alg" never makes an RSA key an HMAC secret, and a
secret file holding a PEM key is refused at load for the same reason.
`algorithms` narrows them further. Errors are ConfigError naming the file.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from common.broker.jwt_auth import JwtAuth, Key, hmac_key
from common.broker.settings import ConfigError
from cpython_host.auth.jwks import Jwks, key_of


def load_jwt(cfg: Any, wall: Callable[[], float] | None = None) -> JwtAuth | None:
    """The JwtAuth of the config's [security.jwt], or None without the table."""
    opts = cfg.security.get("jwt")
    if opts is None:
        return None
    import time

    base = cfg.path.parent if cfg.path is not None else Path(".")
    where = f"{cfg.source}: [security.jwt]"
    narrow = opts.get("algorithms") or None
    keys = []
    if opts.get("secret_file") is not None:
        keys.append(secret_key(base / opts["secret_file"], narrow))
    elif opts.get("secret") is not None:
        keys.append(hmac_key(opts["secret"].encode(), f"{where} secret", narrow))
    if opts.get("public_key_file") is not None:
        keys.append(public_key(base / opts["public_key_file"], narrow))
    if not keys and opts.get("jwks_url") is None:
        raise ConfigError(f"{where}: set secret_file (or secret), public_key_file or jwks_url.")
    jwt = JwtAuth(keys, wall or time.time, opts)
    if opts.get("jwks_url") is not None:
        Jwks(jwt, opts["jwks_url"], opts.get("jwks_refresh", 300), narrow).start()
    return jwt


def install(broker: Any, jwt: JwtAuth | None) -> None:
    """Set broker.jwt (start, SIGHUP): connected clients keep their expiries
    and token rules, and the counters go on."""
    old = broker.jwt
    if jwt is not None and old is not None:
        jwt.by_cid, jwt.due, jwt.refused = old.by_cid, old.due, old.refused
        fresh, before = getattr(jwt.refresh, "__self__", None), getattr(old.refresh, "__self__", None)
        if fresh is not None and before is not None:
            fresh.carry(before)  # (cpython_host/auth/jwks.py: its fetch runs in a thread)
    broker.jwt = jwt


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the JWT key: {e.strerror}.") from None


def secret_key(path: Path, narrow: list[str] | None) -> Key:
    key: Key = hmac_key(_read(path).rstrip(), str(path), narrow)
    return key


def public_key(path: Path, narrow: list[str] | None) -> Key:
    """The Key of a PEM public key or certificate file."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    pem = _read(path)
    try:
        if b"-----BEGIN CERTIFICATE" in pem:
            key: Any = x509.load_pem_x509_certificate(pem).public_key()
        else:
            key = serialization.load_pem_public_key(pem)
    except ValueError as e:
        raise ConfigError(f"{path}: not a PEM public key or certificate ({e}).") from None
    return key_of(key, str(path), narrow)

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

from pathlib import Path
from typing import Any, Callable

from common.broker.jwt_auth import JwtAuth, Key
from common.broker.settings import ConfigError
from common.crypto.jws import hmac_algorithms, hmac_verifier

SECRET_MIN_BYTES = 32  # RFC 7518 3.2: a key at least as long as HS256's hash


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
        from cpython_host.jwks import Jwks

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
            fresh.carry(before)  # (cpython_host/jwks.py: its fetch runs in a thread)
    broker.jwt = jwt


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the JWT key: {e.strerror}.") from None


def _narrowed(path: Path | str, algs: list[str], narrow: list[str] | None) -> list[str]:
    if narrow is None:
        return algs
    kept = [a for a in algs if a in narrow]
    if not kept:
        raise ConfigError(f"{path}: this key verifies {', '.join(algs)}, none of algorithms {narrow}.")
    return kept


def secret_key(path: Path, narrow: list[str] | None) -> Key:
    return hmac_key(_read(path).rstrip(), str(path), narrow)


def hmac_key(secret: bytes, where: str, narrow: list[str] | None) -> Key:
    """The Key of an HMAC secret (`where` names it in errors)."""
    if b"-----BEGIN" in secret:
        raise ConfigError(f"{where}: a PEM key is not an HMAC secret (use public_key_file for it).")
    if len(secret) < SECRET_MIN_BYTES:
        raise ConfigError(f"{where}: an HMAC secret of {len(secret)} bytes; at least {SECRET_MIN_BYTES} wanted.")
    algs = _narrowed(where, hmac_algorithms(), narrow)
    return Key(None, algs, hmac_verifier(secret, algs))


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
    algs = _narrowed(where, algs, narrow)

    def verify(alg: str, data: bytes, sig: bytes) -> bool:
        if alg not in algs:
            return False
        try:
            check(alg, data, sig)
        except InvalidSignature:
            return False
        return True

    return Key(kid, algs, verify)

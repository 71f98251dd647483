"""TLS for the host's listeners: the server's SSLContext, the client's identity, and what a failed handshake means.

Theory of operation
-------------------
A TLS listener accepts a plain TCP socket and upgrades it with
loop.start_tls (server.py), so the shell sees each handshake end: its
failure is logged here in words, not lost inside asyncio, and its duration
counts against the core's connect timeout (the core's clock starts at the
accept). The SSLContext is built from the [[listener]] table's files by
server_context(); on SIGHUP a fresh one replaces it, so new handshakes use
the new certificate while established connections keep theirs.

Every file problem becomes a ConfigError naming the listener, the key, the
file and what to do: at start-up the CLI exits 2 with it; on SIGHUP the old
context stays and the message is logged.
"""

from __future__ import annotations

import ssl
from typing import Any

from common.broker.settings import ConfigError
from cpython_host.config import Listener

# [[listener]] identity -> the subjectAltName type name in SSLObject.getpeercert()
SAN_TYPES = {"san_dns": "DNS", "san_email": "email", "san_uri": "URI"}


class _EncryptedKey(Exception):
    """The key file asked for a password (raised by the password callback: OpenSSL must not prompt)."""


def _no_password() -> bytes:
    raise _EncryptedKey


def _read(lst: Listener, key: str) -> str:
    path = getattr(lst, key)
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        raise ConfigError(f"{lst.where}: {key} {path}: no such file; give the path of an existing PEM file.") from None
    except IsADirectoryError:
        raise ConfigError(f"{lst.where}: {key} {path}: a directory, not a PEM file.") from None
    except OSError as e:
        raise ConfigError(
            f"{lst.where}: {key} {path}: cannot read it ({e.strerror}); make it readable by the user siskin runs as."
        ) from None


def _load_certificates(lst: Listener, key: str, ctx: ssl.SSLContext) -> None:
    """Load the PEM certificates of file `key` into ctx as trusted; ConfigError unless OpenSSL can parse one."""
    path = getattr(lst, key)
    text = _read(lst, key)
    if "-----BEGIN CERTIFICATE-----" not in text:
        raise ConfigError(f"{lst.where}: {key} {path}: no PEM certificate in it (-----BEGIN CERTIFICATE-----).")
    try:
        ctx.load_verify_locations(cadata=text)
    except ssl.SSLError as e:
        raise ConfigError(f"{lst.where}: {key} {path}: not a valid PEM certificate ({e.reason or e}).") from None


def server_context(lst: Listener) -> ssl.SSLContext:
    """The SSLContext for a TLS listener's handshakes; ConfigError for a bad file."""
    # The certificate alone first (into a throwaway context), for a message
    # that names it rather than OpenSSL's "PEM lib" for either file.
    _load_certificates(lst, "certfile", ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER))
    key = _read(lst, "keyfile")
    if "PRIVATE KEY-----" not in key:
        raise ConfigError(
            f"{lst.where}: keyfile {lst.keyfile}: no PEM private key in it (-----BEGIN ... PRIVATE KEY-----)."
        )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3 if lst.tls_version == "tlsv1.3" else ssl.TLSVersion.TLSv1_2
    if lst.ciphers:
        try:
            ctx.set_ciphers(lst.ciphers)
        except ssl.SSLError:
            raise ConfigError(
                f"{lst.where}: ciphers = {lst.ciphers!r}: OpenSSL knows no cipher of it; "
                "give an OpenSSL cipher list (openssl ciphers -v 'LIST' shows what it selects)."
            ) from None
    try:
        ctx.load_cert_chain(lst.certfile, lst.keyfile, password=_no_password)
    except _EncryptedKey:
        raise ConfigError(
            f"{lst.where}: keyfile {lst.keyfile}: the key is encrypted; siskin needs it unencrypted "
            "(openssl pkey -in KEY -out NEWKEY, then protect NEWKEY with file permissions: chmod 600)."
        ) from None
    except ssl.SSLError as e:
        if e.reason == "KEY_VALUES_MISMATCH":
            raise ConfigError(
                f"{lst.where}: keyfile {lst.keyfile} is not the private key of certfile {lst.certfile}; "
                "give the key the certificate was issued for."
            ) from None
        raise ConfigError(
            f"{lst.where}: certfile {lst.certfile} / keyfile {lst.keyfile}: OpenSSL refused them ({e}); "
            "give a PEM certificate and its unencrypted PEM private key."
        ) from None
    if lst.cafile:
        _load_certificates(lst, "cafile", ctx)
        # Without require_certificate a client certificate is optional, but
        # one that is sent must still verify: a bad one fails the handshake.
        ctx.verify_mode = ssl.CERT_REQUIRED if lst.require_certificate else ssl.CERT_OPTIONAL
    if lst.crlfile:
        _load_crl(lst, ctx)
    return ctx


def _load_crl(lst: Listener, ctx: ssl.SSLContext) -> None:
    """The listener's revocation list(s): a client certificate they revoke fails the handshake (read again with the
    certificates on SIGHUP). Only the client's own certificate is checked (OpenSSL's CRL_CHECK_LEAF, as Mosquitto)."""
    text = _read(lst, "crlfile")
    if "-----BEGIN X509 CRL-----" not in text:
        raise ConfigError(
            f"{lst.where}: crlfile {lst.crlfile}: no PEM revocation list in it (-----BEGIN X509 CRL-----)."
        )
    try:
        ctx.load_verify_locations(cafile=lst.crlfile)  # (a file: cadata takes certificates only)
    except ssl.SSLError as e:
        raise ConfigError(
            f"{lst.where}: crlfile {lst.crlfile}: not a valid PEM revocation list ({e.reason or e})."
        ) from None
    ctx.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF


def peer_identity(cert: dict[str, Any] | None, field: str) -> str | None:
    """The identity in a verified client certificate (getpeercert()): its CN or first SAN of a type, or None."""
    if not cert:
        return None
    if field == "subject":
        return subject_text(cert.get("subject", ()))
    if field == "cn":
        for rdn in cert.get("subject", ()):
            for name, value in rdn:
                if name == "commonName":
                    return str(value)
        return None
    wanted = SAN_TYPES[field]
    for kind, value in cert.get("subjectAltName", ()):
        if kind == wanted:
            return str(value)
    return None


# getpeercert()'s attribute names -> the short names OpenSSL prints (RFC 2253, RFC 4519).
_SHORT_NAMES = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "street",
    "domainComponent": "DC",
    "userId": "UID",
}


def subject_text(subject: Any) -> str | None:
    """A certificate's subject as Mosquitto's use_subject_as_username makes
    it (OpenSSL's XN_FLAG_RFC2253): the last RDN first, "CN=dev1,O=Acme,C=GB",
    RFC 2253's special characters escaped; None for an empty subject."""
    parts = []
    for rdn in reversed(subject):
        atoms = []
        for name, value in rdn:
            text = "".join("\\" + ch if ch in ',+"\\<>;' else ch for ch in str(value))
            if text[:1] in ("#", " "):
                text = "\\" + text
            if text.endswith(" "):
                text = text[:-1] + "\\ "
            atoms.append(f"{_SHORT_NAMES.get(name, name)}={text}")
        parts.append("+".join(atoms))
    return ",".join(parts) or None


def usable_identity(identity: str) -> bool:
    """An identity is a user name only if MQTT could carry it: non-empty UTF-8, no U+0000 or other control
    characters (which no log line should show either)."""
    if not identity or len(identity.encode("utf-8", "surrogatepass")) > 65535:
        return False
    for ch in identity:
        if ch < " " or "\x7f" <= ch <= "\x9f" or "\ud800" <= ch <= "\udfff":
            return False
    return True


def handshake_failure(exc: BaseException, timeout: float) -> str:
    """A failed handshake in words for the log (never a traceback)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"the client certificate was refused: {exc.verify_message}"
    if isinstance(exc, ssl.SSLError):
        reason = exc.reason or ""
        if reason in ("WRONG_VERSION_NUMBER", "HTTP_REQUEST", "UNKNOWN_PROTOCOL", "RECORD_LAYER_FAILURE"):
            return f"the client does not speak TLS (plain MQTT to the TLS port?) ({reason})"
        if reason == "PEER_DID_NOT_RETURN_A_CERTIFICATE":
            return "the client sent no certificate, and this listener requires one (require_certificate)"
        if reason in ("UNSUPPORTED_PROTOCOL", "NO_PROTOCOLS_AVAILABLE", "TLSV1_ALERT_PROTOCOL_VERSION"):
            return f"the client offers no TLS version this listener accepts (tls_version) ({reason})"
        if "ALERT" in reason:
            # The client gave up on us: usually it does not trust our
            # certificate (unknown CA, expired, wrong host name).
            return f"the client aborted the handshake (alert {reason}); check that it trusts the certificate"
        return f"TLS error {reason or exc}"
    if isinstance(exc, ConnectionAbortedError) and "handshake" in str(exc):
        return f"not completed within connect_timeout ({timeout:g} s)"
    if isinstance(exc, (ConnectionResetError, BrokenPipeError)):
        return "the client closed the connection"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__

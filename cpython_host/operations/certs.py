"""What a PEM certificate file says about itself: its name and when it expires.

For the status page's certificate table (cpython_host/operations/status.py): the
TLS listeners' and the bridges' certificate and CA files. The standard
library loads certificates into an SSLContext but shows none of a server
certificate's fields, and `cryptography` is optional, so this reads the
few DER fields it needs itself (RFC 5280 4.1): validity (UTCTime or
GeneralizedTime), the subject's Common Name and the subjectAltName's DNS
names and IP addresses. A file is read again only when its size or mtime
changed (the page asks every 2 s; a SIGHUP reload may have renewed it).
"""

from __future__ import annotations

import base64
import binascii
import calendar
import ipaddress
import os
from typing import Any

_BEGIN = "-----BEGIN CERTIFICATE-----"
_END = "-----END CERTIFICATE-----"
_CN = bytes.fromhex("550403")  # 2.5.4.3 commonName
_SAN = bytes.fromhex("551d11")  # 2.5.29.17 subjectAltName
_SEQUENCE, _SET, _OID, _OCTETS, _UTCTIME, _GENTIME = 0x30, 0x31, 0x06, 0x04, 0x17, 0x18


class BadCertificate(ValueError):
    pass


def _tlv(der: bytes, i: int) -> tuple[int, int, int]:
    """(tag, start of the value, end of the value) of the DER element at `i`."""
    if i + 2 > len(der):
        raise BadCertificate("truncated")
    tag, n = der[i], der[i + 1]
    i += 2
    if n & 0x80:
        count = n & 0x7F
        if not 0 < count <= 4 or i + count > len(der):
            raise BadCertificate("bad length")
        n = int.from_bytes(der[i : i + count], "big")
        i += count
    if i + n > len(der):
        raise BadCertificate("truncated")
    return tag, i, i + n


def _children(der: bytes, start: int, end: int) -> list[tuple[int, int, int]]:
    out = []
    while start < end:
        tag, s, e = _tlv(der, start)
        out.append((tag, s, e))
        start = e
    return out


def _time(der: bytes, tag: int, s: int, e: int) -> int:
    """A UTCTime / GeneralizedTime (RFC 5280: ...Z, seconds present) as Unix seconds."""
    text = der[s:e].decode("ascii")
    if tag == _UTCTIME:
        year = int(text[:2])
        text = str(1900 + year if year >= 50 else 2000 + year) + text[2:]
    elif tag != _GENTIME:
        raise BadCertificate("validity is not a time")
    if len(text) != 15 or not text.endswith("Z"):
        raise BadCertificate(f"unexpected time {text!r}")
    fields = (int(text[0:4]), int(text[4:6]), int(text[6:8]), int(text[8:10]), int(text[10:12]), int(text[12:14]))
    return calendar.timegm(fields)


def _common_name(der: bytes, s: int, e: int) -> str:
    for _set, rs, re_ in _children(der, s, e):  # RDNs
        for _seq, as_, ae in _children(der, rs, re_):  # AttributeTypeAndValue
            (oid, os_, oe), (_t, vs, ve) = _children(der, as_, ae)[:2]
            if oid == _OID and der[os_:oe] == _CN:
                return der[vs:ve].decode("utf-8", "replace")
    return ""


def _alt_names(der: bytes, s: int, e: int) -> list[str]:
    """subjectAltName's DNS names and IP addresses from the [3] extensions."""
    (_seq, s, e), *_ = _children(der, s, e)
    for _ext, xs, xe in _children(der, s, e):
        parts = _children(der, xs, xe)
        oid, os_, oe = parts[0]
        if oid != _OID or der[os_:oe] != _SAN:
            continue
        _octets, vs, ve = parts[-1]
        (_names, ns, ne), *_ = _children(der, vs, ve)
        names = []
        for tag, gs, ge in _children(der, ns, ne):
            if tag == 0x82:  # dNSName
                names.append(der[gs:ge].decode("ascii", "replace"))
            elif tag == 0x87 and ge - gs in (4, 16):  # iPAddress
                names.append(str(ipaddress.ip_address(der[gs:ge])))
        return names
    return []


def describe(der: bytes) -> dict[str, Any]:
    """{"subject": CN or the first alternative name, "names": alternative
    names, "not_before", "not_after": Unix seconds} of one DER certificate;
    BadCertificate if it is not one."""
    try:
        (tag, s, e), *_ = _children(der, *_tlv(der, 0)[1:])
        if tag != _SEQUENCE:
            raise BadCertificate("no tbsCertificate")
        fields = _children(der, s, e)
        if fields and fields[0][0] == 0xA0:  # [0] version
            fields = fields[1:]
        validity, subject = fields[3], fields[4]
        (bt, bs, be), (at, as_, ae) = _children(der, validity[1], validity[2])[:2]
        names: list[str] = []
        for tag, xs, xe in fields[5:]:
            if tag == 0xA3:  # [3] extensions
                names = _alt_names(der, xs, xe)
        return {
            "subject": _common_name(der, subject[1], subject[2]) or (names[0] if names else ""),
            "names": names,
            "not_before": _time(der, bt, bs, be),
            "not_after": _time(der, at, as_, ae),
        }
    except (IndexError, ValueError, UnicodeDecodeError) as e:
        raise BadCertificate(f"not a certificate ({e})") from None


def pem_certificates(text: str) -> list[bytes]:
    """The DER bytes of each certificate block of a PEM text."""
    out = []
    for block in text.split(_BEGIN)[1:]:
        body = block.split(_END, 1)[0]
        try:
            out.append(base64.b64decode("".join(body.split()), validate=True))
        except (binascii.Error, ValueError):
            raise BadCertificate("a certificate block is not base64") from None
    return out


class CertificateFiles:
    """The facts of certificate files, read again when a file changes."""

    def __init__(self) -> None:
        self.cache: dict[str, tuple[tuple[int, int], dict[str, Any]]] = {}

    def read(self, path: str) -> dict[str, Any]:
        """{"file", and either "subject", "names", "not_before", "not_after"
        (the certificate that expires first, for a file of several: a CA
        bundle), "count"; or "error"}."""
        try:
            st = os.stat(path)
        except OSError as e:
            self.cache.pop(path, None)
            return {"file": path, "error": e.strerror or str(e)}
        stamp = (st.st_mtime_ns, st.st_size)
        known = self.cache.get(path)
        if known is not None and known[0] == stamp:
            return known[1]
        try:
            with open(path, encoding="ascii", errors="replace") as f:
                blocks = pem_certificates(f.read())
            if not blocks:
                raise BadCertificate("no PEM certificate in it")
            facts = [describe(der) for der in blocks]
            first = min(facts, key=lambda c: c["not_after"])
            info = {"file": path, **first, "count": len(facts)}
        except (OSError, BadCertificate) as e:
            info = {"file": path, "error": str(e)}
        if len(self.cache) > 64:  # files of bridges since removed
            self.cache.clear()
        self.cache[path] = (stamp, info)
        return info

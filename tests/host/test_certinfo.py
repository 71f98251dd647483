"""cpython_host/operations/certs.py reads a certificate's name and validity as `cryptography` does.

Certificates made by `cryptography` itself (EC and RSA keys; validity
dates before 2050, written as UTCTime, and after, as GeneralizedTime;
with and without a Common Name), a CA bundle (the first to expire is the
one shown), and files that are no certificate.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID
from hypothesis import given
from hypothesis import strategies as st

from cpython_host.operations.certs import BadCertificate, CertificateFiles, describe, pem_certificates

UTC = datetime.UTC


def make(
    not_after: datetime.datetime, cn: str | None = "gateway.lan", names: tuple[str, ...] = (), rsa_key: bool = False
) -> x509.Certificate:
    key = rsa.generate_private_key(65537, 2048) if rsa_key else ec.generate_private_key(ec.SECP256R1())
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Siskin tests")]
    if cn is not None:
        attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    name = x509.Name(attrs)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
        .not_valid_after(not_after)
    )
    if names:
        alt: list[x509.GeneralName] = []
        for n in names:
            try:
                alt.append(x509.IPAddress(ipaddress.ip_address(n)))
            except ValueError:
                alt.append(x509.DNSName(n))
        builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
    return builder.sign(key, hashes.SHA256())


def pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


@pytest.mark.parametrize(
    "not_after, rsa_key",
    [
        (datetime.datetime(2027, 12, 31, 23, 59, 59, tzinfo=UTC), False),  # UTCTime
        (datetime.datetime(2049, 12, 31, 23, 59, 59, tzinfo=UTC), True),  # UTCTime, its last year
        (datetime.datetime(2050, 1, 1, 0, 0, 0, tzinfo=UTC), False),  # GeneralizedTime from 2050 (RFC 5280 4.1.2.5)
        (datetime.datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC), True),  # "no well-defined expiration"
    ],
)
def test_validity_as_cryptography_reads_it(not_after: datetime.datetime, rsa_key: bool) -> None:
    cert = make(not_after, names=("gw.lan", "192.0.2.7", "2001:db8::1"), rsa_key=rsa_key)
    (der,) = pem_certificates(pem(cert))
    facts = describe(der)
    assert facts["not_after"] == int(cert.not_valid_after_utc.timestamp())
    assert facts["not_before"] == int(cert.not_valid_before_utc.timestamp())
    assert facts["subject"] == "gateway.lan"
    assert facts["names"] == ["gw.lan", "192.0.2.7", "2001:db8::1"]


def test_subject_without_a_common_name_is_its_first_alternative_name() -> None:
    cert = make(datetime.datetime(2030, 1, 1, tzinfo=UTC), cn=None, names=("broker.example", "10.0.0.1"))
    assert describe(pem_certificates(pem(cert))[0])["subject"] == "broker.example"
    bare = make(datetime.datetime(2030, 1, 1, tzinfo=UTC), cn=None)
    assert describe(pem_certificates(pem(bare))[0])["subject"] == ""


def test_a_file_read_again_when_it_changes(tmp_path: Path) -> None:
    files = CertificateFiles()
    path = tmp_path / "ca-bundle.crt"
    later = make(datetime.datetime(2031, 5, 1, tzinfo=UTC), cn="later")
    sooner = make(datetime.datetime(2029, 5, 1, tzinfo=UTC), cn="sooner")
    path.write_text(pem(later) + pem(sooner))
    info = files.read(str(path))
    assert (info["subject"], info["count"]) == ("sooner", 2)  # a bundle: the first to expire
    # Renewed (a SIGHUP reload takes the new file): the page shows the new one.
    renewed = make(datetime.datetime(2033, 5, 1, tzinfo=UTC), cn="renewed")
    path.write_text(pem(renewed))
    os.utime(path, ns=(0, path.stat().st_mtime_ns + 1_000_000))
    assert files.read(str(path))["subject"] == "renewed"


def test_what_is_not_a_certificate(tmp_path: Path) -> None:
    files = CertificateFiles()
    assert "No such file" in files.read(str(tmp_path / "missing.crt"))["error"]
    key = tmp_path / "server.key"
    key.write_text("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
    assert files.read(str(key))["error"] == "no PEM certificate in it"
    broken = tmp_path / "broken.crt"
    broken.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    assert files.read(str(broken))["error"].startswith("not a certificate")
    garbage = tmp_path / "garbage.crt"
    garbage.write_text("-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n")
    assert "base64" in files.read(str(garbage))["error"]
    for junk in (b"", b"\x30", b"\x30\x84\xff\xff\xff\xff", b"\x30\x03\x02\x01\x01"):
        with pytest.raises(BadCertificate):
            describe(junk)


VALID = pem_certificates(pem(make(datetime.datetime(2030, 1, 1, tzinfo=UTC), names=("gw.lan", "10.0.0.1"))))[0]


@given(st.lists(st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 255)), max_size=4), st.integers(0, len(VALID)))
def test_damaged_certificate_is_read_or_refused(edits: list[tuple[int, int]], cut: int) -> None:
    """A damaged file gives facts or BadCertificate, never another exception (the page shows the error)."""
    der = bytearray(VALID[:cut] if cut else VALID)
    for at, value in edits:
        if at < len(der):
            der[at] = value
    try:
        describe(bytes(der))
    except BadCertificate:
        pass

"""`siskin cert`: a self-signed TLS certificate and key for this gateway's names and addresses.

For the [http] listener (the status page off loopback needs HTTPS) or a
TLS [[listener]] on a LAN without a CA: the certificate names every way a
browser or client reaches the machine (subjectAltName: its host name,
NAME.local, localhost and each address of its interfaces, unless told
otherwise), and the command prints its SHA-256 fingerprint, the figure a
browser's certificate viewer shows, to compare before accepting it.

An EC P-256 key (what every browser and the boards' TLS take, and cheap on
a Pi), the certificate valid for --days, for TLS servers only (CA:FALSE,
extendedKeyUsage serverAuth: Firefox refuses a CA certificate used as a
server's). Clients pin it as their CA file (`mosquitto_sub --cafile`,
`siskin ctl --cafile`). Built with the `cryptography` package when it is
installed; without it the command says how to install it, or prints the
openssl command that makes the same files.
"""

from __future__ import annotations

import argparse
import datetime
import grp
import ipaddress
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Union

from cpython_host.hints import install_advice

Address = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]  # (PyPy's 3.9: no X | Y at run time)

DEFAULT_DAYS = 825

EPILOG = """\
examples:
  sudo siskin cert -o /etc/siskin --group siskin      the gateway's names and addresses
  siskin cert --name gw.example.lan --ip 192.168.1.20 --days 365 -o .

Then, in /etc/siskin/siskin.toml (docs/monitoring.md, "The page on the LAN"):
  [http]
  host = "0.0.0.0"
  certfile = "siskin.crt"
  keyfile = "siskin.key"
and `sudo systemctl restart siskin`. The browser warns about a certificate
no authority signed: compare the fingerprint it shows with the one printed
here, then accept it. Clients verify it with --cafile siskin.crt.

Needs the Python package cryptography (Debian: python3-cryptography; a pipx
install: pipx inject with its PIPX_HOME, as the message says); without it,
the openssl command that does the same is printed.
"""


def interface_addresses() -> list[Address]:
    """The addresses of this machine's interfaces (Linux /proc), loopback included, link-local
    IPv6 left out (a URL cannot name one without its interface)."""
    found: set[Address] = {ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")}
    try:
        # fib_trie lists each local IPv4 address as "|-- ADDR" followed by "/32 host LOCAL".
        with open("/proc/net/fib_trie") as f:
            lines = f.read().splitlines()
        for i in range(1, len(lines)):  # (no itertools.pairwise on PyPy's 3.9)
            if lines[i].strip() == "/32 host LOCAL":
                found.add(ipaddress.ip_address(lines[i - 1].split()[-1]))
    except (OSError, ValueError):
        pass
    try:
        with open("/proc/net/if_inet6") as f:
            for line in f:
                addr = ipaddress.IPv6Address(int(line.split()[0], 16))
                if not addr.is_link_local:
                    found.add(addr)
    except (OSError, ValueError, IndexError):
        pass
    return sorted(found, key=lambda a: (a.version, a))


def default_names() -> list[str]:
    """The host name, its .local (mDNS) name, its fully qualified name if it has one, localhost."""
    host = socket.gethostname()
    names = [host, f"{host.split('.')[0]}.local", socket.getfqdn(), "localhost"]
    return list(dict.fromkeys(n for n in names if n and not is_address(n)))


def is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def fingerprint(der: bytes) -> str:
    """SHA-256 of the certificate as browsers show it: AB:CD:..."""
    import hashlib

    return ":".join(f"{b:02X}" for b in hashlib.sha256(der).digest())


def make(names: Sequence[str], addresses: Sequence[Address], days: int) -> tuple[bytes, bytes, bytes]:
    """(certificate PEM, key PEM, certificate DER); ImportError without `cryptography`."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0] if names else str(addresses[0]))])
    now = datetime.datetime.now(datetime.timezone.utc)
    alt: list[x509.GeneralName] = [x509.DNSName(n) for n in names]
    alt += [x509.IPAddress(a) for a in addresses]
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))  # a client's clock a little behind
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_encipherment=False,
                content_commitment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(ski, critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem, cert.public_bytes(serialization.Encoding.DER)


def openssl_command(names: Sequence[str], addresses: Sequence[Address], days: int, cert: Path, key: Path) -> str:
    """The openssl (>= 1.1.1) command that makes the same kind of certificate."""
    san = ",".join([f"DNS:{n}" for n in names] + [f"IP:{a}" for a in addresses])
    cn = names[0] if names else str(addresses[0])
    return (
        f"openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days {days} "
        f"-subj '/CN={cn}' -addext 'subjectAltName={san}' -addext 'basicConstraints=critical,CA:FALSE' "
        f"-addext 'extendedKeyUsage=serverAuth' -keyout {key} -out {cert}"
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="siskin cert",
        description="Make a self-signed TLS certificate and private key for this gateway (PEM files\n"
        "DIR/NAME.crt and DIR/NAME.key) and print the certificate's SHA-256 fingerprint, to\n"
        "compare with what the browser shows. It names the machine's host name, NAME.local,\n"
        "localhost and the addresses of its interfaces; --name and --ip replace those.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--name", action="append", default=[], metavar="NAME", help="a DNS name for the certificate (repeatable)"
    )
    p.add_argument(
        "--ip", action="append", default=[], metavar="ADDR", help="an IP address for the certificate (repeatable)"
    )
    p.add_argument("--days", type=int, default=DEFAULT_DAYS, help=f"how long it is valid (default {DEFAULT_DAYS} days)")
    p.add_argument("-o", "--output-dir", default=".", metavar="DIR", help="where to write the files (default .)")
    p.add_argument("--file-name", default="siskin", metavar="NAME", help="NAME.crt and NAME.key (default siskin)")
    p.add_argument(
        "--group",
        metavar="GROUP",
        help="let GROUP read the key (mode 0640), e.g. siskin, the service's group; default: the owner only (0600)",
    )
    p.add_argument("--force", action="store_true", help="replace files that exist")
    return p


def main(argv: Sequence[str]) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    if not 1 <= args.days <= 36500:
        p.error("--days wants 1..36500")
    try:
        addresses = [ipaddress.ip_address(a) for a in args.ip]
    except ValueError as e:
        p.error(f"--ip: {e}")
    for name in args.name:
        if is_address(name):
            p.error(f"--name {name}: an address; give it with --ip")
    given = bool(args.name or args.ip)
    names: list[str] = list(dict.fromkeys(args.name)) if given else default_names()
    if not given:
        addresses = interface_addresses()
    gid = None
    if args.group is not None:
        try:
            gid = grp.getgrnam(args.group).gr_gid
        except KeyError:
            p.error(f"--group {args.group}: no such group")
    out = Path(args.output_dir)
    cert_path, key_path = out / f"{args.file_name}.crt", out / f"{args.file_name}.key"
    if not args.force:
        for path in (cert_path, key_path):
            if path.exists():
                p.error(f"{path} exists; --force replaces it")
    try:
        cert_pem, key_pem, der = make(names, addresses, args.days)
    except ImportError:
        print(
            "siskin cert: needs the Python package cryptography, which is not installed: "
            + install_advice("cryptography", "python3-cryptography")
            + ". openssl makes the same files:\n  "
            + openssl_command(names, addresses, args.days, cert_path, key_path),
            file=sys.stderr,
        )
        return 1
    out.mkdir(parents=True, exist_ok=True)
    write(key_path, key_pem, 0o600 if gid is None else 0o640, gid)
    write(cert_path, cert_pem, 0o644, None)
    print(
        f"certificate {cert_path}\nprivate key {key_path} (mode {'0600' if gid is None else '0640, group ' + args.group})"
    )
    print(f"names:      {', '.join(names) or '-'}")
    print(f"addresses:  {', '.join(str(a) for a in addresses) or '-'}")
    until = datetime.date.today() + datetime.timedelta(days=args.days)
    print(f"valid for {args.days} days, until {until.isoformat()}")
    print(f"SHA-256 fingerprint (compare it with the browser's):\n  {fingerprint(der)}")
    return 0


def write(path: Path, data: bytes, mode: int, gid: int | None) -> None:
    """Write `data` to a new file with `mode` (never readable by others in between)."""
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        if gid is not None:
            os.fchown(f.fileno(), -1, gid)
        os.fchmod(f.fileno(), mode)
        f.write(data)
    os.replace(tmp, path)

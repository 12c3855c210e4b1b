"""The local CA and the server certificate of `reach local up --tls` (the `cryptography` package, no openssl CLI).

One CA per REACH_HOME signs one certificate for `127.0.0.1` and `localhost` (both as subject alternative names, so
clients verify the host as well as the chain). The broker uses it on its SASL_SSL and controller listeners (and as
its client certificate towards its own controller), Redis on its TLS port, the gateway for HTTPS. Files are PEM; the
keys are written 0600 and are not encrypted (the processes that read them run as the same user and hold no
passphrase). A later `up` keeps the files while the certificate is valid for more than RENEW_BEFORE and was signed by
the CA next to it (docs/decisions/0038-tls-and-auth-on-every-hop.md)."""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 825
CERT_DAYS = 397  # what browsers and most TLS stacks accept as the longest leaf lifetime
RENEW_BEFORE = datetime.timedelta(days=30)
HOSTS = ("localhost",)
ADDRESSES = ("127.0.0.1", "::1")


@dataclass(frozen=True)
class TlsFiles:
    """The PEM files of one REACH_HOME's TLS set-up."""

    ca: Path
    cert: Path
    key: Path

    @property
    def directory(self) -> Path:
        return self.ca.parent


def files_in(directory: Path) -> TlsFiles:
    return TlsFiles(ca=directory / "ca.pem", cert=directory / "server.pem", key=directory / "server-key.pem")


def ensure(directory: Path, *, now: datetime.datetime | None = None) -> TlsFiles:
    """The CA and server certificate under `directory`, made when missing, expiring or not signed by that CA."""
    now = now or datetime.datetime.now(datetime.UTC)
    files = files_in(directory)
    if _usable(files, now):
        return files
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = _ca(files, now)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Agent-Reach local"),
                      x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    alt = [x509.DNSName(h) for h in HOSTS] + [x509.IPAddress(ipaddress.ip_address(a)) for a in ADDRESSES]
    cert = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(ca_cert.subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=CERT_DAYS))
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        # serverAuth for every listener; clientAuth because the broker presents it to its own controller (mutual TLS)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                       critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    _write(files.key, _private_pem(key), secret=True)
    _write(files.cert, cert.public_bytes(serialization.Encoding.PEM))
    return files


def _ca(files: TlsFiles, now: datetime.datetime) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """The CA of the directory, or a new one when it is missing or expires before a new leaf would."""
    ca_key_file = files.directory / "ca-key.pem"
    try:
        ca_cert = x509.load_pem_x509_certificate(files.ca.read_bytes())
        ca_key = serialization.load_pem_private_key(ca_key_file.read_bytes(), password=None)
        if isinstance(ca_key, ec.EllipticCurvePrivateKey) and \
                ca_cert.not_valid_after_utc > now + datetime.timedelta(days=CERT_DAYS):
            return ca_key, ca_cert
    except (OSError, ValueError):
        pass
    ca_key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Agent-Reach local"),
                      x509.NameAttribute(NameOID.COMMON_NAME, "Agent-Reach local CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    _write(ca_key_file, _private_pem(ca_key), secret=True)
    _write(files.ca, ca_cert.public_bytes(serialization.Encoding.PEM))
    return ca_key, ca_cert


def _usable(files: TlsFiles, now: datetime.datetime) -> bool:
    try:
        ca = x509.load_pem_x509_certificate(files.ca.read_bytes())
        cert = x509.load_pem_x509_certificate(files.cert.read_bytes())
        serialization.load_pem_private_key(files.key.read_bytes(), password=None)
        cert.verify_directly_issued_by(ca)
    except (OSError, ValueError, TypeError, InvalidSignature):
        return False
    return cert.not_valid_after_utc - now > RENEW_BEFORE


def _private_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    # PKCS#8: what Kafka's PEM key store reads (it refuses the "EC PRIVATE KEY" form)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _write(path: Path, data: bytes, *, secret: bool = False) -> None:
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if secret else 0o644)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    tmp.replace(path)

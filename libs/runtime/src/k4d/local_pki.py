"""A local certificate authority for `k4d up` (and tests): a CA, server certificates
naming `localhost` and `127.0.0.1`, and client certificates for mutual TLS, written as PEM
files with private keys readable by their owner only.

Needs the `cryptography` package (the runtime's `local` extra); imported at the point of
use so that the runtime itself does not need it. Kubernetes gets its certificates from
cert-manager instead (infra/k8s).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from k4d.auth import write_secret
from k4d.errors import FailedPrecondition

LOCAL_HOSTS = ("localhost", "127.0.0.1")
CA_DAYS = 365
LEAF_DAYS = 90


@dataclass(frozen=True)
class KeyPair:
    cert: Path  # PEM certificate
    key: Path   # PEM private key (mode 0600)


def _crypto():
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError:
        raise FailedPrecondition("TLS certificates for `k4d up` need the PyPI package "
                                 "cryptography: pip install 'k4d-runtime[local]' (or run "
                                 "`k4d up --insecure`)") from None
    return x509, hashes, serialization, ec, ExtendedKeyUsageOID, NameOID


def _write(pair: KeyPair, cert, key) -> KeyPair:
    _, _, serialization, *_ = _crypto()
    pair.cert.parent.mkdir(parents=True, exist_ok=True)
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    write_secret(pair.key, key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()).decode())
    return pair


def _builder(subject: str, issuer_name, public_key, days: int):
    x509, _, _, _, _, NameOID = _crypto()
    now = datetime.datetime.now(datetime.UTC)
    return (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(issuer_name).public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days)))


def create_ca(directory: Path, name: str = "k4d local CA") -> KeyPair:
    """A self-signed CA (ca.pem, ca-key.pem) in `directory`."""
    x509, hashes, _, ec, _, NameOID = _crypto()
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (_builder(name, subject, key.public_key(), CA_DAYS)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False,
                                         False), critical=True)
            .sign(key, hashes.SHA256()))
    return _write(KeyPair(directory / "ca.pem", directory / "ca-key.pem"), cert, key)


def issue(ca: KeyPair, directory: Path, name: str, *, hosts: tuple[str, ...] = LOCAL_HOSTS,
          client: bool = False) -> KeyPair:
    """A certificate signed by `ca`: a server's (subject alternative names `hosts`) or,
    with `client`, a client's for mutual TLS. Files `<name>.pem` and `<name>-key.pem`."""
    x509, hashes, serialization, ec, EKU, _ = _crypto()
    ca_cert = x509.load_pem_x509_certificate(ca.cert.read_bytes())
    ca_key = serialization.load_pem_private_key(ca.key.read_bytes(), password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    names = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    builder = (_builder(name, ca_cert.subject, key.public_key(), LEAF_DAYS)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage(
                   [EKU.CLIENT_AUTH] if client else [EKU.SERVER_AUTH, EKU.CLIENT_AUTH]),
                   critical=False))
    if names and not client:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return _write(KeyPair(directory / f"{name}.pem", directory / f"{name}-key.pem"), cert, key)


def certificate_valid(cert: Path, ca: Path, min_days_left: float = 1.0) -> bool:
    """Whether `cert` is signed by `ca` and valid for at least `min_days_left` more days."""
    x509, *_ = _crypto()
    try:
        leaf = x509.load_pem_x509_certificate(cert.read_bytes())
        root = x509.load_pem_x509_certificate(ca.read_bytes())
        leaf.verify_directly_issued_by(root)
    except Exception:  # unreadable, not PEM, another CA, a bad signature: reissue
        return False
    left = leaf.not_valid_after_utc - datetime.datetime.now(datetime.UTC)
    return left > datetime.timedelta(days=min_days_left)

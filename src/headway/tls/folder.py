"""A certificates folder: ``ca.crt ca.key`` and ``<role>.crt <role>.key`` for every role.

``init`` makes a new CA and a certificate for every role; it refuses to replace an
existing CA unless forced (every certificate it signed would stop being trusted).
``issue`` rotates one role's certificate with the same CA, keeping the hosts of the
certificate it replaces unless given others. Keys are written mode 0600, certificates
0644, each by rename (a reader never sees half a file); a pair is renamed key first,
certificate last, one right after the other, so a watcher sees the new pair at once.
"""

from __future__ import annotations

import datetime
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from headway.tls.certs import DEFAULT_HOSTS, ROLES, Issued, issue, make_ca, served_hosts

CA = "ca"
KEY_MODE = 0o600
CERT_MODE = 0o644


class CertsFolderError(Exception):
    """The certificates folder cannot be read or written as asked."""


def certificate_path(directory: Path, name: str) -> Path:
    return directory / f"{name}.crt"


def key_path(directory: Path, name: str) -> Path:
    return directory / f"{name}.key"


def init(
    directory: Path,
    *,
    hosts: tuple[str, ...] = DEFAULT_HOSTS,
    days: int,
    ca_days: int,
    force: bool = False,
    now: datetime.datetime | None = None,
) -> list[Path]:
    """A new CA and every role's certificate in ``directory``; the files written."""
    now = now or datetime.datetime.now(datetime.UTC)
    existing = [p for p in (certificate_path(directory, CA), key_path(directory, CA)) if p.exists()]
    if existing and not force:
        raise CertsFolderError(
            f"{existing[0]} exists: replacing the CA distrusts every certificate it signed "
            "(use `headway certs issue` to rotate one role, or --force)"
        )
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    ca = make_ca(days=ca_days, now=now)
    written = write_pair(directory, CA, ca)
    for role in ROLES.values():
        written += write_pair(
            directory, role.name, issue(ca, role, hosts=hosts, days=days, now=now)
        )
    return written


def issue_role(
    directory: Path,
    role_name: str,
    *,
    hosts: tuple[str, ...] | None = None,
    days: int,
    now: datetime.datetime | None = None,
) -> Issued:
    """A fresh certificate and key for one role, signed by the folder's CA, written."""
    role = ROLES.get(role_name)
    if role is None:
        raise CertsFolderError(f"unknown role {role_name!r} (one of {', '.join(ROLES)})")
    ca = load_ca(directory)
    if hosts is None:
        previous = certificate_path(directory, role.name)
        hosts = served_hosts(_read_certificate(previous), role) if previous.exists() else ()
        hosts = hosts or DEFAULT_HOSTS
    leaf = issue(ca, role, hosts=hosts, days=days, now=now or datetime.datetime.now(datetime.UTC))
    write_pair(directory, role.name, leaf)
    return leaf


def load_ca(directory: Path) -> Issued:
    certificate = _read_certificate(certificate_path(directory, CA))
    path = key_path(directory, CA)
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise CertsFolderError(f"{path}: cannot read the CA key ({exc})") from exc
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise CertsFolderError(f"{path}: not an EC private key")
    return Issued(certificate, key)


def write_pair(directory: Path, name: str, issued: Issued) -> list[Path]:
    """Both files staged first, then renamed key first: the pair changes together."""
    key, certificate = key_path(directory, name), certificate_path(directory, name)
    staged_key = _stage(key, issued.key_pem(), KEY_MODE)
    staged_certificate = _stage(certificate, issued.certificate_pem(), CERT_MODE)
    os.replace(staged_key, key)
    os.replace(staged_certificate, certificate)
    return [certificate, key]


def _stage(path: Path, data: bytes, mode: int) -> Path:
    staged = path.with_name(f".{path.name}.{os.getpid()}")
    staged.unlink(missing_ok=True)
    descriptor = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(descriptor, "wb") as file:
        os.fchmod(file.fileno(), mode)  # exactly this, whatever the umask
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    return staged


def _read_certificate(path: Path) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise CertsFolderError(f"{path}: cannot read the certificate ({exc})") from exc

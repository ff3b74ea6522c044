"""An internal CA and the certificates of each role it signs, ECDSA P-256, in memory.

Each internal role's certificate names the role (``worker.headway.internal``) as its
common name and first DNS SAN, then the hosts it is reached by (DNS names and IP
addresses; the public certificate names only those, the first as its common name), and
carries the extended key usages the role needs:

    role       serverAuth  clientAuth  SANs
    gateway        -           x       gateway.headway.internal
    worker         x           x       worker.headway.internal + hosts
    executor       -           x       executor.headway.internal
    public         x           -       hosts (what clients dial)

The gateway dials workers by IP (Kubernetes pod addresses change), so it checks the
chain against the internal CA and the name ``worker.headway.internal`` (sent as the
TLS server name), not the address. Workers take clientAuth as well: they call the
gateway (model weights), and ``headway up`` gives every process on one machine the
worker's certificate. The CA is ``pathlen:0``: it signs leaves, never another CA.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from headway.tls.names import role_name

DEFAULT_HOSTS = ("localhost", "127.0.0.1", "::1")


@dataclass(frozen=True, slots=True)
class Role:
    name: str
    server: bool
    client: bool
    hosts: bool
    """Whether the hosts it is reached by go in its SANs (servers only)."""
    internal_name: bool = True

    @property
    def dns_name(self) -> str:
        return role_name(self.name)


ROLES: dict[str, Role] = {
    role.name: role
    for role in (
        Role("gateway", server=False, client=True, hosts=False),
        Role("worker", server=True, client=True, hosts=True),
        Role("executor", server=False, client=True, hosts=False),
        Role("public", server=True, client=False, hosts=True, internal_name=False),
    )
}


@dataclass(frozen=True, slots=True)
class Issued:
    """A certificate and its private key."""

    certificate: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    def certificate_pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    def key_pem(self) -> bytes:
        return self.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )


def parse_hosts(text: str) -> tuple[str, ...]:
    """``"a.example, 10.0.0.1,::1"`` -> the hosts, trimmed, empty entries dropped."""
    return tuple(host.strip() for host in text.split(",") if host.strip())


def subject_alternative_names(names: tuple[str, ...]) -> list[x509.GeneralName]:
    """DNS names and IP addresses (v4 or v6), in order, without repeats."""
    out: list[x509.GeneralName] = []
    for name in dict.fromkeys(names):
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            out.append(x509.DNSName(name))
    return out


def make_ca(*, days: int, now: datetime.datetime, name: str = "headway internal CA") -> Issued:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    certificate = (
        _builder(subject, subject, key.public_key(), days, now)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(signer=True), critical=True)
        .sign(key, hashes.SHA256())
    )
    return Issued(certificate, key)


def issue(
    ca: Issued,
    role: Role,
    *,
    hosts: tuple[str, ...],
    days: int,
    now: datetime.datetime,
) -> Issued:
    """A leaf for ``role`` signed by ``ca``; ``hosts`` count only for roles that serve."""
    names = ((role.dns_name,) if role.internal_name else ()) + (hosts if role.hosts else ())
    if not names:
        raise ValueError(f"the {role.name} certificate needs at least one host")
    usages = [ExtendedKeyUsageOID.SERVER_AUTH] if role.server else []
    usages += [ExtendedKeyUsageOID.CLIENT_AUTH] if role.client else []
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])])
    ca_key_id = ca.certificate.extensions.get_extension_for_class(x509.SubjectKeyIdentifier)
    certificate = (
        _builder(subject, ca.certificate.subject, key.public_key(), days, now)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(signer=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.SubjectAlternativeName(subject_alternative_names(names)), False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_key_id.value),
            critical=False,
        )
        .sign(ca.key, hashes.SHA256())
    )
    return Issued(certificate, key)


def served_hosts(certificate: x509.Certificate, role: Role) -> tuple[str, ...]:
    """The hosts in a leaf's SANs, less the role's own name: what a rotation keeps."""
    try:
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return ()
    hosts = [str(name.value) for name in names.value]
    own = role.dns_name if role.internal_name else None
    return tuple(host for host in hosts if host != own)


def _builder(
    subject: x509.Name,
    issuer: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    days: int,
    now: datetime.datetime,
) -> x509.CertificateBuilder:
    if days <= 0:
        raise ValueError("a certificate must be valid for at least one day")
    # A few minutes back, so a peer whose clock is slightly behind accepts it at once.
    start = now - datetime.timedelta(minutes=5)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
    )


def _key_usage(*, signer: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=not signer,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=signer,
        crl_sign=signer,
        encipher_only=False,
        decipher_only=False,
    )


def certificate_names(pem: bytes) -> frozenset[str]:
    """The identities a PEM certificate carries, as ``tls.identity.peer_names`` reads a
    peer's: its DNS SANs, else its common names (lower case, no wildcards)."""
    certificate = x509.load_pem_x509_certificate(pem)
    try:
        sans = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
        dns = sans.value.get_values_for_type(x509.DNSName)
    except x509.ExtensionNotFound:
        dns = []
    if not dns:
        dns = [
            str(attribute.value)
            for attribute in certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        ]
    return frozenset(name.lower() for name in dns if "*" not in name)

"""The internal CA and the role certificates: chains, names, usages, files on disk."""

from __future__ import annotations

import datetime
import ipaddress
import stat

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError
from typer.testing import CliRunner

from headway.cli import app
from headway.tls.certs import ROLES, issue, make_ca, parse_hosts
from headway.tls.folder import (
    CertsFolderError,
    certificate_path,
    init,
    issue_role,
    key_path,
    load_ca,
)
from headway.tls.names import WORKER_NAME
from tests.unit.tls.tls_memory import serial_on_disk

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
HOSTS = ("worker.example", "10.1.2.3", "::1")


def verifier(ca: x509.Certificate) -> PolicyBuilder:
    return PolicyBuilder().store(Store([ca])).time(NOW + datetime.timedelta(hours=1))


def sans(certificate: x509.Certificate) -> list[str]:
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    return [str(name.value) for name in names.value]


def usages(certificate: x509.Certificate) -> set[x509.ObjectIdentifier]:
    return set(certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)


def test_a_worker_certificate_chains_to_its_ca_under_its_role_name_and_its_ips():
    ca = make_ca(days=30, now=NOW)
    worker = issue(ca, ROLES["worker"], hosts=HOSTS, days=7, now=NOW)
    policy = verifier(ca.certificate)
    for name in (x509.DNSName(WORKER_NAME), x509.IPAddress(ipaddress.ip_address("10.1.2.3"))):
        chain = policy.build_server_verifier(name).verify(worker.certificate, [])
        assert chain[-1] == ca.certificate
    assert sans(worker.certificate) == [WORKER_NAME, "worker.example", "10.1.2.3", "::1"]
    with pytest.raises(VerificationError):
        policy.build_server_verifier(x509.DNSName("gateway.headway.internal")).verify(
            worker.certificate, []
        )
    other = make_ca(days=30, now=NOW)
    with pytest.raises(VerificationError):
        verifier(other.certificate).build_server_verifier(x509.DNSName(WORKER_NAME)).verify(
            worker.certificate, []
        )


def test_each_role_carries_the_usages_it_needs_and_no_more():
    ca = make_ca(days=30, now=NOW)
    server, client = ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH
    expected = {
        "gateway": {client},
        "worker": {server, client},
        "executor": {client},
        "public": {server},
    }
    for name, wanted in expected.items():
        leaf = issue(ca, ROLES[name], hosts=HOSTS, days=7, now=NOW).certificate
        assert usages(leaf) == wanted, name
        constraints = leaf.extensions.get_extension_for_class(x509.BasicConstraints)
        assert constraints.critical and not constraints.value.ca
    policy = verifier(ca.certificate)
    gateway = issue(ca, ROLES["gateway"], hosts=HOSTS, days=7, now=NOW).certificate
    policy.build_client_verifier().verify(gateway, [])
    public = issue(ca, ROLES["public"], hosts=HOSTS, days=7, now=NOW).certificate
    with pytest.raises(VerificationError):
        policy.build_client_verifier().verify(public, [])


def test_only_serving_roles_take_hosts_and_the_ca_signs_leaves_only():
    ca = make_ca(days=30, now=NOW)
    assert sans(issue(ca, ROLES["gateway"], hosts=HOSTS, days=1, now=NOW).certificate) == [
        "gateway.headway.internal"
    ]
    assert sans(issue(ca, ROLES["public"], hosts=HOSTS, days=1, now=NOW).certificate) == list(HOSTS)
    with pytest.raises(ValueError, match="at least one host"):
        issue(ca, ROLES["public"], hosts=(), days=1, now=NOW)
    constraints = ca.certificate.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.value.ca and constraints.value.path_length == 0
    with pytest.raises(ValueError, match="at least one day"):
        make_ca(days=0, now=NOW)


def test_hosts_are_parsed_from_a_comma_separated_list():
    assert parse_hosts(" a.example, 10.0.0.1 ,,::1 ") == ("a.example", "10.0.0.1", "::1")


def test_init_writes_every_role_with_private_keys_readable_by_the_owner_only(tmp_path):
    folder = tmp_path / "certs"
    written = init(folder, days=7, ca_days=30, now=NOW)
    names = ["ca", *ROLES]
    assert sorted(written) == sorted(
        path for name in names for path in (certificate_path(folder, name), key_path(folder, name))
    )
    for name in names:
        assert stat.S_IMODE(key_path(folder, name).stat().st_mode) == 0o600
        assert stat.S_IMODE(certificate_path(folder, name).stat().st_mode) == 0o644
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert not [p.name for p in folder.iterdir() if p.name.startswith(".")]  # nothing staged


def test_init_refuses_to_replace_a_ca_unless_forced(tmp_path):
    init(tmp_path, days=7, ca_days=30, now=NOW)
    first = serial_on_disk(tmp_path, "ca")
    with pytest.raises(CertsFolderError, match="certs issue"):
        init(tmp_path, days=7, ca_days=30, now=NOW)
    assert serial_on_disk(tmp_path, "ca") == first
    init(tmp_path, days=7, ca_days=30, force=True, now=NOW)
    assert serial_on_disk(tmp_path, "ca") != first


def test_issue_rotates_one_role_with_the_same_ca_keeping_its_hosts(tmp_path):
    init(tmp_path, hosts=HOSTS, days=7, ca_days=30, now=NOW)
    ca_before = certificate_path(tmp_path, "ca").read_bytes()
    old = serial_on_disk(tmp_path, "worker")
    leaf = issue_role(tmp_path, "worker", days=7, now=NOW)
    assert leaf.certificate.serial_number == serial_on_disk(tmp_path, "worker") != old
    assert certificate_path(tmp_path, "ca").read_bytes() == ca_before
    assert sans(leaf.certificate) == [WORKER_NAME, *HOSTS]
    policy = verifier(load_ca(tmp_path).certificate)
    policy.build_server_verifier(x509.DNSName(WORKER_NAME)).verify(leaf.certificate, [])
    moved = issue_role(tmp_path, "worker", hosts=("10.9.9.9",), days=7, now=NOW)
    assert sans(moved.certificate) == [WORKER_NAME, "10.9.9.9"]
    with pytest.raises(CertsFolderError, match="unknown role"):
        issue_role(tmp_path, "billing", days=7)
    with pytest.raises(CertsFolderError, match="cannot read"):
        issue_role(tmp_path / "nowhere", "worker", days=7)


def test_the_cli_creates_a_folder_refuses_to_overwrite_it_and_rotates_a_role(tmp_path):
    runner = CliRunner()
    folder = str(tmp_path / "certs")
    made = runner.invoke(app, ["certs", "init", "--dir", folder, "--hosts", "gw.example,10.0.0.5"])
    assert made.exit_code == 0, made.output
    assert sans(x509.load_pem_x509_certificate((tmp_path / "certs/public.crt").read_bytes())) == [
        "gw.example",
        "10.0.0.5",
    ]
    again = runner.invoke(app, ["certs", "init", "--dir", folder])
    assert again.exit_code == 1 and "exists" in again.output
    rotated = runner.invoke(app, ["certs", "issue", "--dir", folder, "--role", "public"])
    assert rotated.exit_code == 0, rotated.output
    serial = format(serial_on_disk(tmp_path / "certs", "public"), "x")
    assert rotated.output.strip().endswith(f"serial {serial}")
    wrong = runner.invoke(app, ["certs", "issue", "--dir", folder, "--role", "nobody"])
    assert wrong.exit_code == 1 and "unknown role" in wrong.output
    empty = runner.invoke(app, ["certs", "init", "--dir", folder, "--hosts", " , ", "--force"])
    assert empty.exit_code == 2

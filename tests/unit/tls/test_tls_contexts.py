"""What each hop's contexts accept and refuse, in real OpenSSL handshakes through memory."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from headway.settings import TlsSettings
from headway.tls.contexts import TlsFilesInvalid, client_context, server_context
from headway.tls.folder import init
from headway.tls.hops import gateway_client, internal_client, internal_server, public_server
from headway.tls.names import WORKER_NAME
from tests.unit.tls.tls_memory import handshake, peer_serial, serial_on_disk


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("certs")
    init(folder, days=7, ca_days=30, force=True)
    return folder


@pytest.fixture(scope="module")
def other(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another CA's folder: the same roles, not trusted by ours."""
    folder = tmp_path_factory.mktemp("other")
    init(folder, days=7, ca_days=30, force=True)
    return folder


def settings(certs: Path, role: str, public: bool = False) -> TlsSettings:
    pair = {"public_cert": certs / "public.crt", "public_key": certs / "public.key"}
    return TlsSettings(
        ca=certs / "ca.crt",
        cert=certs / f"{role}.crt",
        key=certs / f"{role}.key",
        **(pair if public else {}),
    )


def worker_server(certs: Path) -> ssl.SSLContext:
    context = internal_server(settings(certs, "worker"))
    assert context is not None
    return context


def gateway_side(certs: Path) -> ssl.SSLContext:
    source = internal_client(settings(certs, "gateway"))
    assert source is not None
    return source.current()


def test_the_gateway_and_a_worker_agree_on_mutual_tls(certs):
    client_side = handshake(worker_server(certs), gateway_side(certs), WORKER_NAME)
    assert peer_serial(client_side) == serial_on_disk(certs, "worker")
    assert client_side.version() in ("TLSv1.2", "TLSv1.3")


def test_a_worker_refuses_a_caller_without_a_certificate(certs):
    anonymous = client_context(ca=certs / "ca.crt")
    with pytest.raises(ssl.SSLError, match="PEER_DID_NOT_RETURN_A_CERTIFICATE"):
        handshake(worker_server(certs), anonymous, WORKER_NAME)


def test_a_worker_refuses_a_certificate_of_another_ca(certs, other):
    stranger = client_context(
        ca=certs / "ca.crt", cert=other / "gateway.crt", key=other / "gateway.key"
    )
    with pytest.raises(ssl.SSLCertVerificationError) as refused:
        handshake(worker_server(certs), stranger, WORKER_NAME)
    assert "issuer" in refused.value.verify_message


def test_a_worker_refuses_a_certificate_of_its_ca_made_for_serving_only(certs):
    public_as_client = client_context(
        ca=certs / "ca.crt", cert=certs / "public.crt", key=certs / "public.key"
    )
    with pytest.raises(ssl.SSLCertVerificationError) as refused:
        handshake(worker_server(certs), public_as_client, WORKER_NAME)
    assert "purpose" in refused.value.verify_message


def test_the_gateway_refuses_a_worker_with_another_role_name_or_another_ca(certs, other):
    impostor = server_context(certs / "public.crt", certs / "public.key")  # our CA, not a worker
    with pytest.raises(ssl.SSLCertVerificationError, match="not valid for"):
        handshake(impostor, gateway_side(certs), WORKER_NAME)
    foreign = server_context(other / "worker.crt", other / "worker.key")
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(foreign, gateway_side(certs), WORKER_NAME)


def test_callers_of_the_gateway_trust_the_internal_ca_and_check_the_host(certs):
    served = public_server(settings(certs, "worker", public=True))
    assert served is not None
    executor = gateway_client(settings(certs, "executor"))
    assert executor is not None
    client_side = handshake(served, executor.current(), "localhost")
    assert peer_serial(client_side) == serial_on_disk(certs, "public")
    with pytest.raises(ssl.SSLCertVerificationError, match="not valid for"):
        handshake(served, executor.current(), "gateway.elsewhere.example")
    # The public listener asks no client certificate: a tenant's plain client is served.
    handshake(served, client_context(ca=certs / "ca.crt"), "127.0.0.1")


def test_a_process_with_only_the_public_pair_pins_that_certificate(certs, other):
    pair = {"public_cert": certs / "public.crt", "public_key": certs / "public.key"}
    source = gateway_client(TlsSettings(**pair))
    assert source is not None
    served = public_server(TlsSettings(**pair))
    assert served is not None
    handshake(served, source.current(), "localhost")
    elsewhere = server_context(other / "public.crt", other / "public.key")
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(elsewhere, source.current(), "localhost")


def test_no_tls_settings_means_no_contexts():
    none = TlsSettings()
    assert public_server(none) is None
    assert internal_server(none) is None
    assert internal_client(none) is None
    assert gateway_client(none) is None


def test_contexts_speak_tls_1_2_or_newer_only(certs):
    public = public_server(settings(certs, "worker", public=True))
    executor = gateway_client(settings(certs, "executor"))
    assert public is not None and executor is not None
    for context in (worker_server(certs), gateway_side(certs), public, executor.current()):
        assert context.minimum_version == ssl.TLSVersion.TLSv1_2


def test_a_file_that_cannot_be_loaded_is_named(certs, tmp_path):
    garbage = tmp_path / "garbage.crt"
    garbage.write_text("not a certificate\n")
    with pytest.raises(TlsFilesInvalid, match=r"garbage\.crt"):
        server_context(garbage, certs / "worker.key")
    with pytest.raises(TlsFilesInvalid, match=r"garbage\.crt"):
        client_context(ca=garbage)
    with pytest.raises(TlsFilesInvalid, match=r"worker\.crt"):  # the key is another's
        server_context(certs / "worker.crt", certs / "gateway.key")

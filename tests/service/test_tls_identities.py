"""Workers accept only the roles that call them, by the name in the certificate: a
certificate the internal CA signed for another role (billing's, a worker's) is refused as
its handshake ends; and the names a connection presented reach the app, for routes of one
caller (the gateway's batch line routes take only the executor's). Real certificates,
real handshakes on a loopback socket."""

from __future__ import annotations

import asyncio
import datetime
import ssl
from pathlib import Path

import pytest

from headway.settings import EdgeLimits
from headway.tls.certs import Role, certificate_names, issue
from headway.tls.contexts import client_context, server_context
from headway.tls.folder import certificate_path, init, key_path, load_ca, write_pair
from headway.tls.names import WORKER_NAME
from tests.service.test_guarded_protocol import GET, Served, serving, until_closed

WORKER_CALLERS = frozenset({"gateway.headway.internal", "executor.headway.internal"})


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``headway certs init``'s folder, plus a billing certificate of the same CA (a role
    with no hop to workers: what a compromised billing pod would hold)."""
    folder = tmp_path_factory.mktemp("certs")
    init(folder, days=2, ca_days=3)
    now = datetime.datetime.now(datetime.UTC)
    billing = Role("billing", server=False, client=True, hosts=False)
    write_pair(folder, "billing", issue(load_ca(folder), billing, hosts=(), days=2, now=now))
    return folder


def worker_listener(folder: Path) -> ssl.SSLContext:
    return server_context(
        certificate_path(folder, "worker"), key_path(folder, "worker"), folder / "ca.crt"
    )


def as_role(folder: Path, role: str) -> ssl.SSLContext:
    return client_context(
        ca=folder / "ca.crt", cert=certificate_path(folder, role), key=key_path(folder, role)
    )


async def ask(served: Served, client: ssl.SSLContext, name: str) -> bytes:
    """GET over TLS as ``client``; everything the server sent before it closed."""
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", served.port, ssl=client, server_hostname=name
    )
    served.clients.append(writer)
    writer.write(GET.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))
    try:
        return await until_closed(reader)
    except (ConnectionResetError, ssl.SSLError):
        return b""


async def test_a_worker_serves_the_gateway_and_the_executor_and_refuses_other_roles(
    certificates: Path,
) -> None:
    async with serving(EdgeLimits(), worker_listener(certificates), WORKER_CALLERS) as served:
        for role in ("gateway", "executor"):
            answer = await ask(served, as_role(certificates, role), WORKER_NAME)
            assert answer.startswith(b"HTTP/1.1 200"), role
        for role in ("billing", "worker"):
            assert await ask(served, as_role(certificates, role), WORKER_NAME) == b"", role
        assert served.observer.refusals == {"tls_identity": 2}
        assert served.app.peers == [
            frozenset({"gateway.headway.internal"}),
            frozenset({"executor.headway.internal"}),
        ]  # the refused never reached the app
        await served.until(lambda: served.guard.caps.open == 0, "every slot released")


async def test_without_callers_any_certificate_of_the_ca_is_served_as_before(
    certificates: Path,
) -> None:
    async with serving(EdgeLimits(), worker_listener(certificates)) as served:
        answer = await ask(served, as_role(certificates, "billing"), WORKER_NAME)
        assert answer.startswith(b"HTTP/1.1 200")
        assert served.app.peers == [frozenset({"billing.headway.internal"})]


async def test_the_client_port_asks_for_a_certificate_and_passes_its_names_on(
    certificates: Path,
) -> None:
    """The gateway's client port with internal TLS: a client without a certificate is
    served (tenants), and one with the CA's certificate has its names in the scope for the
    line routes to check (``KeyChecks.executor_token``)."""
    public = server_context(
        certificates / "public.crt",
        certificates / "public.key",
        certificates / "ca.crt",
        optional=True,
    )
    async with serving(EdgeLimits(), public) as served:
        tenant = client_context(ca=certificates / "ca.crt")
        assert (await ask(served, tenant, "localhost")).startswith(b"HTTP/1.1 200")
        executor = as_role(certificates, "executor")
        assert (await ask(served, executor, "localhost")).startswith(b"HTTP/1.1 200")
        assert served.app.peers == [None, frozenset({"executor.headway.internal"})]


def test_a_certificate_file_names_what_its_handshake_would(certificates: Path) -> None:
    """``headway up`` reads its shared certificate's names this way, to accept them."""
    pem = certificate_path(certificates, "worker").read_bytes()
    assert "worker.headway.internal" in certificate_names(pem)


async def test_a_pods_own_probe_passes_from_loopback_with_the_workers_certificate(
    certificates: Path,
) -> None:
    """The prod overlay's exec probes present the worker's own certificate from inside the
    pod: accepted from a loopback address (``tls.worker_loopback_callers``), other roles
    still refused there. (Every connection of this test is loopback; that the rule holds
    only there is ``_loopback``'s, below.)"""
    loopback = frozenset({"worker.headway.internal"})
    async with serving(EdgeLimits(), worker_listener(certificates), WORKER_CALLERS) as served:
        served.guard.loopback_callers = loopback
        probe = await ask(served, as_role(certificates, "worker"), WORKER_NAME)
        assert probe.startswith(b"HTTP/1.1 200")
        assert await ask(served, as_role(certificates, "billing"), WORKER_NAME) == b""


def test_only_loopback_addresses_are_loopback() -> None:
    from headway.http.guard import _loopback

    assert _loopback("127.0.0.1") and _loopback("127.8.0.3") and _loopback("::1")
    assert not any(_loopback(host) for host in ("10.0.0.7", "::ffff:10.0.0.7", "", None, "x"))

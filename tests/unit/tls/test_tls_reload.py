"""A context that follows its files: rotation swaps it in, a bad file keeps the old one."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from headway.tls.contexts import TlsFilesInvalid, client_context, server_context
from headway.tls.folder import certificate_path, init, issue_role, key_path
from headway.tls.names import WORKER_NAME
from headway.tls.reload import FixedContext, ReloadingContext
from tests.unit.tls.tls_memory import handshake, peer_serial, serial_on_disk

INTERVAL_S = 5.0


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def certs(tmp_path: Path) -> Path:
    init(tmp_path, days=7, ca_days=30)
    return tmp_path


def worker_context(certs: Path, clock: Clock) -> ReloadingContext:
    ca, cert, key = certs / "ca.crt", certificate_path(certs, "worker"), key_path(certs, "worker")
    return ReloadingContext(
        lambda: server_context(cert, key, client_ca=ca),
        (ca, cert, key),
        interval_s=INTERVAL_S,
        what="worker",
        clock=clock,
    )


def gateway(certs: Path):
    return client_context(
        ca=certs / "ca.crt", cert=certs / "gateway.crt", key=certs / "gateway.key"
    )


def test_a_rotated_certificate_is_served_to_new_handshakes_after_the_interval(certs):
    clock = Clock()
    source = worker_context(certs, clock)
    served = source.serving()
    first = serial_on_disk(certs, "worker")
    assert peer_serial(handshake(served, gateway(certs), WORKER_NAME)) == first

    issue_role(certs, "worker", days=7)
    second = serial_on_disk(certs, "worker")
    clock.now += INTERVAL_S / 2  # not looked at yet
    assert peer_serial(handshake(served, gateway(certs), WORKER_NAME)) == first
    clock.now += INTERVAL_S / 2
    assert peer_serial(handshake(served, gateway(certs), WORKER_NAME)) == second
    assert source.reloads == 1
    # Without a server name in the ClientHello (a caller dialling an IP) it switches too.
    issue_role(certs, "worker", days=7)
    clock.now += INTERVAL_S
    client = gateway(certs)
    client.check_hostname = False
    assert peer_serial(handshake(served, client, None)) == serial_on_disk(certs, "worker")


def test_a_client_context_is_swapped_for_the_next_connections(certs):
    clock = Clock()
    cert, key = certificate_path(certs, "gateway"), key_path(certs, "gateway")
    source = ReloadingContext(
        lambda: client_context(ca=certs / "ca.crt", cert=cert, key=key),
        (certs / "ca.crt", cert, key),
        interval_s=INTERVAL_S,
        what="gateway",
        clock=clock,
    )
    before = source.current()
    issue_role(certs, "gateway", days=7)
    clock.now += INTERVAL_S
    after = source.current()
    assert after is not before
    assert source.current() is after  # built once per change
    worker = server_context(certificate_path(certs, "worker"), key_path(certs, "worker"))
    handshake(worker, after, WORKER_NAME)


def test_files_rewritten_with_the_same_bytes_are_not_reloaded(certs):
    clock = Clock()
    source = worker_context(certs, clock)
    before = source.current()
    cert = certificate_path(certs, "worker")
    cert.write_bytes(cert.read_bytes())
    os.utime(cert, ns=(1, 1))  # a new mtime, the same content
    clock.now += INTERVAL_S
    assert source.current() is before
    assert source.reloads == 0


def test_a_bad_new_file_keeps_the_old_context_and_warns_once(certs, caplog):
    clock = Clock()
    source = worker_context(certs, clock)
    before = source.current()
    first = serial_on_disk(certs, "worker")
    certificate_path(certs, "worker").write_text("-----BEGIN CERTIFICATE-----\ntorn\n")
    with caplog.at_level(logging.WARNING, logger="headway.tls.reload"):
        for _ in range(3):
            clock.now += INTERVAL_S
            assert source.current() is before
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "keeping the previous" in warnings[0].getMessage()
    assert peer_serial(handshake(source.serving(), gateway(certs), WORKER_NAME)) == first

    issue_role(certs, "worker", hosts=("localhost",), days=7)  # fixed: tried again
    clock.now += INTERVAL_S
    assert source.current() is not before
    assert source.reloads == 1


def test_a_missing_file_keeps_the_old_context_and_warns_once(certs, caplog):
    clock = Clock()
    source = worker_context(certs, clock)
    before = source.current()
    key_path(certs, "worker").unlink()
    with caplog.at_level(logging.WARNING, logger="headway.tls.reload"):
        for _ in range(3):
            clock.now += INTERVAL_S
            assert source.current() is before
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1


def test_files_that_cannot_be_loaded_at_start_are_an_error(certs):
    key_path(certs, "worker").unlink()
    with pytest.raises(TlsFilesInvalid, match=r"worker\.key"):
        worker_context(certs, Clock())


def test_a_fixed_context_is_the_same_every_time(certs):
    context = gateway(certs)
    assert FixedContext(context).current() is context

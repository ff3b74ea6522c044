"""A real nats-server (JetStream, fsync always) per test, always stopped, checked gone."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from headway_tools.testing.nats_server import NatsServer


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def nats_server() -> Iterator[NatsServer]:
    """Started; a test may kill, stop and start it again (same ports, same store)."""
    server = NatsServer()
    try:
        server.start()
        yield server
    finally:
        pid = server.pid
        server.close()
    assert pid is None or not process_alive(pid), "nats-server outlived its test"

"""A real Redis per test, always stopped, and checked gone afterwards."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from headway_tools.testing.redis_server import RedisServer


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    pids: list[int] = []
    try:
        server.start()
        yield server
    finally:
        if server.pid is not None:
            pids.append(server.pid)
        server.close()
    assert not [pid for pid in pids if process_alive(pid)], "redis-server outlived its test"

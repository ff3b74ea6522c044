"""The work queue's tests: the service tier (a real nats-server, SQLite files in tmp).

``open_queue`` runs a test once per implementation: each call makes a new queue object
(its own SQLite connection, or its own NATS connection) on the same file or server, as
two executors would; every one is closed afterwards.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from headway.batches.jetstream_queue import JetStreamWorkQueue
from headway.batches.queue import WorkQueue
from headway.batches.sqlite_queue import SqliteWorkQueue
from headway.metering.stream import StreamConfig
from headway_tools.testing.nats_server import NatsServer
from tests.metering.conftest import nats_server

OpenQueue = Callable[[float], WorkQueue]
"""lease_s -> a new queue object on the test's one file or server."""

__all__ = ["nats_server"]  # the metering tests' fixture: one server per test


def work_stream(server: NatsServer, lease_s: float = 30.0) -> StreamConfig:
    return StreamConfig(
        servers=(server.url,),
        stream="BATCH_WORK",
        subject="batches.work",
        durable="executors",
        ack_wait_s=lease_s,
        reconnect_wait_s=0.1,
        monitor_urls=(server.monitor_url,),
        settings="streams.batch_work",
        name_setting="batches.stream",
    )


@pytest.fixture(params=["sqlite", "jetstream"])
async def open_queue(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[OpenQueue]:
    opened: list[WorkQueue] = []
    if request.param == "jetstream":
        server: NatsServer = request.getfixturevalue("nats_server")

        def make(lease_s: float) -> WorkQueue:
            return JetStreamWorkQueue(work_stream(server, lease_s))
    else:
        path = tmp_path / "batches.sqlite3"

        def make(lease_s: float) -> WorkQueue:
            return SqliteWorkQueue(path, lease_s=lease_s)

    def open_one(lease_s: float) -> WorkQueue:
        queue = make(lease_s)
        opened.append(queue)
        return queue

    try:
        yield open_one
    finally:
        for queue in opened:
            await queue.close()

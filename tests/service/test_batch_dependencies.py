"""The executor and the Batch API through their dependencies restarting: a throw-away
Postgres (the batch store) and nats-server (the work queue), each stopped and started
again under them. Nothing exits, nothing answers 500, no line is lost or written twice."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import httpx
import pytest

from headway.batches import service as service_module
from headway.batches.jetstream_queue import JetStreamWorkQueue
from headway.batches.model import FINAL, Batch
from headway.batches.open import postgres_batch_store
from headway.batches.service import ExecutorService
from headway.batches.sql import SqlBatchStore
from headway.settings import ExecutorSettings, Settings
from headway_tools.testing.nats_server import NatsServer
from headway_tools.testing.postgres_server import PostgresServer
from tests.batches_queue.conftest import work_stream
from tests.service.batch_helpers import (
    BATCHES,
    ClientSubmitter,
    Runner,
    create,
    embed_line,
    jsonl,
    lines_of,
    running,
    upload,
)
from tests.service.conftest import TEST_LIMITS, Stack, auth, make_stack

LINES = 12
FREE = 3
"""Lines answered before the gate closes: the rest are in flight when the dependency goes."""


async def until(condition: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)  # poll interval, not a stand-in for the condition


class GatedSubmitter(ClientSubmitter):
    """The first ``free`` lines go through at once; the rest wait for ``gate``."""

    def __init__(self, client: httpx.AsyncClient, free: int) -> None:
        super().__init__(client)
        self.free, self.started = free, 0
        self.gate = asyncio.Event()

    async def submit(self, batch, line, body):  # type: ignore[no-untyped-def]
        self.started += 1
        if self.started > self.free:
            await self.gate.wait()
        return await super().submit(batch, line, body)


def sample(runner_or_metrics, name: str, **labels: str) -> float:  # type: ignore[no-untyped-def]
    value = runner_or_metrics.metrics.registry.get_sample_value(name, labels or None)
    return 0.0 if value is None else value


@pytest.fixture
def postgres() -> Iterator[PostgresServer]:
    """Our own server, not the session's: this one is stopped and started again."""
    server = PostgresServer(fsync=False)
    try:
        server.start()
        yield server
    finally:
        server.close()


@pytest.fixture
def nats_server() -> Iterator[NatsServer]:
    server = NatsServer()
    try:
        server.start()
        yield server
    finally:
        server.close()


@pytest.fixture
async def pg_stack(tmp_path: Path, postgres: PostgresServer) -> AsyncIterator[Stack]:
    stack = await make_stack(
        tmp_path, batches=BATCHES, batch_store=postgres_batch_store(postgres.url)
    )
    yield stack
    await stack.close()


async def _submit(stack: Stack, lines: int) -> tuple[str, str]:
    data = jsonl(*(embed_line(f"req-{i}", f"text {i}") for i in range(lines)))
    response = await upload(stack.client, data, auth())
    assert response.status_code == 200, response.text
    file_id = response.json()["id"]
    response = await create(stack.client, file_id, auth())
    assert response.status_code == 200, response.text
    return file_id, response.json()["id"]


async def _ticked_until_running(runner: Runner, submitter: GatedSubmitter) -> None:
    deadline = time.monotonic() + 30
    while submitter.started <= submitter.free:  # the gate holds some lines
        assert time.monotonic() < deadline, "the lines never started"
        await runner.mover.tick()
        await asyncio.sleep(0.02)  # poll interval of the condition above


async def _final(runner: Runner, store: SqlBatchStore, batch_id: str) -> Batch:
    deadline = time.monotonic() + 60
    while True:
        await runner.mover.tick()
        batch = store.batch_by_id(batch_id)
        assert batch is not None
        if batch.status in FINAL:
            return batch
        assert time.monotonic() < deadline, f"batch {batch_id} never ended: {batch.status}"
        await asyncio.sleep(0.02)  # poll interval of the condition above


async def _output_ids(stack: Stack, batch_id: str) -> Counter[str]:
    answer = (await stack.client.get(f"/v1/batches/{batch_id}", headers=auth())).json()
    assert answer["status"] == "completed", answer
    assert answer["request_counts"] == {"total": LINES, "completed": LINES, "failed": 0}
    content = await stack.client.get(
        f"/v1/files/{answer['output_file_id']}/content", headers=auth()
    )
    assert content.status_code == 200
    return Counter(str(line["custom_id"]) for line in lines_of(content.content))


# The Batch API ---------------------------------------------------------------------------


async def test_batch_api_answers_503_while_postgres_is_away_and_200_after(
    pg_stack: Stack, postgres: PostgresServer
) -> None:
    file_id, batch_id = await _submit(pg_stack, 2)
    client = pg_stack.client
    await asyncio.to_thread(postgres.stop)

    calls = [
        lambda: client.get(f"/v1/batches/{batch_id}", headers=auth()),
        lambda: client.get("/v1/batches", headers=auth()),
        lambda: client.get(f"/v1/files/{file_id}", headers=auth()),
        lambda: client.get("/v1/files", headers=auth()),
        lambda: client.post(f"/v1/batches/{batch_id}/cancel", headers=auth()),
        lambda: upload(client, jsonl(embed_line("late", "x")), auth()),
        lambda: create(client, file_id, auth()),
    ]
    for call in calls:
        answer = await call()
        assert answer.status_code == 503, (answer.request.url, answer.text)
        assert answer.json()["error"]["type"] == "store_unavailable"
        assert float(answer.headers["retry-after"]) > 0
        assert "127.0.0.1" not in answer.text  # nothing of the database's detail

    await asyncio.to_thread(postgres.start)
    answer = await client.get(f"/v1/batches/{batch_id}", headers=auth())
    assert answer.status_code == 200 and answer.json()["status"] == "validating"
    listed = (await client.get("/v1/files", headers=auth())).json()["data"]
    assert [f["id"] for f in listed] == [file_id]  # the refused upload left nothing
    batches = (await client.get("/v1/batches", headers=auth())).json()["data"]
    assert [b["id"] for b in batches] == [batch_id]  # nor the refused create, nor the cancel


# The executor over Postgres --------------------------------------------------------------


async def test_executor_rides_out_postgres_restarting_mid_batch(
    pg_stack: Stack, postgres: PostgresServer, tmp_path: Path
) -> None:
    _, batch_id = await _submit(pg_stack, LINES)
    submitter = GatedSubmitter(pg_stack.client, FREE)
    settings = ExecutorSettings(
        lines_in_flight=4, lease_s=5, dependency_retry_initial_s=0.05, dependency_retry_max_s=0.2
    )
    parts = pg_stack.batches
    assert parts is not None and isinstance(parts.store, SqlBatchStore)
    store = parts.store
    async with running(
        parts, pg_stack.client, tmp_path, limits=TEST_LIMITS, settings=settings, submitter=submitter
    ) as runner:
        await _ticked_until_running(runner, submitter)
        await until(lambda: len(store.recorded(batch_id, range(1, LINES + 1))) == FREE, "3 kept")
        assert sample(runner, "headway_batch_store_up") == 1
        await asyncio.to_thread(postgres.stop)
        submitter.gate.set()  # the lines in flight finish while the store is away
        await until(lambda: sample(runner, "headway_batch_store_up") == 0, "the outage seen")
        retries = sample(runner, "headway_batch_dependency_retries_total", dependency="store")
        await until(
            lambda: (
                sample(runner, "headway_batch_dependency_retries_total", dependency="store")
                >= retries + 3
            ),
            "the line loop retrying",
        )
        assert runner.task is not None and not runner.task.done()  # waiting, not dead

        await asyncio.to_thread(postgres.start)
        batch = await _final(runner, store, batch_id)
        assert batch.status == "completed"
        assert sample(runner, "headway_batch_store_up") == 1
        assert not runner.task.done()
    ids = await _output_ids(pg_stack, batch_id)
    assert ids == Counter(f"req-{i}" for i in range(LINES))  # each line once, none lost


# The executor over NATS ------------------------------------------------------------------


async def test_executor_rides_out_nats_restarting_and_runs_no_line_twice(
    tmp_path: Path, nats_server: NatsServer
) -> None:
    stack = await make_stack(tmp_path, batches=BATCHES)
    try:
        _, batch_id = await _submit(stack, LINES)
        parts = stack.batches
        assert parts is not None and isinstance(parts.store, SqlBatchStore)
        submitter = GatedSubmitter(stack.client, FREE)
        settings = ExecutorSettings(
            lines_in_flight=4,
            lease_s=3,
            dependency_retry_initial_s=0.05,
            dependency_retry_max_s=0.2,
        )
        queue = JetStreamWorkQueue(work_stream(nats_server, settings.lease_s))
        async with running(
            parts,
            stack.client,
            tmp_path,
            limits=TEST_LIMITS,
            settings=settings,
            submitter=submitter,
            queue=queue,
        ) as runner:
            await _ticked_until_running(runner, submitter)
            await until(lambda: sample(runner, "headway_batch_queue_up") == 1, "the first acks")
            await asyncio.to_thread(nats_server.stop)
            submitter.gate.set()  # recorded while NATS is away; their acks fail
            held = range(1, LINES + 1)
            await until(
                lambda: len(parts.store.recorded(batch_id, held)) >= submitter.started,
                "the lines in flight kept",
            )
            await until(lambda: sample(runner, "headway_batch_queue_up") == 0, "the outage seen")
            assert runner.task is not None and not runner.task.done()

            await asyncio.to_thread(nats_server.start)
            batch = await _final(runner, parts.store, batch_id)
            assert batch.status == "completed"
            assert not runner.task.done()
        # Redelivered after the restart, the kept lines were only acked: none ran twice.
        assert sorted(line for _, line in submitter.sent) == list(range(1, LINES + 1))
        assert await _output_ids(stack, batch_id) == Counter(f"req-{i}" for i in range(LINES))
    finally:
        await stack.close()


# The executor service's start ------------------------------------------------------------


def _service_settings(tmp_path: Path, **extra: object) -> Settings:
    return Settings(
        data_dir=tmp_path,
        batches={
            "executor_token": "test-token",
            "executor": {"dependency_retry_initial_s": 0.05, "dependency_retry_max_s": 0.2},
        },
        **extra,  # type: ignore[arg-type]
    )


async def test_executor_service_waits_for_postgres_at_start_and_after_a_restart(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="headway.dependency_link")
    postgres = PostgresServer(fsync=False)  # not started yet
    service = ExecutorService(_service_settings(tmp_path, postgres_url=postgres.url))
    try:
        await service.start()
        retries = "headway_batch_dependency_retries_total"
        await until(lambda: sample(service, retries, dependency="store") >= 3, "retries")
        assert not service.ready and service.store is None
        assert sample(service, "headway_batch_store_up") == 0

        await asyncio.to_thread(postgres.start)
        await until(lambda: service.ready, "ready once Postgres is up")
        assert sample(service, "headway_batch_store_up") == 1
        assert sample(service, "headway_batch_queue_up") == 1

        await asyncio.to_thread(postgres.stop)
        await until(lambda: not service.ready, "unready while Postgres is away")
        assert sample(service, "headway_batch_store_up") == 0
        await asyncio.to_thread(postgres.start)
        await until(lambda: service.ready, "ready again")
    finally:
        await service.stop()
        postgres.close()
    said = [
        r.getMessage().split(" (")[0] for r in caplog.records if "batch store" in r.getMessage()
    ]
    assert said == [
        "batch store unreachable while opening it",
        "batch store reachable again; the executor carries on",
        "batch store unreachable while moving batches",
        "batch store reachable again; the executor carries on",
    ]  # one line per change of state, however many tries


async def test_executor_service_waits_for_nats_at_start_and_after_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(service_module, "DEPTH_INTERVAL_S", 0.1)  # the queue's probe
    nats = NatsServer()  # not started yet
    service = ExecutorService(
        _service_settings(tmp_path, nats_url=nats.url, streams={"monitor_urls": nats.monitor_url})
    )
    try:
        await service.start()
        retries = "headway_batch_dependency_retries_total"
        await until(lambda: sample(service, retries, dependency="queue") >= 2, "retries")
        assert not service.ready and sample(service, "headway_batch_queue_up") == 0

        await asyncio.to_thread(nats.start)
        await until(lambda: service.ready, "ready once NATS is up")
        await asyncio.to_thread(nats.stop)
        await until(lambda: not service.ready, "unready while NATS is away")
        assert sample(service, "headway_batch_queue_up") == 0
        await asyncio.to_thread(nats.start)
        await until(lambda: service.ready, "ready again")
    finally:
        await service.stop()
        nats.close()

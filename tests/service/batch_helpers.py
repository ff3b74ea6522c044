"""Running batches in this process: the executor's parts on the service stack's stores,
its lines sent through the stack's gateway app."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import msgspec

from headway.batches.executor import Executor
from headway.batches.inputs import Inputs
from headway.batches.metrics import ExecutorMetrics
from headway.batches.model import FINAL, Batch, new_batch_id
from headway.batches.mover import Bursts, Mover, no_bursts
from headway.batches.queue import WorkQueue
from headway.batches.sqlite_queue import SqliteWorkQueue
from headway.batches.store import BatchStore
from headway.batches.submit import ROUTE_OF, Answer, line_headers, retry_after_s
from headway.control.batches.parts import BatchParts
from headway.settings import BatchSettings, ExecutorSettings, LimitsSettings

TOKEN = "test-executor-token"
BATCHES = BatchSettings(executor_token=TOKEN)


class ClientSubmitter:
    """``HttpSubmitter``'s requests, through an in-process client; counts what it sent."""

    def __init__(self, client: httpx.AsyncClient, token: str = TOKEN) -> None:
        self.client, self.token = client, token
        self.sent: list[tuple[str, int]] = []

    async def submit(self, batch: Batch, line: int, body: bytes) -> Answer:
        self.sent.append((batch.id, line))
        headers = line_headers(batch, line, self.token, 10_000)
        response = await self.client.post(ROUTE_OF[batch.endpoint], content=body, headers=headers)
        return Answer(
            response.status_code,
            response.content,
            response.headers.get("x-request-id", ""),
            retry_after_s(response.headers.get("retry-after")),
        )

    async def close(self) -> None:
        return None


@dataclass
class Runner:
    mover: Mover
    executor: Executor
    queue: WorkQueue
    submitter: ClientSubmitter
    metrics: ExecutorMetrics
    task: asyncio.Task[None] | None = None
    """The executor's line loop (it ends only when cancelled)."""

    async def until_final(self, batch_id: str, parts: BatchParts, timeout_s: float = 30) -> Batch:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            await self.mover.tick()
            batch = parts.store.batch_by_id(batch_id)
            assert batch is not None
            if batch.status in FINAL:
                return batch
            await asyncio.sleep(0.02)
        raise AssertionError(f"batch {batch_id} did not end in {timeout_s}s")


@contextlib.asynccontextmanager
async def running(
    parts: BatchParts,
    client: httpx.AsyncClient,
    tmp_path: Path,
    *,
    limits: LimitsSettings,
    settings: ExecutorSettings | None = None,
    clock: Callable[[], float] = time.time,
    queue: WorkQueue | None = None,
    bursts: Bursts = no_bursts,
    submitter: ClientSubmitter | None = None,
) -> AsyncIterator[Runner]:
    """An executor's mover and line loop on ``parts``' stores; the loop runs meanwhile.
    ``bursts``: the tenants' (``RegistryBursts(stack.registry)``; default: none known)."""
    settings = settings or ExecutorSettings(lines_in_flight=4, lease_s=5)
    queue = queue or SqliteWorkQueue(tmp_path / "queue.sqlite3", lease_s=settings.lease_s)
    inputs = Inputs(parts.store, parts.files, limits, parts.settings.max_inputs)
    submitter = submitter or ClientSubmitter(client)
    metrics = ExecutorMetrics()
    mover = Mover(
        parts.store,
        queue,
        parts.files,
        inputs,
        parts.settings.file_retention_s,
        clock,
        bursts=bursts,
        metrics=metrics,
    )
    executor = Executor(parts.store, queue, inputs, submitter, settings, metrics)
    task = asyncio.ensure_future(executor.run())
    try:
        yield Runner(mover, executor, queue, submitter, metrics, task)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await queue.close()


def jsonl(*lines: object) -> bytes:
    return b"".join(
        (line if isinstance(line, bytes) else msgspec.json.encode(line)) + b"\n" for line in lines
    )


def embed_line(custom_id: str, *texts: str, model: str = "synthetic") -> dict[str, object]:
    return {
        "custom_id": custom_id,
        "method": "POST",
        "url": "/v1/embeddings",
        "body": {"model": model, "input": list(texts)},
    }


async def upload(
    client: httpx.AsyncClient, data: bytes, key_headers: dict[str, str]
) -> httpx.Response:
    return await client.post(
        "/v1/files",
        headers=key_headers,
        data={"purpose": "batch"},
        files={"file": ("input.jsonl", data, "application/jsonl")},
    )


async def create(
    client: httpx.AsyncClient, file_id: str, key_headers: dict[str, str], **fields: object
) -> httpx.Response:
    body = {"input_file_id": file_id, "endpoint": "/v1/embeddings", "completion_window": "24h"}
    return await client.post("/v1/batches", headers=key_headers, json=body | fields)


def lines_of(data: bytes) -> list[dict[str, object]]:
    return [msgspec.json.decode(line) for line in data.splitlines() if line.strip()]


def live_line(
    store: BatchStore, tenant_id: int, line: int = 1, *, total: int = 3
) -> dict[str, str]:
    """A batch of ``tenant_id`` put in progress in ``store`` (``total`` lines), and the
    headers of its line ``line`` as the executor sends them (less its token)."""
    batch = Batch(
        new_batch_id(),
        tenant_id,
        f"tenant-{tenant_id}",
        "00" * 8,
        "/v1/embeddings",
        "file-none",
        "24h",
        "validating",
        int(time.time()),
        int(time.time()) + 86400,
    )
    assert store.add_batch(batch) is None
    live = store.move(batch.id, ("validating",), "in_progress", int(time.time()), total=total)
    assert live is not None
    headers = line_headers(live, line, "unused", 10_000)
    del headers["authorization"]
    return headers

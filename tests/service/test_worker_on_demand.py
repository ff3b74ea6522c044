"""A worker serves every alias of its pool's kind, loading each on demand, and keeps the
loaded artifacts within its memory budget."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace

import httpx
import pytest

from headway import wire
from headway.models.backend import Backend
from headway.registry.model import ModelRecord, Snapshot
from headway.worker.app import WorkerService, build_worker_app
from headway.worker.backends.synthetic import SyntheticBackend
from headway.worker.batcher import BatchLimits
from headway.worker.sources import RegistrySource
from tests.fakes import until

V1, V2, V3, RERANKER = ("1" * 64, "2" * 64, "3" * 64, "4" * 64)
SEEDS = {V1: 1, V2: 2, V3: 3, RERANKER: 4}
SIZE = 100


def record(version: str, kind: str = "embedding") -> ModelRecord:
    return ModelRecord(version, "synthetic", kind, 4, "none", size_bytes=SIZE)


@dataclass
class FakeRegistry:
    """Aliases to versions; ``alias`` bumps the change counter as a write does."""

    snap: Snapshot = field(default_factory=Snapshot)

    def model_snapshot(self) -> Snapshot:
        return self.snap

    def changes(self) -> int:
        return self.snap.changes

    def alias(self, name: str, version: str, kind: str = "embedding") -> None:
        models = {**self.snap.models, name: record(version, kind), version: record(version, kind)}
        self.snap = replace(self.snap, models=models, changes=self.snap.changes + 1)


@dataclass
class Worker:
    service: WorkerService
    client: httpx.AsyncClient
    registry: FakeRegistry
    loads: list[str]
    release: dict[str, threading.Event]

    async def embed(self, version: str, timeout_ms: int = 5_000) -> httpx.Response:
        chunk = wire.EmbedChunk("r-1", ["1 2"], timeout_ms, wire.Priority.INTERACTIVE, version)
        return await self.client.post(
            wire.EmbedChunk.path,
            content=wire.encode(chunk),
            headers={"content-type": wire.CONTENT_TYPE},
        )

    async def loaded(self) -> dict[str, bool]:
        ready = (await self.client.get("/readyz")).json()
        return {v["version"]: v["loaded"] for v in ready["versions"]}

    def metric(self, name: str, **labels: str) -> float:
        value = self.service.metrics.registry.get_sample_value(name, {"pool": "embed", **labels})
        return value or 0.0


@pytest.fixture
def make_worker() -> Callable[..., AsyncIterator[Worker]]:
    async def start(budget: int | None = None) -> AsyncIterator[Worker]:
        registry = FakeRegistry()
        registry.alias("search", V1)
        registry.alias("mine", V2)
        registry.alias("theirs", V3)
        registry.alias("rerank", RERANKER, kind="cross-encoder")
        loads: list[str] = []
        release = {version: threading.Event() for version in SEEDS}
        for event in release.values():
            event.set()

        def load(version: str) -> Backend:
            loads.append(version)
            assert release[version].wait(10), "test never released the load"
            return SyntheticBackend(call_ms=0, text_ms=0, dimensions=4, seed=SEEDS[version])

        source = RegistrySource(registry, ("search",), load, kind="embedding")
        service = WorkerService(
            "embed",
            source,
            BatchLimits(max_wait_s=0),
            registry_poll_s=0.005,
            memory_budget_bytes=budget,
        )
        app = build_worker_app(service)
        await app.startup()
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://w")
        try:
            yield Worker(service, client, registry, loads, release)
        finally:
            await client.aclose()
            await app.shutdown()

    return start


@pytest.fixture
async def worker(make_worker: Callable[..., AsyncIterator[Worker]]) -> AsyncIterator[Worker]:
    async for started in make_worker():
        yield started


async def test_every_alias_of_the_pools_kind_is_served_and_only_the_default_loaded_at_start(
    worker: Worker,
) -> None:
    assert await worker.loaded() == {V1: True, V2: False, V3: False}  # no cross-encoder
    assert worker.loads == [V1]
    response = await worker.embed(V2)
    assert response.status_code == 200, response.text
    assert wire.result_decoder.decode(response.content).model_version == V2
    assert await worker.loaded() == {V1: True, V2: True, V3: False}
    assert worker.metric("headway_worker_model_loads_total", trigger="demand") == 1
    assert (await worker.embed(RERANKER)).status_code == 409


async def test_chunks_arriving_while_a_version_loads_share_one_load(worker: Worker) -> None:
    worker.release[V3].clear()
    waiting = [asyncio.create_task(worker.embed(V3)) for _ in range(5)]
    await until(lambda: V3 in worker.loads)
    worker.release[V3].set()
    assert [r.status_code for r in await asyncio.gather(*waiting)] == [200] * 5
    assert worker.loads.count(V3) == 1


async def test_a_chunk_waits_for_a_load_only_within_its_deadline(worker: Worker) -> None:
    worker.release[V2].clear()
    late = await worker.embed(V2, timeout_ms=50)
    assert late.status_code == 504
    assert "still loading" in late.json()["error"]["message"]
    worker.release[V2].set()
    assert (await worker.embed(V2)).status_code == 200  # the load went on for the next one
    assert worker.loads.count(V2) == 1


async def test_an_alias_imported_while_running_is_served_within_a_poll(worker: Worker) -> None:
    fresh = "5" * 64
    SEEDS[fresh] = 5
    worker.release[fresh] = threading.Event()
    worker.release[fresh].set()
    try:
        worker.registry.alias("new", fresh)
        await until(lambda: fresh in worker.service.on_demand)
        assert (await worker.embed(fresh)).status_code == 200
    finally:
        del SEEDS[fresh]


async def test_beyond_the_budget_the_least_recently_used_idle_version_is_unloaded(
    make_worker: Callable[..., AsyncIterator[Worker]],
) -> None:
    async for worker in make_worker(budget=2 * SIZE):  # three models, room for two
        for version in (V2, V3, V2, V1, V3):
            response = await worker.embed(version)
            assert response.status_code == 200, response.text
            loaded = {v for v, held in (await worker.loaded()).items() if held}
            assert len(loaded) == 2 and V1 in loaded and version in loaded
        assert worker.loads == [V1, V2, V3, V2, V3]
        assert worker.metric("headway_worker_model_unloads_total", reason="budget") == 3
        assert worker.metric("headway_worker_models_loaded") == 2

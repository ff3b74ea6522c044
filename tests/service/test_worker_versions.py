"""A worker holds every version its alias's split names, and follows the registry."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace

import httpx
import pytest

from headway import wire
from headway.models.backend import Backend
from headway.registry.model import ModelRecord, Snapshot, Split
from headway.worker.app import WorkerService, build_worker_app
from headway.worker.backends.synthetic import SyntheticBackend
from headway.worker.batcher import BatchLimits
from headway.worker.sources import RegistrySource
from tests.fakes import until

ALIAS = "search"
V1, V2, V3 = ("1" * 64, "2" * 64, "3" * 64)
SEEDS = {V1: 1, V2: 2, V3: 3}


def record(version: str) -> ModelRecord:
    return ModelRecord(version, "synthetic", "embedding", 4, "none")


@dataclass
class FakeRegistry:
    """The two reads a worker makes; ``split`` bumps the change counter as a write does."""

    snap: Snapshot = field(default_factory=Snapshot)

    def model_snapshot(self) -> Snapshot:
        return self.snap

    def changes(self) -> int:
        return self.snap.changes

    def split(self, *versions: str) -> None:
        models = {ALIAS: record(versions[0])} | {v: record(v) for v in SEEDS}
        split = Split(ALIAS, tuple((v, 1.0) for v in versions))
        self.snap = replace(
            self.snap, models=models, splits={ALIAS: split}, changes=self.snap.changes + 1
        )


class Gate:
    """Stands in for the synthetic backend's sleep: a test can hold a model call."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.open.set()
        self.entered = threading.Event()

    def hold(self, seconds: float) -> None:
        self.entered.set()
        assert self.open.wait(10), "test never opened the gate"


@dataclass
class Worker:
    service: WorkerService
    client: httpx.AsyncClient
    registry: FakeRegistry
    gates: dict[str, Gate]

    async def embed(
        self, version: str, texts: list[str], priority: wire.Priority = wire.Priority.INTERACTIVE
    ) -> httpx.Response:
        chunk = wire.EmbedChunk("r-1", texts, 5_000, priority, version)
        return await self.client.post(
            wire.EmbedChunk.path,
            content=wire.encode(chunk),
            headers={"content-type": wire.CONTENT_TYPE},
        )

    async def readyz(self) -> dict[str, object]:
        body: dict[str, object] = (await self.client.get("/readyz")).json()
        return body


@pytest.fixture
async def worker() -> AsyncIterator[Worker]:
    registry = FakeRegistry()
    registry.split(V1, V2)
    gates = {version: Gate() for version in SEEDS}

    def load(version: str) -> Backend:
        return SyntheticBackend(
            call_ms=0, text_ms=0, dimensions=4, seed=SEEDS[version], sleep=gates[version].hold
        )

    source = RegistrySource(registry, (ALIAS,), load)
    service = WorkerService("embed", source, BatchLimits(max_wait_s=0), registry_poll_s=0.005)
    app = build_worker_app(service)
    await app.startup()
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://worker")
    yield Worker(service, client, registry, gates)
    await client.aclose()
    await app.shutdown()


async def test_serves_every_version_of_the_split_and_lists_them(worker: Worker) -> None:
    ready = await worker.readyz()
    assert [v["version"] for v in ready["versions"]] == [V1, V2]  # type: ignore[union-attr]
    assert (ready["model_version"], ready["kind"], ready["dimensions"]) == (V1, "embedding", 4)

    first = wire.result_decoder.decode((await worker.embed(V1, ["1 2"])).content)
    second = wire.result_decoder.decode((await worker.embed(V2, ["1 2"])).content)
    default = wire.result_decoder.decode((await worker.embed("", ["1 2"])).content)
    assert (first.model_version, second.model_version, default.model_version) == (V1, V2, V1)
    assert first.dimensions == second.dimensions == 4
    assert first.array().tolist() == default.array().tolist() != second.array().tolist()


async def test_a_version_not_held_is_refused_with_409(worker: Worker) -> None:
    response = await worker.embed(V3, ["1"])
    assert response.status_code == 409
    assert response.json()["error"]["type"] == "model_mismatch"


async def test_picks_up_a_version_the_registry_adds(worker: Worker) -> None:
    worker.registry.split(V1, V2, V3)
    await until(lambda: V3 in worker.service.held)
    response = await worker.embed(V3, ["1 2"])
    assert wire.result_decoder.decode(response.content).model_version == V3
    ready = await worker.readyz()
    assert [v["version"] for v in ready["versions"]] == [V1, V2, V3]  # type: ignore[union-attr]


async def test_unloads_a_removed_version_once_its_queue_is_empty(worker: Worker) -> None:
    gate = worker.gates[V2]
    gate.open.clear()
    gate.entered.clear()
    in_flight = asyncio.create_task(worker.embed(V2, ["5 6"]))
    await until(gate.entered.is_set)

    worker.registry.split(V1)
    await until(lambda: V2 not in worker.service.held)
    assert (await worker.embed(V2, ["1"])).status_code == 409
    assert [h.model.version for h in worker.service.retiring] == [V2], "unloaded while busy"

    gate.open.set()
    assert (await in_flight).status_code == 200
    await until(lambda: not worker.service.retiring)
    ready = await worker.readyz()
    assert [v["version"] for v in ready["versions"]] == [V1]  # type: ignore[union-attr]

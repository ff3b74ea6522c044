"""A worker started while its model registry's Postgres is away waits for it (the chaos
run saw one exit at start), and a running worker rides out the registry going away."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from headway.registry.errors import RegistryUnavailable
from headway.settings import Settings
from headway.worker.app import WorkerService
from headway.worker.batcher import BatchLimits
from headway.worker.main import build_worker
from headway.worker.sources import FixedSource, LoadedModel, Wanted
from headway_tools.testing.postgres_server import PostgresServer
from tests.service.conftest import synthetic_loader


async def until(condition: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)  # poll interval, not a stand-in for the condition


def sample(service: WorkerService, name: str) -> float:
    value = service.metrics.registry.get_sample_value(name, {"pool": "embed"})
    return 0.0 if value is None else value


async def test_a_synthetic_worker_waits_for_postgres_at_start(tmp_path: Path) -> None:
    postgres = PostgresServer(fsync=False)  # not started yet
    settings = Settings(
        data_dir=tmp_path,
        postgres_url=postgres.url,
        worker={"backend": "synthetic", "registry_retry_max_s": 0.2},
    )
    _, service = build_worker(settings)  # reads no database
    starting = asyncio.ensure_future(service.start())
    try:
        await until(
            lambda: sample(service, "headway_worker_registry_retries_total") >= 3, "retries"
        )
        assert not starting.done() and not service.ready
        assert sample(service, "headway_worker_registry_up") == 0

        await asyncio.to_thread(postgres.start)
        await asyncio.wait_for(starting, 60)
        assert service.ready and sample(service, "headway_worker_registry_up") == 1
    finally:
        starting.cancel()
        await service.stop()
        postgres.close()


class AwaySource:
    """A fixed model whose change counter fails while ``away``, as a registry's would."""

    def __init__(self, load: Callable[[], LoadedModel]) -> None:
        self._inner = FixedSource(load)
        self.away = False

    def changes(self) -> int:
        if self.away:
            raise RegistryUnavailable("connection refused")
        return self._inner.changes()

    def wanted(self) -> Wanted:
        return self._inner.wanted()

    def load(self, version: str) -> LoadedModel:
        return self._inner.load(version)


async def test_a_running_worker_keeps_serving_while_the_registry_is_away() -> None:
    source = AwaySource(synthetic_loader())
    service = WorkerService("embed", source, BatchLimits(), registry_poll_s=60)
    await service.start()
    try:
        source.away = True
        await service.refresh()
        await service.refresh()
        assert service.ready and service.held  # what it holds is still served
        assert sample(service, "headway_worker_registry_up") == 0
        assert service.registry_link.changes == 2  # up at start, then down once
        source.away = False
        await service.refresh()
        assert sample(service, "headway_worker_registry_up") == 1
    finally:
        await service.stop()

"""The gateway and two workers as ASGI apps in this process, joined by a fake transport."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from prometheus_client import generate_latest

from headway.app.build import build_gateway_app
from headway.app.ops import build_ops_app
from headway.batches.filestore import DirectoryFileStore
from headway.batches.open import sqlite_batch_store
from headway.batches.store import BatchStore
from headway.billing.ledger.base import Ledger
from headway.cache.results import ResultsCache
from headway.catalog import SYNTHETIC_ALIAS, synthetic_record
from headway.control.batches.parts import BatchParts
from headway.control.ledger import UsageLedger
from headway.control.weights import WeightsParts
from headway.gateway.auth.store import FailureStore
from headway.gateway.discovery.base import Discovery
from headway.gateway.discovery.static import StaticDiscovery
from headway.gateway.service import GatewayService, Heartbeat
from headway.http.asgi import App, Handler
from headway.http.edge import Edge
from headway.http.router import Route, Router
from headway.metering.sink import Metering
from headway.models.store import ModelStore
from headway.otlp.setup import ProcessTracing
from headway.registry.sqlite import Registry
from headway.settings import (
    BatchSettings,
    GatewaySettings,
    LimitsSettings,
    ObservabilitySettings,
    SyntheticSettings,
)
from headway.transport.asgi import AsgiTransport
from headway.worker.app import WorkerService, build_worker_app
from headway.worker.backends.synthetic import SyntheticBackend
from headway.worker.batcher import BatchLimits
from headway.worker.sources import FixedSource, LoadedModel

WORKER_URLS = ("http://embed-0", "http://embed-1")
SYNTHETIC = SyntheticSettings(dimensions=8)
TEST_LIMITS = LimitsSettings(max_texts=64, max_chars=200, max_body_bytes=20_000)


@dataclass
class Stack:
    client: httpx.AsyncClient
    """The client port."""
    ops: httpx.AsyncClient
    """The operations listener (/metrics, /healthz, /readyz)."""
    gateway: GatewayService
    gateway_app: App
    workers: dict[str, WorkerService]
    worker_apps: dict[str, App]
    transport: AsgiTransport
    registry: Registry
    batches: BatchParts | None = None
    usage_ledger: UsageLedger = field(default_factory=UsageLedger)
    """What /v1/usage and the console read (its ledger is ``make_stack``'s ``ledger``)."""

    def metrics(self) -> str:
        """The gateway's Prometheus exposition, read directly (no request counted)."""
        return generate_latest(self.gateway.metrics.registry).decode()

    async def close(self) -> None:
        await self.client.aclose()
        await self.ops.aclose()
        await self.gateway_app.shutdown()
        for app in self.worker_apps.values():
            await app.shutdown()


def synthetic_loader(sleep: Callable[[float], None] = lambda s: None, seed: int = 0) -> Any:
    record = synthetic_record(SYNTHETIC.model_copy(update={"seed": seed}))

    def load() -> LoadedModel:
        backend = SyntheticBackend(
            call_ms=0, text_ms=0, dimensions=SYNTHETIC.dimensions, seed=seed, sleep=sleep
        )
        return LoadedModel(backend, record.version)

    return load


async def make_stack(
    tmp_path,
    *,
    limits: BatchLimits | None = None,
    sleep: Callable[[float], None] = lambda s: None,
    discovery: Discovery | None = None,
    quota_heartbeat: Heartbeat | None = None,
    metering: Metering | None = None,
    ledger: Ledger | None = None,
    open_ledger: Callable[[], Awaitable[Ledger]] | None = None,
    seeds: tuple[int, int] = (0, 0),
    cache: ResultsCache | None = None,
    batches: BatchSettings | None = None,
    batch_store: BatchStore | None = None,
    tracing: ProcessTracing | None = None,
    clock: Callable[[], float] = time.monotonic,
    observability: ObservabilitySettings | None = None,
    auth_store: FailureStore | None = None,
    line_callers: frozenset[str] | None = None,
    weights: tuple[ModelStore, str] | None = None,
    **gateway: Any,
) -> Stack:
    """``ledger``: what /v1/usage reads (or what ``open_ledger`` opens, which may
    fail); ``seeds``: each worker's synthetic seed; a seed other than 0 is another version
    (registered without an alias). ``cache``: the results cache (default: none);
    ``batches``: serve the Batch API with these settings, stores in ``tmp_path`` (or
    ``batch_store``); ``tracing``: the gateway's and the workers' (default: off);
    ``clock``: the gateway's monotonic clock; ``observability``: its metrics, quality and
    console settings (default: the defaults); ``auth_store``: where failed key checks are
    counted (default: in the gateway); ``line_callers``: the identities the line routes
    require of the connection's certificate (default: none asked for); ``weights``: serve
    this model store to workers under this token (default: no ``/v1/weights``)."""
    registry = Registry(tmp_path / "registry.sqlite3")
    registry.seed_demo()
    registry.add_model(synthetic_record(SYNTHETIC), (SYNTHETIC_ALIAS,))
    for seed in set(seeds) - {0}:
        registry.add_model(synthetic_record(SYNTHETIC.model_copy(update={"seed": seed})))
    workers: dict[str, WorkerService] = {}
    worker_apps: dict[str, App] = {}
    for url, seed in zip(WORKER_URLS, seeds, strict=True):
        workers[url] = WorkerService(
            "embed", FixedSource(synthetic_loader(sleep, seed)), limits or BatchLimits()
        )
        worker_apps[url] = build_worker_app(workers[url], tracing)
        await worker_apps[url].startup()
    transport = AsgiTransport(worker_apps)
    gateway_settings = GatewaySettings(
        **({"health_interval_s": 60, "limits": TEST_LIMITS} | gateway)
    )
    service = GatewayService(
        gateway_settings,
        registry,
        transport,
        {"embed": discovery or StaticDiscovery(WORKER_URLS)},
        quota_heartbeat=quota_heartbeat,
        metering=metering,
        gateway_id="gw-test",
        clock=clock,
        cache=cache,
        observability=observability,
        failed_auth=auth_store,
    )
    batch_parts = None
    if batches is not None:
        batch_parts = BatchParts(
            batch_store or sqlite_batch_store(tmp_path / "batches.sqlite3"),
            DirectoryFileStore(tmp_path / "files"),
            batches,
            service.snapshots,
            time.time,
            gateway_settings.limits,
        )
    usage_ledger = UsageLedger(open_ledger or (None if ledger is None else _opener(ledger)))
    gateway_app = build_gateway_app(
        service,
        ("rerank", SYNTHETIC_ALIAS),
        batch_parts,
        tracing,
        weights=None if weights is None else WeightsParts(service.snapshots, *weights),
        line_callers=line_callers,
        ledger=usage_ledger,
    )
    await gateway_app.startup()
    client = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=gateway_app), base_url="http://gateway"
    )
    ops = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=build_ops_app(service)), base_url="http://gateway-ops"
    )
    return Stack(
        client,
        ops,
        service,
        gateway_app,
        workers,
        worker_apps,
        transport,
        registry,
        batch_parts,
        usage_ledger,
    )


def _opener(ledger: Ledger) -> Callable[[], Awaitable[Ledger]]:
    async def open_ledger() -> Ledger:
        return ledger

    return open_ledger


@pytest.fixture
async def stack(tmp_path):
    built = await make_stack(tmp_path)
    yield built
    await built.close()


def auth(key: str = "demo-key-search-app") -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def fake_worker(ready_from: App, **handlers: Handler) -> App:
    """A replica that answers ``/readyz`` as ``ready_from`` does and each ``/internal/<name>``
    with its handler: a worker that is ready and then misbehaves."""
    readyz = ready_from.handler.router.resolve("GET", "/readyz").handler  # type: ignore[attr-defined]
    routes = [Route("GET", "/readyz", "readyz", readyz)]
    routes += [Route("POST", f"/internal/{name}", name, h) for name, h in handlers.items()]
    return App(Edge(Router(routes), max_body_bytes=1 << 20))

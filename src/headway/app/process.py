"""Building a gateway from settings: embedded (local quotas, outbox read by the local
consumer) or shared (quotas in Redis, the outbox relayed to NATS, the ledger on Postgres).

Its three stores (registry, batch store, quality references) each migrate or check their
schema as they open, so a gateway cannot be built without its database. In shared mode
that is Postgres, which may start after the gateway, restart under it, or refuse its role
until ``headway db roles`` has run: ``wait_for_stores`` opens them with the backoff of
``headway.dependency_link`` (one line when the database is away, one when it is back)
instead of exiting; the gateway listens once they are open.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from headway.app.build import build_gateway_app
from headway.batches.filestore import PARTIAL_FILE_AGE_S, DirectoryFileStore
from headway.batches.open import open_batch_store
from headway.batches.store import BatchStore, BatchStoreUnavailable
from headway.billing.ledger.base import Ledger
from headway.billing.ledger.open import open_ledger
from headway.billing.prices import load_prices
from headway.cache.metrics import CacheMetrics
from headway.cache.results import ResultsCache
from headway.catalog import SYNTHETIC_ALIAS
from headway.control.batches.parts import BatchParts
from headway.control.ledger import UsageLedger
from headway.control.weights import WeightsParts
from headway.dependency_link import DependencyLink, until_reachable
from headway.gateway.auth.fallback import FallbackFailureStore
from headway.gateway.auth.metrics import AuthMetrics
from headway.gateway.auth.redis_store import RedisFailureStore
from headway.gateway.auth.store import FailureStore, LocalFailureStore
from headway.gateway.discovery.base import Discovery
from headway.gateway.discovery.dns_name import DnsDiscovery
from headway.gateway.discovery.static import StaticDiscovery
from headway.gateway.metrics import GatewayMetrics
from headway.gateway.quota.fallback import FallbackQuotaStore
from headway.gateway.quota.layout import LayoutGuard
from headway.gateway.quota.redis_store import RedisQuotaStore
from headway.gateway.quota.store import LocalQuotaStore, QuotaStore
from headway.gateway.service import GatewayService
from headway.http.asgi import App
from headway.metering.build import gateway_id, gateway_metering
from headway.metering.planted import planted_metering
from headway.models.store import ModelStore
from headway.otlp.setup import process_tracing
from headway.quality.references import (
    QualityStoreUnavailable,
    SqlReferenceStore,
    open_reference_store,
)
from headway.redis_client import cache_endpoint, quota_endpoint
from headway.registry.errors import RegistryUnavailable
from headway.registry.open import open_registry
from headway.registry.store import RegistryStore
from headway.settings import GatewaySettings, Settings
from headway.tls.hops import internal_client, line_callers
from headway.tls.names import WORKER_NAME
from headway.transport.http1 import Http1Transport

log = logging.getLogger(__name__)


def discovery(settings: GatewaySettings, scheme: str = "http") -> dict[str, Discovery]:
    """A source per configured pool: DNS where a name is given (its replicas called over
    ``scheme``), else the static list (each URL names its own)."""
    sources: dict[str, Discovery] = {}
    for pool, urls, dns_name in (
        ("embed", settings.embed_replicas, settings.embed_dns),
        ("rerank", settings.rerank_replicas, settings.rerank_dns),
    ):
        if dns_name:
            sources[pool] = DnsDiscovery(dns_name, nameserver=settings.dns_server, scheme=scheme)
        elif urls:
            sources[pool] = StaticDiscovery(urls)
    return sources


def quota_store(
    settings: Settings, metrics: GatewayMetrics
) -> tuple[QuotaStore, Callable[[], Awaitable[object]] | None]:
    """The store, and the heartbeat that counts gateways through Redis and checks that its
    instance cannot evict a bucket (shared mode only; the first beat is at start-up)."""
    endpoint = quota_endpoint(settings)
    if endpoint is None:
        metrics.quota_mode("embedded")
        return LocalQuotaStore(), None
    quota = settings.gateway.quota
    log.info("quota buckets in Redis at %s", endpoint.redacted)  # never its password
    shared = RedisQuotaStore(endpoint)
    guard = LayoutGuard(
        shared, cache_endpoint(settings), required=settings.redis.require_noeviction
    )
    store = FallbackQuotaStore(
        shared,
        LocalQuotaStore(),
        gateways=quota.gateways,
        probe_interval_s=quota.probe_interval_s,
        on_mode_change=metrics.quota_mode,
    )
    metrics.quota_mode(store.mode)
    gateway_id = f"{socket.gethostname()}:{os.getpid()}"

    async def heartbeat() -> object:
        await guard.check()
        return await store.heartbeat(gateway_id, ttl_s=3 * quota.heartbeat_s)

    return store, heartbeat


def failed_auth_store(settings: Settings, metrics: AuthMetrics) -> FailureStore | None:
    """Failed key checks in Redis, shared by every gateway, falling back to this one's own
    while Redis is away (shared mode); None: in this process (embedded)."""
    endpoint = quota_endpoint(settings)
    if endpoint is None:
        metrics.mode("embedded")
        return None
    limits = settings.gateway.failed_auth
    store = FallbackFailureStore(
        RedisFailureStore(endpoint),
        LocalFailureStore(limits.tracked),
        probe_interval_s=limits.probe_interval_s,
        on_mode_change=metrics.mode,
    )
    metrics.mode(store.mode)
    return store


def results_cache(settings: Settings, metrics: GatewayMetrics) -> ResultsCache | None:
    if not settings.gateway.cache.enabled:
        return None
    if settings.redis_url and settings.gateway.cache.redis and not settings.redis.cache_url:
        log.info(
            "the results cache stays in this gateway's memory: set redis.cache_url to share "
            "it (an instance of its own, never the quota Redis)"
        )
    return ResultsCache.from_settings(settings, CacheMetrics(metrics.registry))


@dataclass(frozen=True)
class GatewayStores:
    registry: RegistryStore
    batches: BatchStore
    quality: SqlReferenceStore


STORES_UNAVAILABLE = (RegistryUnavailable, BatchStoreUnavailable, QualityStoreUnavailable)
"""What a database that is away (or refusing the role) raises as a store opens."""


def open_stores(settings: Settings) -> GatewayStores:
    """Every store opened, or none: one that opened is closed when a later one fails."""
    registry = open_registry(settings)
    try:
        batches = open_batch_store(settings)
        try:
            return GatewayStores(registry, batches, open_reference_store(settings))
        except BaseException:
            batches.close()
            raise
    except BaseException:
        registry.close()
        raise


def wait_for_stores(settings: Settings, link: DependencyLink | None = None) -> GatewayStores:
    """``open_stores`` once the database lets it; meanwhile retried with backoff."""
    link = link or DependencyLink(
        "the gateway's database (registry, batch store, quality references)",
        logger=log,
        meanwhile="not listening until it opens",
        resumed="starting",
    )

    async def opened() -> GatewayStores:
        return await until_reachable(
            lambda: asyncio.to_thread(open_stores, settings),
            link,
            STORES_UNAVAILABLE,
            "opening its stores",
        )

    return asyncio.run(opened())


def build_gateway(settings: Settings, stores: GatewayStores) -> tuple[App, GatewayService]:
    registry = stores.registry
    observability = settings.observability
    metrics = GatewayMetrics(max_tenant_labels=observability.metrics.max_tenant_labels)
    tracing = process_tracing(observability.tracing, "gateway", metrics.registry)
    quota, heartbeat = quota_store(settings, metrics)
    name = gateway_id(settings)
    metering = gateway_metering(settings, name)
    metrics.watch_metering(metering)

    async def usage_ledger() -> Ledger:
        return await open_ledger(settings.postgres_url, settings.ledger_path)

    auth_metrics = AuthMetrics(metrics.registry)
    service = GatewayService(
        settings.gateway,
        registry,
        Http1Transport(internal_client(settings.tls), server_hostname=WORKER_NAME),
        discovery(settings.gateway, "https" if settings.tls.internal else "http"),
        quota=quota,
        quota_heartbeat=heartbeat,
        metering=planted_metering(settings, metering),  # the real one unless a test
        gateway_id=name,
        metrics=metrics,
        cache=results_cache(settings, metrics),
        observability=settings.observability,
        quality_store=stores.quality,
        rerank_alias=settings.rerank_model,
        failed_auth=failed_auth_store(settings, auth_metrics),
        auth_metrics=auth_metrics,
    )
    files = DirectoryFileStore(settings.files_dir)
    files.sweep_partial(PARTIAL_FILE_AGE_S)  # uploads a killed gateway left half-written
    batches = BatchParts(
        stores.batches,
        files,
        settings.batches,
        service.snapshots,
        time.time,
        settings.gateway.limits,
    )
    # What serves a request that names no model (TEI's; /v1/rerank's without one): the embed
    # model, else (`--backend synthetic`) the synthetic one; for rerank the rerank alias first.
    embed_models = (settings.embed_model, SYNTHETIC_ALIAS)
    rerank_models = (settings.rerank_model, *embed_models)
    prices = load_prices(settings.billing.price_book) if settings.billing.price_book else None
    store = ModelStore(settings.model_root)
    weights = WeightsParts(service.snapshots, store, settings.weights.token)
    app = build_gateway_app(
        service,
        rerank_models,
        batches,
        tracing,
        prices,
        weights,
        embed_models=embed_models,
        line_callers=line_callers(settings.tls),
        ledger=UsageLedger(usage_ledger),
    )
    return app, service

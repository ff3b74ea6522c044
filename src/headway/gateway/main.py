"""Building a gateway from settings: embedded (local quotas) or shared (quotas in Redis)."""

from __future__ import annotations

import os
import socket
from collections.abc import Awaitable, Callable

from headway.gateway.app import build_gateway_app
from headway.gateway.metrics import GatewayMetrics
from headway.gateway.quota.fallback import FallbackQuotaStore
from headway.gateway.quota.redis_store import RedisQuotaStore
from headway.gateway.quota.store import LocalQuotaStore, QuotaStore
from headway.gateway.service import GatewayService
from headway.gateway.transport import AiohttpTransport
from headway.http.asgi import App
from headway.registry.sqlite import Registry
from headway.settings import Settings


def quota_store(
    settings: Settings, metrics: GatewayMetrics
) -> tuple[QuotaStore, Callable[[], Awaitable[object]] | None]:
    """The store, and the heartbeat that counts gateways through Redis (shared mode only)."""
    if settings.redis_url is None:
        return LocalQuotaStore(), None
    quota = settings.gateway.quota
    store = FallbackQuotaStore(
        RedisQuotaStore(settings.redis_url),
        LocalQuotaStore(),
        gateways=quota.gateways,
        probe_interval_s=quota.probe_interval_s,
        on_mode_change=metrics.quota_mode,
    )
    metrics.quota_mode(store.mode)
    gateway_id = f"{socket.gethostname()}:{os.getpid()}"

    def heartbeat() -> Awaitable[object]:
        return store.heartbeat(gateway_id, ttl_s=3 * quota.heartbeat_s)

    return store, heartbeat


def build_gateway(settings: Settings) -> tuple[App, GatewayService]:
    registry = Registry(settings.registry_path)
    metrics = GatewayMetrics()
    quota, heartbeat = quota_store(settings, metrics)
    service = GatewayService(
        settings=settings.gateway,
        load_snapshot=registry.snapshot,
        transport=AiohttpTransport(),
        embed_model=settings.embed_model,
        rerank_model=settings.rerank_model,
        quota=quota,
        quota_heartbeat=heartbeat,
        metrics=metrics,
    )
    return build_gateway_app(service), service

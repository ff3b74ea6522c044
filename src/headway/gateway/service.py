"""The gateway's state: registry snapshot, pools, transport, clock, metrics.

One owner per piece: the refresh task replaces the snapshot whole (readers on
the request path see either the old or the new one, never a mix), and each
pool's health task owns its replicas' readiness.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from headway.errors import NoReplicas, NotFound
from headway.gateway.admission.controller import AdmissionConfig
from headway.gateway.discovery import DiscoveryFailed, DnsDiscovery
from headway.gateway.metrics import GatewayMetrics
from headway.gateway.pool import ReplicaPool, RoutingPolicy
from headway.gateway.quota.store import LocalQuotaStore, QuotaStore
from headway.gateway.transport import Transport
from headway.registry.model import ModelRecord, Snapshot
from headway.settings import AdmissionSettings, GatewaySettings, RoutingSettings

log = logging.getLogger(__name__)


@dataclass
class GatewayService:
    settings: GatewaySettings
    load_snapshot: Callable[[], Snapshot]
    transport: Transport
    embed_model: str
    rerank_model: str
    quota: QuotaStore = field(default_factory=LocalQuotaStore)
    quota_heartbeat: Callable[[], Awaitable[object]] | None = None
    """Shared mode: announces this gateway in Redis, so each knows how many share a quota."""
    clock: Callable[[], float] = time.monotonic
    metrics: GatewayMetrics = field(default_factory=GatewayMetrics)
    snapshot: Snapshot = field(default_factory=Snapshot)
    pools: dict[str, ReplicaPool] = field(default_factory=dict)
    discovery: dict[str, DnsDiscovery] = field(default_factory=dict)
    draining: bool = False
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        admission = admission_config(self.settings.admission)
        settings = self.settings
        for name, urls, dns_name in (
            ("embed", settings.embed_replicas, settings.embed_dns),
            ("rerank", settings.rerank_replicas, settings.rerank_dns),
        ):
            if dns_name:
                self.discovery[name] = DnsDiscovery(dns_name, nameserver=settings.dns_server)
            if urls or dns_name:
                pool = ReplicaPool(
                    name,
                    urls,
                    self.transport,
                    health_interval_s=self.settings.health_interval_s,
                    admission=admission,
                    clock=self.clock,
                    routing=routing_policy(settings.routing, name),
                )
                self.pools[name] = pool
                self.metrics.watch_pool(pool)

    async def start(self) -> None:
        await self.refresh_now()
        for name, discovery in self.discovery.items():
            await self._discover(self.pools[name], discovery)
        for pool in self.pools.values():
            await pool.start()
        loop = asyncio.get_running_loop()
        for name, discovery in self.discovery.items():
            self._tasks.append(loop.create_task(self._discover_forever(name, discovery)))
        self._tasks.append(loop.create_task(self._refresh_forever()))
        if self.quota_heartbeat is not None:
            await self.quota_heartbeat()
            self._tasks.append(loop.create_task(self._heartbeat_forever(self.quota_heartbeat)))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for pool in self.pools.values():
            await pool.stop()
        await self.transport.close()
        await self.quota.close()

    async def refresh_now(self) -> None:
        """Reload keys, tenants and aliases (the snapshot is replaced whole)."""
        self.snapshot = await asyncio.to_thread(self.load_snapshot)

    async def _discover(self, pool: ReplicaPool, discovery: DnsDiscovery) -> None:
        try:
            await pool.set_addresses(await discovery.addresses())
        except DiscoveryFailed as exc:
            log.warning("pool %s: %s; keeping its last replicas", pool.name, exc)

    async def _discover_forever(self, name: str, discovery: DnsDiscovery) -> None:
        while True:
            await asyncio.sleep(self.settings.dns_interval_s)
            await self._discover(self.pools[name], discovery)

    async def _heartbeat_forever(self, heartbeat: Callable[[], Awaitable[object]]) -> None:
        while True:
            await asyncio.sleep(self.settings.quota.heartbeat_s)
            await heartbeat()

    async def _refresh_forever(self) -> None:
        while True:
            await asyncio.sleep(self.settings.registry_refresh_s)
            try:
                await self.refresh_now()
            except Exception:
                log.exception("registry refresh failed; keeping the previous snapshot")

    def route_pool(self, route: str) -> ReplicaPool | None:
        """The pool a route's requests usually go to, for the check made before parsing."""
        if route == "rerank" and "rerank" in self.pools:
            return self.pools["rerank"]
        return self.pools.get("embed")

    @property
    def ready(self) -> bool:
        return (
            not self.draining
            and bool(self.pools)
            and all(pool.ready_count for pool in self.pools.values())
        )

    def drain(self) -> None:
        """Unready from now on (a load balancer stops sending); requests still served."""
        self.draining = True

    def resolve(self, name: str) -> ModelRecord:
        record = self.snapshot.resolve_model(name)
        if record is None:
            raise NotFound(f"model {name!r} does not exist")
        return record

    def pool_serving(self, record: ModelRecord) -> ReplicaPool:
        """A pool with ready replicas serving this exact version."""
        for pool in self.pools.values():
            if record.version in pool.versions:
                return pool
        if not any(pool.ready_count for pool in self.pools.values()):
            raise NoReplicas("no replica is ready yet")
        raise NotFound(f"model {record.name!r} ({record.version[:12]}) is not being served")

    def served_models(self) -> list[ModelRecord]:
        versions = frozenset().union(*(pool.versions for pool in self.pools.values()))
        return [record for record in self.snapshot.models.values() if record.version in versions]


def admission_config(settings: AdmissionSettings) -> AdmissionConfig:
    return AdmissionConfig(
        enabled=settings.enabled,
        latency_budget_s=settings.latency_budget_ms / 1000,
        mean_latency_share=settings.mean_latency_share,
        batch_share=settings.batch_share,
        crowding=settings.crowding,
        window_s=settings.window_ms / 1000,
        floor_texts_per_replica=settings.floor_texts_per_replica,
        static_limit=settings.static_limit_texts,
    )


def routing_policy(settings: RoutingSettings, pool: str) -> RoutingPolicy:
    return RoutingPolicy(
        retries=settings.retries,
        retry_ratio=settings.retry_ratio,
        hedging=pool in settings.hedge_pools,
        hedge_quantile=settings.hedge_quantile,
    )

"""The gateway's moving parts and their lifecycle: what starts, what runs in the background.

``GatewayService`` composes the parts the routes read (the registry snapshot, the pools, the
quota store, the metrics) and owns their background loops, all run by one ``Background``:
``start`` registers the gateway's periodic loops (each failure logged and counted, and the loop
carries on), the metering adds its usage relay in shared mode (essential: if it ends, the
process stops), and the control plane's mounts add theirs with ``run_every``
(``headway/control/``).

The routes get ``parts()`` (``PathParts``), never the service itself.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping

from headway.background import Background, Step
from headway.cache.results import ResultsCache
from headway.gateway.admission.controller import AdmissionConfig
from headway.gateway.admission.policy import Shares
from headway.gateway.auth.limiter import FailedAuthLimiter
from headway.gateway.auth.metrics import AuthMetrics
from headway.gateway.auth.store import FailureStore
from headway.gateway.coldstart import ColdStarts, HoldPolicy
from headway.gateway.coldstart_metrics import ColdStartMetrics
from headway.gateway.discovery.base import Discovery, DiscoveryFailed
from headway.gateway.metrics import GatewayMetrics
from headway.gateway.path import PathParts
from headway.gateway.pool import ReplicaPool, RoutingPolicy
from headway.gateway.pools import Pools
from headway.gateway.quota.store import LocalQuotaStore, QuotaStore
from headway.gateway.snapshots import Snapshots
from headway.gateway.stages.cache import RequestCache
from headway.gateway.stages.meter import MeterParts
from headway.gateway.stages.quota import EmptyBuckets
from headway.gateway.stages.shadow import Shadows
from headway.gateway.wake import HttpWakeHook, WakeHook, Waker
from headway.metering.sink import MemorySink, Metering
from headway.quality.monitor import QualityMonitor
from headway.quality.references import MemoryReferenceStore, ReferenceStore
from headway.registry.demo import demo_key_warning, live_demo_keys
from headway.registry.store import RegistryStore
from headway.rollouts.controller import RolloutController
from headway.rollouts.recorder import VersionRecorder
from headway.settings import (
    AdmissionSettings,
    GatewaySettings,
    ObservabilitySettings,
    RoutingSettings,
)
from headway.transport.base import Transport

log = logging.getLogger(__name__)

Heartbeat = Callable[[], Awaitable[object]]


class GatewayService:
    def __init__(
        self,
        settings: GatewaySettings,
        registry: RegistryStore,
        transport: Transport,
        discovery: Mapping[str, Discovery],
        *,
        quota: QuotaStore | None = None,
        quota_heartbeat: Heartbeat | None = None,
        metering: Metering | None = None,
        gateway_id: str = "gateway",
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        metrics: GatewayMetrics | None = None,
        cache: ResultsCache | None = None,
        observability: ObservabilitySettings | None = None,
        quality_store: ReferenceStore | None = None,
        wake_hook: WakeHook | None = None,
        failed_auth: FailureStore | None = None,
        auth_metrics: AuthMetrics | None = None,
        rerank_alias: str = "rerank",
    ) -> None:
        """``discovery``: one source per pool ("embed", "rerank"); a pool exists iff it has one.
        ``quota_heartbeat``: shared mode only, announces this gateway in Redis.
        ``metering``: where usage events go (the outbox; tests: a ``MemorySink``).
        ``cache``: the results cache (None: off); ``observability``: tracing, logs,
        metrics, quality and console settings (None: the defaults); ``quality_store``: where
        each version's reference sample is kept (None: in memory, for tests); ``wake_hook``:
        told of cold pools wanted (None: an HTTP hook at ``settings.wake_url``, if set);
        ``failed_auth``: where failed key checks are counted (None: in this process), and
        ``auth_metrics`` their counters (None: new ones on ``metrics``' registry);
        ``rerank_alias``: what a rerank request naming no model asks for first."""
        self.settings = settings
        self.observability = observability or ObservabilitySettings()
        self.metrics = metrics or GatewayMetrics()
        self.registry = registry
        self.snapshots = Snapshots(registry.snapshot, registry.changes)
        self.transport = transport
        self.discovery = dict(discovery)
        self.quota = quota or LocalQuotaStore()
        self.clock = clock
        self.metering: Metering = metering if metering is not None else MemorySink()
        self.recorder = VersionRecorder(self.metrics)
        self.meter = MeterParts(self.metering, gateway_id, wall_clock, clock, self.recorder.outcome)
        self._quality_store = quality_store
        self.quality = QualityMonitor(
            self.observability.quality,
            quality_store or MemoryReferenceStore(),
            self.metrics.registry,
            wall_clock,
        )
        self.shadows = Shadows(self.recorder, self.quality, settings.chunk_texts, clock)
        self.cache = RequestCache(cache)
        self.auth_metrics = auth_metrics or AuthMetrics(self.metrics.registry)
        self.auth_limiter = FailedAuthLimiter(
            settings.failed_auth, failed_auth, clock=clock, observer=self.auth_metrics
        )
        self.empty_buckets = EmptyBuckets()
        self.draining = False
        self._heartbeat = quota_heartbeat
        self._background = Background(
            on_failure=self.metrics.background_failed, on_loop=self.metrics.background_loop
        )
        admission = admission_config(settings.admission)
        self.pools = Pools(
            {
                name: ReplicaPool(
                    name,
                    (),
                    transport,
                    health_interval_s=settings.health_interval_s,
                    admission=admission,
                    clock=clock,
                    routing=routing_policy(settings.routing, name),
                )
                for name in self.discovery
            },
            rerank_alias,
        )
        for pool in self.pools:
            self.metrics.watch_pool(pool)
        cold_metrics = ColdStartMetrics(self.metrics.registry)
        self.cold_starts = ColdStarts(
            self.pools,
            hold_policy(settings),
            clock,
            observe_wait=cold_metrics.waited,
            rediscover=self._discoverer,
        )
        cold_metrics.watch(self.cold_starts)
        if wake_hook is None and settings.wake_url is not None:
            wake_hook = HttpWakeHook(settings.wake_url, transport)
        self.waker = (
            None
            if wake_hook is None
            else Waker(wake_hook, self.cold_starts, clock, on_wake=cold_metrics.woken)
        )
        self.rollouts = RolloutController(
            registry,
            self.recorder,
            self.pools.served_versions,
            gateway_id,
            on_change=self.snapshots.refresh,
            wall_clock=wall_clock,
        )

    def parts(self) -> PathParts:
        return PathParts(
            self.settings,
            self.snapshots,
            self.pools,
            self.quota if self.settings.quota.enabled else None,
            self.cold_starts,
            self.metrics,
            self.clock,
            self.meter,
            self.shadows,
            self.cache,
            self.quality,
            self.empty_buckets,
        )

    async def start(self) -> None:
        """Ready to serve: the registry read, every pool's replicas found and polled once."""
        settings, background = self.settings, self._background
        await self.metering.start(background)
        await self.snapshots.refresh()
        live_demo = live_demo_keys(self.snapshots.current)
        if live_demo:
            log.warning(demo_key_warning(live_demo))
        for pool in self.pools:
            await self._discover(pool)  # polls every replica it adds
        background.every("registry_poll", settings.registry_poll_s, self.snapshots.poll)
        background.every("registry_refresh", settings.registry_refresh_s, self.snapshots.refresh)
        background.every("rollouts", settings.rollout_tick_s, self.rollouts.tick)
        for pool in self.pools:
            background.every(
                f"{pool.name}_discover", settings.dns_interval_s, self._discoverer(pool)
            )
            background.every(f"{pool.name}_poll", settings.health_interval_s, pool.poll_once)
        for cold in self.cold_starts:
            name = f"{cold.pool.name}_cold_poll"
            background.every(name, settings.cold_start_poll_s, cold.poll_step)
        if self.waker is not None:
            background.every("wake", settings.cold_start_poll_s, self.waker.step)
        quality = self.observability.quality
        if quality.enabled:
            background.every("quality", quality.interval_s, self.quality.evaluate)
        if self._heartbeat is not None:
            await self._heartbeat()
            background.every("quota_heartbeat", settings.quota.heartbeat_s, self._heartbeat)

    def run_every(self, name: str, interval_s: float, step: Step) -> None:
        """A periodic loop of a part the app mounts, run (and stopped) with the service's."""
        self._background.every(name, interval_s, step)

    async def stop(self) -> None:
        await self._background.stop()
        await self.shadows.stop()
        # Billing first: the metering's last flush of the outbox (bounded by
        # gateway.outbox_flush_s) gets the grace period before anything else can spend it.
        await self.metering.close()
        await self.cache.close()
        await asyncio.to_thread(self.registry.close)
        await self.transport.close()
        await self.quota.close()
        await self.auth_limiter.store.close()
        if self._quality_store is not None:
            await asyncio.to_thread(self._quality_store.close)

    @property
    def ready(self) -> bool:
        """Not draining, and every pool has a ready replica or, with cold_start_hold, is cold:
        its requests wait for one (a gateway unready at zero would get no traffic, and a
        pool at zero no demand to start it)."""
        if self.draining:
            return False
        if not self.settings.cold_start_hold:
            return self.pools.ready
        pools = list(self.pools)
        return bool(pools) and all(pool.ready_count or pool.cold for pool in pools)

    def drain(self) -> None:
        """Unready from now on (a load balancer stops sending); requests still served."""
        self.draining = True

    def _discoverer(self, pool: ReplicaPool) -> Callable[[], Awaitable[None]]:
        return lambda: self._discover(pool)

    async def _discover(self, pool: ReplicaPool) -> None:
        try:
            await pool.set_addresses(await self.discovery[pool.name].addresses())
        except DiscoveryFailed as exc:
            log.warning("pool %s: %s; keeping its last replicas", pool.name, exc)


def admission_config(settings: AdmissionSettings) -> AdmissionConfig:
    return AdmissionConfig(
        enabled=settings.enabled,
        latency_budget_s=settings.latency_budget_ms / 1000,
        mean_latency_share=settings.mean_latency_share,
        shares=Shares(
            batch=settings.batch_share, crowding=settings.crowding, shadow=settings.shadow_share
        ),
        window_s=settings.window_ms / 1000,
        floor_texts_per_replica=settings.floor_texts_per_replica,
        static_limit=settings.static_limit_texts,
    )


def hold_policy(settings: GatewaySettings) -> HoldPolicy:
    return HoldPolicy(
        enabled=settings.cold_start_hold,
        max_held_texts=settings.cold_start_max_held_texts,
        reserve_s=settings.cold_start_reserve_ms / 1000,
    )


def routing_policy(settings: RoutingSettings, pool: str) -> RoutingPolicy:
    return RoutingPolicy(
        retries=settings.retries,
        retry_ratio=settings.retry_ratio,
        hedging=pool in settings.hedge_pools,
        hedge_quantile=settings.hedge_quantile,
    )

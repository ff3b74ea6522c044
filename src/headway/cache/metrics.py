"""The results cache's metrics: lookups by where they were answered, and the tiers' state.

Made like ``GatewayMetrics`` (``gateway/metrics.py``): collectors on a
``CollectorRegistry`` passed in (the gateway's own, so one ``/metrics`` shows both)
or a fresh one. ``headway_cache_lookups_total{result}`` counts texts (or pairs) as
``ResultsCache`` answers them. Everything else is owned by the tiers and read from
them when scraped: the memory tier's bytes, entries, scopes and evictions, and the
shared tier's errors. None has a tenant label: these are totals for the operator.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from headway.cache.memory import MemoryCache


class CountsErrors(Protocol):
    @property
    def errors(self) -> int: ...


class CacheMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.lookups = Counter(
            "headway_cache_lookups_total",
            "Texts (or query-document pairs) looked up in the results cache, by where "
            "they were found: memory, redis, or miss (computed).",
            ["result"],
            registry=self.registry,
        )
        self._memory_hits = self.lookups.labels("memory")
        self._redis_hits = self.lookups.labels("redis")
        self._misses = self.lookups.labels("miss")

    def looked_up(self, memory: int, redis: int, miss: int) -> None:
        if memory:
            self._memory_hits.inc(memory)
        if redis:
            self._redis_hits.inc(redis)
        if miss:
            self._misses.inc(miss)

    def watch(self, memory: MemoryCache, shared: CountsErrors | None) -> None:
        """The tiers' own counts, read when scraped."""
        self.registry.register(_TiersCollector(memory, shared))


class _TiersCollector(Collector):
    """The memory tier's size and evictions; the shared tier's errors (0 without one)."""

    def __init__(self, memory: MemoryCache, shared: CountsErrors | None) -> None:
        self._memory = memory
        self._shared = shared

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        memory = self._memory
        yield GaugeMetricFamily(
            "headway_cache_bytes",
            "Bytes the in-process cache tier holds (entries' values, keys and overhead).",
            value=memory.bytes,
        )
        yield GaugeMetricFamily(
            "headway_cache_entries",
            "Entries the in-process cache tier holds.",
            value=memory.entries,
        )
        yield GaugeMetricFamily(
            "headway_cache_scopes",
            "Scopes (tenants, or shared groups) holding entries in the in-process tier.",
            value=memory.scopes,
        )
        yield CounterMetricFamily(
            "headway_cache_evictions",
            "Entries the in-process tier dropped (least recently used) to stay in its bounds.",
            value=memory.evictions,
        )
        errors = CounterMetricFamily(
            "headway_cache_errors",
            "Failed calls to a shared cache tier (and values it held that did not decode); "
            "each one is answered as misses.",
            labels=["tier"],
        )
        errors.add_metric(["redis"], self._shared.errors if self._shared is not None else 0)
        yield errors

"""The metrics of cold pools: which pools are cold, who waits now (KEDA's activation
signal), how long they waited, and what the wake hook answered."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from headway.gateway.coldstart import ColdStart, ColdStarts

WAIT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0)


class ColdStartMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self._waiting = Gauge(
            "headway_pool_waiting_requests",
            "Requests held now for a pool's first ready replica (the pool is cold: scaled to "
            "zero or starting); above 0 at a pool of zero replicas, KEDA activates it.",
            ["pool"],
            registry=registry,
        )
        self._cold = Gauge(
            "headway_pool_cold",
            "1 while a pool has no ready replica and none failing (scaled to zero, or its "
            "replicas starting or drained) and its requests wait for one "
            "(gateway.cold_start_hold), 0 otherwise: a pool at zero on purpose, not down.",
            ["pool"],
            registry=registry,
        )
        self._wait = Histogram(
            "headway_cold_start_wait_seconds",
            "How long each request held for a cold pool waited, by pool (however it ended: "
            "a replica ready, its deadline, or its client gone).",
            ["pool"],
            buckets=WAIT_BUCKETS,
            registry=registry,
        )
        self._wakes = Counter(
            "headway_pool_wakes_total",
            "Calls of the wake hook (gateway.wake_url) by pool and outcome: ok or failed.",
            ["pool", "outcome"],
            registry=registry,
        )

    def watch(self, cold_starts: ColdStarts) -> None:
        """The gauge read from each pool's hold when scraped; every series there from the
        start, at 0."""
        for cold in cold_starts:
            name = cold.pool.name
            self._waiting.labels(name).set_function(_held(cold))
            self._cold.labels(name).set_function(_cold(cold))
            self._wait.labels(name)

    def waited(self, pool: str, seconds: float) -> None:
        self._wait.labels(pool).observe(seconds)

    def woken(self, pool: str, ok: bool) -> None:
        self._wakes.labels(pool, "ok" if ok else "failed").inc()


def _held(cold: ColdStart) -> Callable[[], float]:
    return lambda: cold.held_requests


def _cold(cold: ColdStart) -> Callable[[], float]:
    return lambda: float(cold.holding)

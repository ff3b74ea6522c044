"""What the console reads from the gateway's Prometheus registry, by metric name.

The counters are read where the gateway counts them (``GatewayMetrics``), through
``collect()`` of its registry (or of one metric, which is cheaper: the history reads
only the shed counter, every second), so the console shows what ``/metrics`` exports. A
metric that is not there (an older gateway, or nothing counted yet) reads as zero.
Counts are this gateway's since it started: each gateway counts its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client.registry import Collector

MODEL_REQUESTS = "headway_model_requests_total"
SHED = "headway_shed_total"
TEXTS = "headway_texts_total"
QUOTA_EXCEEDED = "quota_exceeded"
OVERLOADED = "overloaded"


def samples(source: Collector, name: str) -> Iterator[tuple[dict[str, str], float]]:
    """Every sample named ``name`` (``..._total`` for a counter), with its labels."""
    for family in source.collect():
        for sample in family.samples:
            if sample.name == name:
                yield sample.labels, sample.value


@dataclass(slots=True)
class TenantCounts:
    """One tenant's model requests by outcome (a tenant past the label limit is ``other``)."""

    served: float = 0.0
    quota_exceeded: float = 0.0
    """Refused with 429."""
    shed: float = 0.0
    """Refused by admission control (503 overloaded)."""


def tenant_counts(source: Collector) -> dict[str, TenantCounts]:
    counts: dict[str, TenantCounts] = {}
    for labels, value in samples(source, MODEL_REQUESTS):
        tenant = counts.setdefault(labels.get("tenant", ""), TenantCounts())
        outcome = labels.get("outcome", "")
        if outcome == "ok":
            tenant.served += value
        elif outcome == QUOTA_EXCEEDED:
            tenant.quota_exceeded += value
        elif outcome == OVERLOADED:
            tenant.shed += value
    return counts


def shed_totals(source: Collector) -> dict[str, float]:
    """Requests refused by admission control, per pool, every reason together."""
    totals: dict[str, float] = {}
    for labels, value in samples(source, SHED):
        pool = labels.get("pool", "")
        totals[pool] = totals.get(pool, 0.0) + value
    return totals


def served_by_route(source: Collector) -> dict[str, tuple[float, float]]:
    """Per route: (requests answered ok, texts served)."""
    served: dict[str, list[float]] = {}
    for labels, value in samples(source, MODEL_REQUESTS):
        if labels.get("outcome") == "ok":
            served.setdefault(labels.get("route", ""), [0.0, 0.0])[0] += value
    for labels, value in samples(source, TEXTS):
        served.setdefault(labels.get("route", ""), [0.0, 0.0])[1] += value
    return {route: (requests, texts) for route, (requests, texts) in served.items()}

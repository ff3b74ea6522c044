"""The gateway's metrics: every failure counted with a reason label."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from headway.metrics import LATENCY_BUCKETS


class GatewayMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.requests = Counter(
            "headway_requests_total",
            "Requests answered, by route and status code.",
            ["route", "code"],
            registry=self.registry,
        )
        self.failures = Counter(
            "headway_request_failures_total",
            "Requests that failed, by route and reason.",
            ["route", "reason"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "headway_request_seconds",
            "Time from request to response, by route.",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.texts = Counter(
            "headway_texts_total",
            "Texts served, by route and tenant.",
            ["route", "tenant"],
            registry=self.registry,
        )
        self.ready_replicas = Gauge(
            "headway_ready_replicas",
            "Ready replicas per pool.",
            ["pool"],
            registry=self.registry,
        )

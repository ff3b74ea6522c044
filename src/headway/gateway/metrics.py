"""The gateway's metrics: every answer counted and timed, every failure with a reason label.

``GatewayMetrics`` is the edge's ``AnswerObserver``: every answer the gateway gives,
404s and 413s included, passes through ``answered``. A model request is counted once
more, by ``model_answered``, with who asked and which version served it: the RED
metrics per route, tenant and version. Labelled children are looked up once per label
value, not per request. A tenant's name becomes a label value only for the first
``max_tenant_labels`` tenants seen; the rest share ``other``, so a platform with
thousands of tenants does not make thousands of series per metric.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from headway.gateway.pool import ReplicaPool
from headway.http.metrics import LATENCY_BUCKETS
from headway.metering.build import OutboxMetering
from headway.rollouts.compare import Agreement

AGREEMENT_BUCKETS = (0.0, 0.5, 0.8, 0.9, 0.95, 0.97, 0.98, 0.99, 0.995, 0.999, 1.0)
QUOTA_MODES = ("embedded", "redis", "local")
REPLICA_STATES = ("ready", "unready", "ejected")
OTHER_TENANTS = "other"


class TenantLabels:
    """The label value of a tenant: its name for the first ``limit`` tenants seen, then
    ``other``. A tenant keeps its label for the life of the process."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._named: dict[str, str] = {}

    def __call__(self, tenant: str) -> str:
        label = self._named.get(tenant)
        if label is not None:
            return label
        if len(self._named) >= self._limit:
            return OTHER_TENANTS
        self._named[tenant] = tenant
        return tenant


class GatewayMetrics:
    def __init__(
        self, registry: CollectorRegistry | None = None, *, max_tenant_labels: int = 50
    ) -> None:
        self.registry = registry or CollectorRegistry()
        self.tenant_label = TenantLabels(max_tenant_labels)
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
        self.model_requests = Counter(
            "headway_model_requests_total",
            "Model requests (embeddings, rerank and batch lines of them) by route, tenant, "
            "tier, the version that served them (12 hex; none: refused before one was "
            "chosen) and outcome (ok, or the error type: quota_exceeded, overloaded, ...).",
            ["route", "tenant", "tier", "version", "outcome"],
            registry=self.registry,
        )
        self.model_latency = Histogram(
            "headway_model_request_seconds",
            "Time from request to answer of model requests answered ok, by route, tenant "
            "and version.",
            ["route", "tenant", "version"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._budget = Gauge(
            "headway_latency_budget_seconds",
            "The latency budget admission control sizes each pool's limit for.",
            ["pool"],
            registry=self.registry,
        )
        self.texts = Counter(
            "headway_texts_total",
            "Texts served, by route and tenant.",
            ["route", "tenant"],
            registry=self.registry,
        )
        self.shed = Counter(
            "headway_shed_total",
            "Requests refused by admission control, by pool and reason.",
            ["pool", "reason"],
            registry=self.registry,
        )
        self._ready = Gauge(
            "headway_ready_replicas", "Ready replicas per pool.", ["pool"], registry=self.registry
        )
        self._limit = Gauge(
            "headway_admission_limit_texts",
            "Admission limit (texts outstanding) per pool.",
            ["pool"],
            registry=self.registry,
        )
        self._outstanding = Gauge(
            "headway_outstanding_texts",
            "Texts admitted and not yet finished, per pool.",
            ["pool"],
            registry=self.registry,
        )
        self._throughput = Gauge(
            "headway_throughput_estimate_texts_per_second",
            "The pool's learned throughput.",
            ["pool"],
            registry=self.registry,
        )

        self._quota_mode = Gauge(
            "headway_quota_mode",
            "1 for where quotas are counted now: redis (shared) or local (fallback share).",
            ["mode"],
            registry=self.registry,
        )
        self.background_failures = Counter(
            "headway_background_failures_total",
            "Failed steps of the gateway's background loops, by loop; each loop carries on.",
            ["loop"],
            registry=self.registry,
        )
        self.shadow_requests = Counter(
            "headway_shadow_requests_total",
            "Shadow copies by version pair (12-hex prefixes) and outcome: compared, "
            "failed, skipped (no spare capacity in the pool or at the worker).",
            ["primary", "candidate", "outcome"],
            registry=self.registry,
        )
        self.shadow_agreement = Histogram(
            "headway_shadow_agreement",
            "Agreement of a shadow copy with the primary's answer, by version pair and "
            "measure: cosine (embeddings, mean over texts) or spearman (rerank).",
            ["primary", "candidate", "measure"],
            buckets=AGREEMENT_BUCKETS,
            registry=self.registry,
        )
        self.shadow_top1 = Counter(
            "headway_shadow_top1_agreements_total",
            "Rerank shadow copies whose top document is the primary's, by version pair.",
            ["primary", "candidate"],
            registry=self.registry,
        )
        self._by_code: dict[tuple[str, int], Any] = {}
        self._by_outcome: dict[tuple[str, str, str, str, str], Any] = {}
        self._model_latency_of: dict[tuple[str, str, str], Any] = {}
        self._by_failure: dict[tuple[str, str], Any] = {}
        self._latency_of: dict[str, Any] = {}

    def answered(self, route: str, status: int, seconds: float, error: str | None) -> None:
        key = (route, status)
        requests = self._by_code.get(key)
        if requests is None:
            requests = self._by_code[key] = self.requests.labels(route, status)
        requests.inc()
        latency = self._latency_of.get(route)
        if latency is None:
            latency = self._latency_of[route] = self.latency.labels(route)
        latency.observe(seconds)
        if error is not None:
            failure = (route, error)
            failures = self._by_failure.get(failure)
            if failures is None:
                failures = self._by_failure[failure] = self.failures.labels(route, error)
            failures.inc()

    def model_answered(
        self, route: str, tenant: str, tier: str, version: str, outcome: str, seconds: float
    ) -> None:
        """One model request's answer; ``outcome`` is ``ok`` or the error type."""
        tenant = self.tenant_label(tenant)
        version = version[:12] or "none"
        key = (route, tenant, tier, version, outcome)
        requests = self._by_outcome.get(key)
        if requests is None:
            requests = self._by_outcome[key] = self.model_requests.labels(*key)
        requests.inc()
        if outcome != "ok":
            return
        where = (route, tenant, version)
        latency = self._model_latency_of.get(where)
        if latency is None:
            latency = self._model_latency_of[where] = self.model_latency.labels(*where)
        latency.observe(seconds)

    def served(self, route: str, tenant: str, texts: int) -> None:
        self.texts.labels(route, self.tenant_label(tenant)).inc(texts)

    def refused(self, pool: str, reason: str) -> None:
        self.shed.labels(pool, reason).inc()

    def background_failed(self, loop: str) -> None:
        self.background_failures.labels(loop).inc()

    def background_loop(self, loop: str) -> None:
        """A loop started: its failure count is 0 until a step fails."""
        self.background_failures.labels(loop)

    def quota_mode(self, mode: str) -> None:
        for each in QUOTA_MODES:
            self._quota_mode.labels(each).set(1 if each == mode else 0)

    def shadow_skipped(self, primary: str, candidate: str) -> None:
        self.shadow_requests.labels(primary[:12], candidate[:12], "skipped").inc()

    def shadow_failed(self, primary: str, candidate: str, latency_s: float) -> None:
        self.shadow_requests.labels(primary[:12], candidate[:12], "failed").inc()

    def shadow_compared(
        self, primary: str, candidate: str, latency_s: float, agreement: Agreement
    ) -> None:
        pair = (primary[:12], candidate[:12])
        self.shadow_requests.labels(*pair, "compared").inc()
        measure = "cosine" if agreement.top1 is None else "spearman"
        self.shadow_agreement.labels(*pair, measure).observe(agreement.measure)
        if agreement.top1:
            self.shadow_top1.labels(*pair).inc()

    def watch_pool(self, pool: ReplicaPool) -> None:
        """Gauges read from the pool when scraped."""
        self._ready.labels(pool.name).set_function(lambda: pool.ready_count)
        self._limit.labels(pool.name).set_function(lambda: pool.admission.limit)
        self._outstanding.labels(pool.name).set_function(lambda: pool.admission.outstanding)
        self._throughput.labels(pool.name).set_function(lambda: pool.admission.throughput)
        self._budget.labels(pool.name).set(pool.admission.config.latency_budget_s)
        self.registry.register(_RoutingCollector(pool))

    def watch_metering(self, metering: OutboxMetering) -> None:
        """The usage outbox and its relay, read when scraped."""
        self.registry.register(_MeteringCollector(metering))


class _MeteringCollector(Collector):
    """Outbox depth and bound; in shared mode the relay's connection and counts."""

    def __init__(self, metering: OutboxMetering) -> None:
        self._metering = metering

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        outbox, relay = self._metering.outbox, self._metering.relay
        yield GaugeMetricFamily(
            "headway_usage_outbox_events",
            "Usage events durable in this gateway's outbox, not yet relayed (or consumed).",
            value=outbox.depth,
        )
        yield GaugeMetricFamily(
            "headway_usage_outbox_full",
            "1 while the outbox is at its bound (billable requests get 503).",
            value=1 if outbox.full else 0,
        )
        if relay is None:
            return
        yield GaugeMetricFamily(
            "headway_usage_outbox_left_at_start_events",
            "Events found in the outbox when this gateway started: what the last run of its "
            "gateway id left behind (its stop's flush ran out of time, or it was killed).",
            value=self._metering.left_at_start or 0,
        )
        yield GaugeMetricFamily(
            "headway_usage_relay_connected",
            "1 while connected to NATS.",
            value=int(relay.connected),
        )
        yield CounterMetricFamily(
            "headway_usage_relay_published",
            "Events NATS JetStream acknowledged (stored).",
            value=relay.published_total,
        )
        failures = CounterMetricFamily(
            "headway_usage_relay_failures",
            "Failed publishes (and outbox reads or removals), by reason.",
            labels=["reason"],
        )
        for reason, count in sorted(relay.publish_failures.items()):
            failures.add_metric([reason], count)
        yield failures


class _RoutingCollector(Collector):
    """A pool's chunk attempts as counters (first sends, retries, hedges, hedges that won),
    its ejections, and the state of each replica."""

    def __init__(self, pool: ReplicaPool) -> None:
        self._pool = pool

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        family = CounterMetricFamily(
            "headway_chunk_attempts",
            "Calls to replicas by kind: first (one per chunk), retry, hedge, hedge_won.",
            labels=["pool", "kind"],
        )
        counts = self._pool.counts
        name = self._pool.name
        family.add_metric([name, "first"], counts.chunks)
        family.add_metric([name, "retry"], counts.retries)
        family.add_metric([name, "hedge"], counts.hedges)
        family.add_metric([name, "hedge_won"], counts.hedges_won)
        yield family
        ejections = CounterMetricFamily(
            "headway_replica_ejections",
            "Times a replica of the pool was ejected: after repeated failed calls, or when it "
            "stopped answering while ready (a crash).",
            labels=["pool"],
        )
        ejections.add_metric([name], counts.ejections)
        yield ejections
        states = GaugeMetricFamily(
            "headway_replica_state",
            "1 for each replica's state now (ready; unready: it says so, starting or "
            "draining; ejected: taken out after repeated failures or when it stopped "
            "answering), 0 for the others.",
            labels=["pool", "replica", "state"],
        )
        for replica in self._pool.replicas:
            now = self._pool.state(replica)
            for state in REPLICA_STATES:
                states.add_metric([name, replica.url, state], 1 if state == now else 0)
        yield states

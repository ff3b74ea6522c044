"""The billing consumer's metrics; also the consumer's and the ledger link's observer."""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from headway.billing.ledger.base import Applied

LAG_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 3600.0)


class BillingMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        events = Counter(
            "headway_billing_events_total",
            "Usage events the consumer committed, by result: new (written once), "
            "duplicate (already in the ledger: dropped), dead (malformed: a dead letter).",
            ["result"],
            registry=self.registry,
        )
        self._new, self._duplicate, self._dead = (
            events.labels(result=r) for r in ("new", "duplicate", "dead")
        )
        self._lag = Histogram(
            "headway_billing_lag_seconds",
            "From the gateway's answer to the event's commit in the ledger.",
            buckets=LAG_BUCKETS,
            registry=self.registry,
        )
        self._failures = Counter(
            "headway_billing_apply_failures_total",
            "Ledger transactions that failed (the batch is retried, never acked before).",
            registry=self.registry,
        )
        self._source_failures = Counter(
            "headway_billing_source_failures_total",
            "Fetches and acks that failed (NATS away): retried; an unacked batch comes again.",
            ["step"],
            registry=self.registry,
        )
        self._pending = Gauge(
            "headway_billing_pending_events",
            "Events in the source not yet committed and acknowledged (consumer lag).",
            registry=self.registry,
        )
        self._ledger_up = Gauge(
            "headway_billing_ledger_up",
            "1 while the consumer's last ledger call succeeded; 0 before the ledger was first "
            "reached and while it is unreachable (the consumer waits and retries).",
            registry=self.registry,
        )
        self._ledger_retries = Counter(
            "headway_billing_ledger_retries_total",
            "Ledger calls (opening it, writing a batch) tried again after a failure.",
            registry=self.registry,
        )
        self._batches = Counter(
            "headway_billing_batches_total",
            "Batches committed to the ledger.",
            registry=self.registry,
        )

    def committed(self, applied: Applied, lags_s: Sequence[float]) -> None:
        self._batches.inc()
        self._new.inc(applied.new)
        self._duplicate.inc(applied.duplicates)
        self._dead.inc(applied.dead)
        for lag in lags_s:
            self._lag.observe(max(0.0, lag))

    def apply_failed(self) -> None:
        self._failures.inc()

    def source_failed(self, step: str) -> None:
        self._source_failures.labels(step=step).inc()

    def pending(self, events: int) -> None:
        self._pending.set(events)

    def ledger_up(self, up: bool) -> None:
        self._ledger_up.set(1 if up else 0)

    def ledger_retry(self) -> None:
        self._ledger_retries.inc()

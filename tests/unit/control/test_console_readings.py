"""What the console reads from Prometheus: by name, summed, zero when absent."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from headway.control.console.readings import served_by_route, shed_totals, tenant_counts


def test_nothing_counted_reads_as_nothing():
    empty = CollectorRegistry()
    assert shed_totals(empty) == {} and tenant_counts(empty) == {}
    assert served_by_route(empty) == {}


def test_sheds_sum_over_reasons_per_pool_and_requests_split_by_outcome():
    registry = CollectorRegistry()
    shed = Counter("headway_shed_total", "", ["pool", "reason"], registry=registry)
    shed.labels("embed", "pool_full").inc(3)
    shed.labels("embed", "batch_share").inc(2)
    shed.labels("rerank", "pool_full").inc()
    requests = Counter(
        "headway_model_requests_total",
        "",
        ["route", "tenant", "tier", "version", "outcome"],
        registry=registry,
    )
    requests.labels("embeddings", "acme", "interactive", "abc", "ok").inc(10)
    requests.labels("rerank", "acme", "interactive", "def", "ok").inc(2)
    requests.labels("embeddings", "acme", "interactive", "none", "quota_exceeded").inc(4)
    requests.labels("embeddings", "acme", "interactive", "none", "overloaded").inc(1)
    requests.labels("embeddings", "acme", "interactive", "abc", "upstream_error").inc(7)
    texts = Counter("headway_texts_total", "", ["route", "tenant"], registry=registry)
    texts.labels("embeddings", "acme").inc(40)
    assert shed_totals(registry) == {"embed": 5.0, "rerank": 1.0}
    assert shed_totals(shed) == shed_totals(registry)  # one metric alone reads the same
    acme = tenant_counts(registry)["acme"]
    assert (acme.served, acme.quota_exceeded, acme.shed) == (12.0, 4.0, 1.0)
    assert served_by_route(registry) == {"embeddings": (10.0, 40.0), "rerank": (2.0, 0.0)}

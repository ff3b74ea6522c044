"""Unit economics: cost per 1k requests from measured capacity, revenue from the price."""

from __future__ import annotations

from decimal import Decimal

import pytest

from headway.control.console.economics import (
    capacity_requests_per_s,
    cost_per_1k,
    mean_per_request,
    pool_cost,
    revenue_per_1k,
)


def test_cost_follows_the_formula():
    # 2 machines at 3.60/h, 400 texts/s, 4 texts a request: 100 requests/s.
    cost = pool_cost("embed", 2, 400.0, texts=4000, requests=1000, machine_cost_per_hour=3.6)
    assert cost.mean_texts_per_request == 4.0
    assert cost.capacity_requests_per_s == 100.0
    # 7.20 an hour / 360,000 requests an hour x 1000 = 0.02
    assert cost.cost_per_1k == pytest.approx(0.02)


def test_no_cost_without_a_machine_cost_a_ready_replica_or_a_measured_throughput():
    assert cost_per_1k(0.0, 2, 100.0) is None
    assert cost_per_1k(1.0, 0, 100.0) is None
    assert cost_per_1k(1.0, 2, 0.0) is None
    assert pool_cost("embed", 1, 0.0, 0, 0, 2.0).cost_per_1k is None


def test_one_text_a_request_before_anything_is_served():
    assert mean_per_request(0, 0) == 1.0
    assert mean_per_request(10, 0) == 1.0
    assert mean_per_request(30, 10) == 3.0
    assert capacity_requests_per_s(50.0, 0.0) == 0.0


def test_revenue_is_the_price_times_the_units_a_request_uses():
    # 0.02 per million tokens, 25 tokens a request: 0.0005 per 1k requests.
    assert revenue_per_1k(Decimal("0.0200"), 1_000_000, 25.0) == pytest.approx(0.0005)
    # 0.05 per 1000 texts, 8 texts a request: 0.40 per 1k requests.
    assert revenue_per_1k(Decimal("0.0500"), 1000, 8.0) == pytest.approx(0.4)

"""Unit economics of a model pool: what 1,000 requests cost to serve and earn (pure).

Cost comes from what the pool can do, measured, not from what it happens to be given:

    capacity (requests/s)   = throughput (texts/s) / mean texts per request
    cost per 1k requests    = machine_cost_per_hour x ready replicas
                              / (3600 x capacity) x 1000

``throughput`` is the admission controller's learned estimate, which rises at once to
any rate the pool completed and falls only when the pool had a backlog throughout a
window, so it is a lower bound on capacity until the pool has been busy; a pool that
has served nothing has no cost per request yet (None). Each ready replica is one
machine at ``machine_cost_per_hour``.

Revenue is the price book's: a price of ``amount`` per ``per`` units (texts or
tokens) earns ``amount / per x mean units per request x 1000`` per 1,000 requests.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

FORMULA = (
    "cost per 1k requests = machine_cost_per_hour × ready replicas ÷ (3600 × capacity) × 1000,"
    " where capacity (requests/s) = learned throughput (texts/s) ÷ mean texts per request"
)
REVENUE_FORMULA = (
    "revenue per 1k requests = price ÷ per × mean units (texts or tokens) per request × 1000"
)


@dataclass(frozen=True, slots=True)
class PoolCost:
    pool: str
    ready: int
    throughput: float
    mean_texts_per_request: float
    capacity_requests_per_s: float
    cost_per_1k: float | None
    """None: no machine cost set, no ready replica, or nothing measured yet."""


def mean_per_request(units: float, requests: float) -> float:
    """Units per request; 1 before any request (one text per request is the least)."""
    return units / requests if requests > 0 and units > 0 else 1.0


def capacity_requests_per_s(throughput_texts_per_s: float, mean_texts: float) -> float:
    return throughput_texts_per_s / mean_texts if mean_texts > 0 else 0.0


def cost_per_1k(machine_cost_per_hour: float, machines: int, capacity: float) -> float | None:
    if machine_cost_per_hour <= 0 or machines <= 0 or capacity <= 0:
        return None
    return machine_cost_per_hour * machines / (3600 * capacity) * 1000


def pool_cost(
    pool: str,
    ready: int,
    throughput: float,
    texts: float,
    requests: float,
    machine_cost_per_hour: float,
) -> PoolCost:
    mean = mean_per_request(texts, requests)
    capacity = capacity_requests_per_s(throughput, mean)
    return PoolCost(
        pool, ready, throughput, mean, capacity, cost_per_1k(machine_cost_per_hour, ready, capacity)
    )


def revenue_per_1k(amount: Decimal, per: int, units_per_request: float) -> float:
    """What 1,000 requests of ``units_per_request`` texts or tokens earn at the price."""
    return float(amount) / per * units_per_request * 1000

"""The Economics page's JSON: each pool's cost per 1k requests, and what its priced
aliases earn per 1k (the arithmetic is ``economics.py``).

A texts price uses this month's texts per request from the ledger where it has usage
of the alias, else the pool's from the metrics; a tokens price needs the ledger.
"""

from __future__ import annotations

from typing import Any

from headway.control.console import economics, readings
from headway.control.console.api import month_usage
from headway.control.console.parts import ConsoleParts


async def economics_view(parts: ConsoleParts) -> dict[str, Any]:
    settings, pools, now = parts.settings, parts.pools, parts.wall_clock()
    served: dict[str, list[float]] = {}
    for route, (requests, texts) in readings.served_by_route(parts.metrics).items():
        pool = pools.for_route(route, parts.snapshots.current)
        if pool is not None:
            totals = served.setdefault(pool.name, [0.0, 0.0])
            totals[0] += requests
            totals[1] += texts
    ledger, rows = await month_usage(parts)
    by_alias: dict[str, list[int]] = {}
    for row in rows:
        totals_of = by_alias.setdefault(row.alias or "", [0, 0, 0])
        totals_of[0] += row.requests
        totals_of[1] += row.texts
        totals_of[2] += row.tokens
    snapshot = parts.snapshots.current
    hour = int(now // 3600 * 3600)
    answer = []
    for pool in pools:
        requests, texts = served.get(pool.name, [0.0, 0.0])
        cost = economics.pool_cost(
            pool.name,
            pool.ready_count,
            pool.admission.throughput,
            texts,
            requests,
            settings.machine_cost_per_hour,
        )
        aliases = sorted(
            name
            for name, record in snapshot.models.items()
            if name != record.version and record.version in pool.versions
        )
        revenue = []
        for alias in aliases:
            price = (
                None if parts.prices is None else parts.prices.price_for(alias, "interactive", hour)
            )
            if price is None:
                continue
            requests_month, texts_month, tokens_month = by_alias.get(alias, [0, 0, 0])
            units: float | None
            if price.unit == "texts":
                source = "ledger" if requests_month else "metrics"
                units = (
                    economics.mean_per_request(texts_month, requests_month)
                    if requests_month
                    else cost.mean_texts_per_request
                )
            else:
                source = "ledger"
                units = tokens_month / requests_month if requests_month else None
            per_1k = (
                None if units is None else economics.revenue_per_1k(price.amount, price.per, units)
            )
            revenue.append(
                {
                    "alias": alias,
                    "unit": price.unit,
                    "per": price.per,
                    "amount": str(price.amount),
                    "currency": price.currency,
                    "units_per_request": units,
                    "source": source,
                    "revenue_per_1k": per_1k,
                }
            )
        answer.append(
            {
                "pool": pool.name,
                "ready": cost.ready,
                "throughput": round(cost.throughput, 2),
                "mean_texts_per_request": round(cost.mean_texts_per_request, 3),
                "capacity_requests_per_s": round(cost.capacity_requests_per_s, 3),
                "cost_per_1k": cost.cost_per_1k,
                "revenue": revenue,
            }
        )
    return {
        "machine_cost_per_hour": settings.machine_cost_per_hour,
        "currency": settings.currency,
        "formula": economics.FORMULA,
        "revenue_formula": economics.REVENUE_FORMULA,
        "ledger": ledger,
        "prices": parts.prices is not None,
        "pools": answer,
    }

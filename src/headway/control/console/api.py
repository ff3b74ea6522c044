"""The JSON each console page polls (the Economics page's is ``costs.py``).

Reads come from where the gateway keeps them: the pools and their admission
controllers (live), the history sampler, the registry snapshot, the registry store
(models, rollouts, the audit log: synchronous, so in a thread), the usage ledger
(this month, when the gateway has one open) and the Prometheus registry (this
gateway's counts since it started). No answer holds an input text.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any, TypeVar

from headway.billing.ledger.base import UsageQuery, UsageRow
from headway.control.admin.access import in_thread
from headway.control.console import readings
from headway.control.console.parts import ConsoleParts
from headway.gateway.pools import Pools
from headway.registry.model import AuditQuery, Rollout
from headway.registry.store import RegistryStore
from headway.utc import rfc3339

log = logging.getLogger(__name__)

T = TypeVar("T")
AUDIT_ENTRIES = 50


# Pools & replicas -------------------------------------------------------------------


def pools_view(pools: Pools) -> dict[str, Any]:
    answer = []
    for pool in pools:
        now = pool.clock()
        replicas = [
            {
                "url": replica.url,
                "state": pool.state(replica),
                "reason": pool.ejection_reason(replica),
                "version": replica.model_version[:12],
                "versions": sorted(v[:12] for v in replica.loaded),
                "on_demand": sorted(v[:12] for v in replica.versions - replica.loaded),
                "outstanding_texts": replica.outstanding_texts,
                "latency_ms": round(replica.latency_s * 1000, 2),
                "consecutive_failures": replica.health.consecutive_failures,
                "ejections": replica.health.ejections + replica.losses,
                "ejected_for_s": round(max(0.0, replica.health.ejected_until - now), 1),
            }
            for replica in pool.replicas
        ]
        answer.append(
            {
                "name": pool.name,
                "ready": pool.ready_count,
                "size": len(pool.replicas),
                "ejections": pool.counts.ejections,
                "limit": pool.admission.limit,
                "outstanding": pool.admission.outstanding,
                "replicas": replicas,
            }
        )
    return {"pools": answer}


# Admission --------------------------------------------------------------------------


def admission_view(parts: ConsoleParts) -> dict[str, Any]:
    answer = []
    for pool in parts.pools:
        points = parts.history.points(pool.name)
        admission = pool.admission
        answer.append(
            {
                "name": pool.name,
                "limit": admission.limit,
                "outstanding": admission.outstanding,
                "throughput": round(admission.throughput, 2),
                "ready": pool.ready_count,
                "retry_after_s": round(admission.retry_after_s(), 3),
                "shed_per_s": round(points[-1].shed_per_s, 3) if points else 0.0,
                "points": [
                    [
                        round(p.ago_s, 1),
                        p.limit,
                        p.outstanding,
                        round(p.throughput, 2),
                        round(p.shed_per_s, 3),
                        p.ready,
                    ]
                    for p in points
                ],
            }
        )
    return {
        "window_s": parts.history.window_s,
        "latency_budget_s": parts.latency_budget_s,
        "columns": ["ago_s", "limit", "outstanding", "throughput", "shed_per_s", "ready"],
        "pools": answer,
    }


# Tenants ----------------------------------------------------------------------------


def month_start(now: float) -> float:
    day = dt.datetime.fromtimestamp(now, dt.UTC)
    return dt.datetime(day.year, day.month, 1, tzinfo=dt.UTC).timestamp()


async def month_usage(parts: ConsoleParts) -> tuple[str, list[UsageRow]]:
    """This month's usage by tenant and model, and ``ok``, ``unavailable`` (no ledger
    open) or ``failed`` (it could not be read now)."""
    ledger = parts.usage_ledger()
    if ledger is None:
        return "unavailable", []
    now = parts.wall_clock()
    try:
        return "ok", await ledger.usage(UsageQuery(month_start(now), now, "model", None))
    except Exception as exc:
        log.warning("console: usage ledger read failed: %s", exc)
        return "failed", []


async def tenants_view(parts: ConsoleParts) -> dict[str, Any]:
    ledger, rows = await month_usage(parts)
    usage: dict[int, list[int]] = {}  # by tenant id: a re-created name starts at nothing
    for row in rows:
        totals = usage.setdefault(row.tenant_id, [0, 0, 0])
        totals[0] += row.requests
        totals[1] += row.texts
        totals[2] += row.tokens
    counts = readings.tenant_counts(parts.metrics)
    tenants = []
    for name, tenant in sorted(parts.snapshots.current.tenants.items()):
        seen = counts.get(name, readings.TenantCounts())
        used = usage.get(tenant.id, [0, 0, 0]) if ledger == "ok" else None
        tenants.append(
            {
                "name": name,
                "tier": tenant.tier,
                "rate_texts_per_s": tenant.rate_texts_per_s,
                "burst_texts": tenant.burst_texts,
                "month": None
                if used is None
                else dict(zip(("requests", "texts", "tokens"), used, strict=True)),
                "served": seen.served,
                "quota_exceeded": seen.quota_exceeded,
                "shed": seen.shed,
            }
        )
    other = counts.get("other")
    return {
        "ledger": ledger,
        "month_start": rfc3339(month_start(parts.wall_clock())),
        "tenants": tenants,
        "other": None if other is None else _counts(other),
    }


def _counts(counts: readings.TenantCounts) -> dict[str, float]:
    """Tenants past the metrics' label limit, counted together as ``other``."""
    return {"served": counts.served, "quota_exceeded": counts.quota_exceeded, "shed": counts.shed}


# Models -----------------------------------------------------------------------------


def rollout_answer(rollout: Rollout) -> dict[str, Any]:
    steps = rollout.plan.steps
    return {
        "id": rollout.id,
        "alias": rollout.alias,
        "primary": rollout.primary[:12],
        "candidate": rollout.candidate[:12],
        "state": rollout.state,
        "step": rollout.step,
        "steps": list(steps),
        "percent": steps[rollout.step] if rollout.step < len(steps) else None,
        "reason": rollout.reason,
        "started_by": rollout.started_by,
        "updated_at": rfc3339(rollout.updated_at),
    }


async def models_view(parts: ConsoleParts) -> dict[str, Any]:
    def read(store: RegistryStore) -> tuple[Any, list[Rollout]]:
        return store.models(), store.rollouts(active=True)

    models, active = await in_thread(parts.store, read)
    served = parts.pools.served_versions()
    versions = [
        {
            "version": record.version[:12],
            "name": record.name,
            "kind": record.kind,
            "dimensions": record.dimensions,
            "quantization": record.quantization,
            "aliases": sorted(aliases),
            "served": record.version in served,
            "created_at": rfc3339(record.created_at) if record.created_at else None,
        }
        for record, aliases in models
    ]
    splits = [
        {
            "alias": split.alias,
            "weights": [[version[:12], weight] for version, weight in split.weights],
            "sticky": split.sticky,
            "pins": len(split.pins),
            "shadow": None
            if split.shadow is None
            else [split.shadow.version[:12], split.shadow.share],
        }
        for _, split in sorted(parts.snapshots.current.splits.items())
    ]
    quality = None
    if parts.quality is not None:
        quality = [
            {
                "version": q.version[:12],
                "kind": q.kind,
                "reference_rows": q.reference_rows,
                "window_rows": q.window_rows,
                "mean_norm": q.mean_norm,
                "centroid_drift": q.centroid_drift,
                "mmd": q.mmd,
                "mmd_p_value": q.mmd_p_value,
                "score_ks_p_value": q.score_ks_p_value,
                "drifting": q.drifting,
                "traffic": q.traffic,
            }
            for q in parts.quality.summary()
        ]
    return {
        "versions": versions,
        "splits": splits,
        "rollouts": [rollout_answer(r) for r in active],
        "quality": quality,
    }


# Audit ------------------------------------------------------------------------------


async def audit_view(parts: ConsoleParts) -> dict[str, Any]:
    entries = await in_thread(parts.store, lambda s: s.audit(AuditQuery(limit=AUDIT_ENTRIES)))
    return {
        "entries": [
            {
                "id": e.id,
                "at": rfc3339(e.at),
                "actor": e.actor,
                "action": e.action,
                "target": e.target,
                "before": e.before,
                "after": e.after,
                "request_id": e.request_id,
            }
            for e in entries
        ]
    }

"""Rows to values and values to rows, and the JSON an audit entry records of each.

Each ``*_COLUMNS`` string is the select list its ``*_of`` reads, in order. The audit
forms (``*_json``) name keys by their id and never hold a key or its digest.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from typing import Any, cast

from headway.models.agreement import Agreement
from headway.registry.model import (
    ApiKey,
    AuditEntry,
    BatchLimits,
    ModelRecord,
    Observation,
    ObservedRole,
    Role,
    Rollout,
    RolloutPlan,
    RolloutState,
    Shadow,
    Split,
    Sticky,
    Tenant,
    TenantDeletion,
    VariantGate,
)
from headway.registry.rules import tier_of
from headway.storage.dialect import Row

Parse = Callable[[Any], Any]
JsonDict = dict[str, Any]

TENANT_COLUMNS = (
    "id, name, tier, rate_texts_per_s, burst_texts, max_files, max_stored_bytes, max_open_batches"
)


def tenant_of(row: Row) -> Tenant:
    limits = BatchLimits(*(None if value is None else int(value) for value in row[5:8]))
    return Tenant(int(row[0]), row[1], tier_of(row[2]), float(row[3]), float(row[4]), limits)


def tenant_json(tenant: Tenant) -> JsonDict:
    """The tenant's fields; a Batch API bound only where the tenant has its own (absent:
    the gateway's setting)."""
    own = {name: value for name, value in asdict(tenant.batch_limits).items() if value is not None}
    return {
        "id": tenant.id,
        "name": tenant.name,
        "tier": tenant.tier,
        "rate_texts_per_s": tenant.rate_texts_per_s,
        "burst_texts": tenant.burst_texts,
        **own,
    }


DELETION_COLUMNS = "tenant_id, name, deleted_at, blobs, finished_at"


def deletion_of(row: Row, parsed: Parse) -> TenantDeletion:
    blobs = parsed(row[3])
    return TenantDeletion(
        int(row[0]),
        row[1],
        float(row[2]),
        None if blobs is None else tuple(blobs),
        None if row[4] is None else float(row[4]),
    )


KEY_COLUMNS = (
    "k.key_id, t.name, k.role, k.created_at, k.expires_at, k.revoked_at"
    " FROM api_keys k LEFT JOIN tenants t ON t.id = k.tenant_id"
)
"""A select list with its ``FROM``: a key names its tenant."""

LIVE_KEY = "k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > ?)"
"""A key that works at the time given as the parameter."""


def api_key_of(row: Row) -> ApiKey:
    return ApiKey(row[0], row[1], cast(Role, row[2]), float(row[3]), row[4], row[5])


def key_json(key: ApiKey) -> JsonDict:
    return asdict(key)


MODEL_COLUMNS = (
    "version, name, kind, dimensions, quantization, size_bytes, created_at, max_tokens,"
    " matryoshka_dimensions, prompts, default_prompt, agreement, variant_gate"
)
MODEL_PLACEHOLDERS = ", ".join("?" * (MODEL_COLUMNS.count(",") + 1))


def model_of(row: Row) -> ModelRecord:
    return ModelRecord(
        row[0],
        row[1],
        row[2],
        int(row[3]),
        row[4],
        int(row[5]),
        float(row[6]),
        int(row[7]),
        tuple(int(width) for width in json.loads(row[8])),
        tuple(sorted((str(k), str(v)) for k, v in json.loads(row[9]).items())),
        row[10],
        None if row[11] is None else Agreement.from_json(json.loads(row[11])),
        None if row[12] is None else VariantGate(**json.loads(row[12])),
    )


def model_row(record: ModelRecord) -> tuple[Any, ...]:
    """The values of ``MODEL_COLUMNS``, in order."""
    return (
        record.version,
        record.name,
        record.kind,
        record.dimensions,
        record.quantization,
        record.size_bytes,
        record.created_at,
        record.max_tokens,
        json.dumps(list(record.matryoshka_dimensions)),
        json.dumps(dict(record.prompts), sort_keys=True),
        record.default_prompt_name,
        None if record.agreement is None else json.dumps(record.agreement.to_json()),
        None if record.variant_gate is None else json.dumps(asdict(record.variant_gate)),
    )


def model_json(record: ModelRecord) -> JsonDict:
    return asdict(record)


SPLIT_COLUMNS = "alias, weights, sticky, pins, shadow_version, shadow_share"


def split_of(row: Row, parsed: Parse) -> Split:
    shadow = None if row[4] is None else Shadow(row[4], float(row[5]))
    return Split(
        row[0],
        tuple((version, weight) for version, weight in parsed(row[1])),
        cast(Sticky, row[2]),
        tuple((tenant, version) for tenant, version in parsed(row[3])),
        shadow,
    )


def split_json(split: Split | None) -> JsonDict | None:
    if split is None:
        return None
    return {
        "alias": split.alias,
        "weights": [list(pair) for pair in split.weights],
        "sticky": split.sticky,
        "pins": [list(pair) for pair in split.pins],
        "shadow": None if split.shadow is None else asdict(split.shadow),
    }


ROLLOUT_COLUMNS = (
    "id, alias, primary_version, candidate_version, plan, state, step, step_started_at,"
    " reason, started_by, created_at, updated_at"
)


def rollout_of(row: Row, parsed: Parse) -> Rollout:
    return Rollout(
        int(row[0]),
        row[1],
        row[2],
        row[3],
        plan_of(parsed(row[4])),
        cast(RolloutState, row[5]),
        int(row[6]),
        row[7],
        row[8],
        row[9],
        float(row[10]),
        float(row[11]),
    )


def plan_json(plan: RolloutPlan) -> JsonDict:
    return {**asdict(plan), "steps": list(plan.steps)}


def plan_of(stored: JsonDict) -> RolloutPlan:
    return RolloutPlan(**{**stored, "steps": tuple(stored["steps"])})


def rollout_json(rollout: Rollout) -> JsonDict:
    return {**asdict(rollout), "plan": plan_json(rollout.plan)}


OBSERVATION_COLUMNS = (
    "rollout_id, step, gateway_id, role, requests, errors, latency_buckets,"
    " agreement_n, agreement_sum, top1_n, top1_agree"
)


def observation_of(row: Row, parsed: Parse) -> Observation:
    return Observation(
        int(row[0]),
        int(row[1]),
        row[2],
        cast(ObservedRole, row[3]),
        int(row[4]),
        int(row[5]),
        tuple(parsed(row[6])),
        int(row[7]),
        float(row[8]),
        int(row[9]),
        int(row[10]),
    )


AUDIT_COLUMNS = "id, at, actor, action, target, before, after, request_id"


def audit_of(row: Row, parsed: Parse) -> AuditEntry:
    return AuditEntry(
        int(row[0]), float(row[1]), row[2], row[3], row[4], parsed(row[5]), parsed(row[6]), row[7]
    )

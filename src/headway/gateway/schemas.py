"""The gateway's own answers: models, health and readiness, replicas, usage."""

from __future__ import annotations

from typing import Literal

import msgspec


class ModelEntry(msgspec.Struct):
    id: str
    version: str
    kind: str
    dimensions: int
    object: str = "model"
    owned_by: str = "headway"


class ModelList(msgspec.Struct):
    """``GET /v1/models``: the names (aliases and versions) of the models being served."""

    data: list[ModelEntry]
    object: str = "list"


class Health(msgspec.Struct):
    status: str


class PoolReadiness(msgspec.Struct):
    ready: int
    replicas: int


class Readiness(msgspec.Struct):
    """``GET /readyz``: 200 when every pool has a ready replica (or, with
    ``gateway.cold_start_hold``, is cold: its requests wait for one) and the gateway is not
    draining."""

    ready: bool
    pools: dict[str, PoolReadiness]


class ReplicaState(msgspec.Struct):
    url: str
    state: Literal["ready", "unready", "ejected"]
    model_version: str
    versions: list[str]
    outstanding_texts: int
    latency_ms: float
    consecutive_failures: int
    ejections: int


class PoolRouting(msgspec.Struct):
    hedging: bool
    quantile: float
    latency_quantile_ms: float | None
    chunks: int
    retries: int
    hedges: int
    hedges_won: int


class Replicas(msgspec.Struct):
    """``GET /admin/replicas``: each pool's replicas, and what its chunks cost in attempts."""

    pools: dict[str, list[ReplicaState]]
    routing: dict[str, PoolRouting]


class UsageEntry(msgspec.Struct):
    """Billable usage of one tenant in one period (``group_by=hour|day``), or of one
    model version over the whole range (``group_by=model``). A tenant is its id: one
    created with a deleted tenant's name has usage of its own (0: usage recorded, by
    name, before usage carried tenant ids)."""

    tenant_id: int
    tenant: str
    period_start: str
    """RFC 3339, UTC: the hour's or the day's start; for ``model``, the range's start."""
    model: str | None
    version: str | None
    requests: int
    texts: int
    tokens: int


class Usage(msgspec.Struct):
    """Usage in ``[start, end)`` from the ledger (what has been billed so far)."""

    start: str
    end: str
    group_by: Literal["hour", "day", "model"]
    data: list[UsageEntry]
    object: str = "list"

"""The data plane's own answers: the models served, health and readiness."""

from __future__ import annotations

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

"""What the registry holds, as plain immutable values."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Tier = Literal["interactive", "batch"]
Role = Literal["tenant", "admin"]
TIERS: tuple[Tier, ...] = ("interactive", "batch")
MODEL_KINDS = ("embedding", "cross-encoder")


@dataclass(frozen=True, slots=True)
class Tenant:
    id: int
    name: str
    tier: Tier
    rate_texts_per_s: float
    burst_texts: float


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a key belongs to: a tenant, or the operator (admin, no tenant)."""

    role: Role
    tenant: Tenant | None
    key_digest: bytes

    @property
    def key_id(self) -> str:
        """Names the key in usage events and logs: the first 8 bytes of its digest, in hex."""
        return self.key_digest[:8].hex()


@dataclass(frozen=True, slots=True)
class ModelRecord:
    version: str
    name: str
    kind: str
    dimensions: int
    quantization: str


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything the gateway needs on the request path, loaded at once.

    ``principals`` is keyed by SHA-256 digest of the key; ``aliases`` maps
    alias (and each version to itself) to a model record.
    """

    principals: dict[bytes, Principal] = field(default_factory=dict)
    models: dict[str, ModelRecord] = field(default_factory=dict)

    def resolve_model(self, name: str) -> ModelRecord | None:
        return self.models.get(name)

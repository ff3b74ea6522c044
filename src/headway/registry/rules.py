"""The rules a value must keep before the registry writes it (pure; ``errors`` names each)."""

from __future__ import annotations

import math

from headway.registry.errors import InvalidQuota, UnknownModelKind, UnknownTier
from headway.registry.model import MODEL_KINDS, TIERS, Tier


def tier_of(value: str) -> Tier:
    """``value`` as a tier, or ``UnknownTier``."""
    for tier in TIERS:
        if value == tier:
            return tier
    raise UnknownTier(f"tier {value!r} is not one of {', '.join(TIERS)}")


def quota_value(name: str, value: float) -> float:
    """A quota's ``rate_texts_per_s`` or ``burst_texts``: a positive, finite number."""
    if not (math.isfinite(value) and value > 0):
        raise InvalidQuota(f"{name} must be a positive, finite number, not {value}")
    return float(value)


def model_kind(kind: str) -> str:
    if kind not in MODEL_KINDS:
        raise UnknownModelKind(f"model kind {kind!r} is not one of {', '.join(MODEL_KINDS)}")
    return kind

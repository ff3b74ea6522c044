"""The rules a value must keep before the registry writes it (pure; ``errors`` names each)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import replace
from itertools import pairwise

from headway.registry.errors import (
    InvalidBillingCustomer,
    InvalidGate,
    InvalidLimit,
    InvalidOverlap,
    InvalidQuota,
    InvalidRollout,
    InvalidSplit,
    InvalidTenantName,
    UnknownModelKind,
    UnknownTier,
)
from headway.registry.model import (
    BATCH_LIMITS,
    MODEL_KINDS,
    SHADOW_STEP,
    STICKY,
    TENANT_NAME_PATTERN,
    TENANT_NAME_RULE,
    TIERS,
    BatchLimits,
    RolloutPlan,
    Split,
    Tier,
    VariantGate,
)

DEFAULT_RATE: dict[Tier, float] = {"interactive": 200.0, "batch": 500.0}
DEFAULT_BURST: dict[Tier, float] = {"interactive": 400.0, "batch": 2000.0}
"""A new tenant's quota when none is given: its tier's."""


MAX_CUSTOMER_ID_CHARS = 255
"""Stripe's ids are far shorter (``cus_`` and 14 more); any provider's fits."""


def tenant_name(name: str) -> str:
    """``name`` if a new tenant may have it (``TENANT_NAME_PATTERN``), else
    ``InvalidTenantName`` stating the rule."""
    # A name that is no string is no typed caller's: the schema's NOT NULL refuses it.
    if isinstance(name, str) and re.fullmatch(TENANT_NAME_PATTERN, name) is None:
        raise InvalidTenantName(f"tenant name {name[:80]!r} is refused: {TENANT_NAME_RULE}")
    return name


def billing_customer_value(value: str) -> str:
    """``value`` as a billing provider customer id, or ``InvalidBillingCustomer``: 1 to
    255 printable ASCII characters, no spaces (it goes into form fields and logs as is)."""
    if not 0 < len(value) <= MAX_CUSTOMER_ID_CHARS:
        raise InvalidBillingCustomer(
            f"a billing customer id has 1 to {MAX_CUSTOMER_ID_CHARS} characters, not {len(value)}"
        )
    if not all("!" <= char <= "~" for char in value):
        raise InvalidBillingCustomer(
            "a billing customer id is printable ASCII without spaces (such as cus_NffrFeUfNV2Hib)"
        )
    return value


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


_SETTINGS_ONLY = BatchLimits()


def check_batch_limits(
    changes: Mapping[str, int | None], before: BatchLimits = _SETTINGS_ONLY
) -> BatchLimits:
    """``before`` with ``changes`` made: each key one of ``BATCH_LIMITS``, each value a whole
    number from 0 (the tenant's own bound) or None (back to the gateway's setting)."""
    for name, value in changes.items():
        if name not in BATCH_LIMITS:
            raise InvalidLimit(f"{name!r} is not a tenant limit; use {', '.join(BATCH_LIMITS)}")
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63
        ):
            raise InvalidLimit(f"{name} must be a whole number from 0, or none, not {value!r}")
    return replace(before, **changes)


def model_kind(kind: str) -> str:
    if kind not in MODEL_KINDS:
        raise UnknownModelKind(f"model kind {kind!r} is not one of {', '.join(MODEL_KINDS)}")
    return kind


def overlap_value(overlap_s: float) -> float:
    """How long a rotated-out key keeps working: zero (revoked at once) or more seconds."""
    if not (math.isfinite(overlap_s) and overlap_s >= 0):
        raise InvalidOverlap(
            f"overlap_s must be zero or a positive, finite number, not {overlap_s}"
        )
    return float(overlap_s)


def check_gate(gate: VariantGate | None) -> None:
    """A gate's figures are agreements: numbers from 0 to 1 (``InvalidGate``)."""
    if gate is None:
        return
    for name, value in (
        ("mean cosine", gate.min_mean_cosine),
        ("neighbours", gate.min_nn_agreement),
    ):
        if not (isinstance(value, int | float) and math.isfinite(value) and 0.0 <= value <= 1.0):
            raise InvalidGate(f"a variant gate's least {name} must be from 0 to 1, not {value!r}")


def check_split(split: Split) -> Split:
    """A split the gateway can draw from: at least one weighted version, each weight
    positive and finite, no version weighted twice, one pin per tenant, and a shadow
    (if any) of a share in (0, 1] on a version that takes no weighted traffic (a copy
    of a request to the version that answers it compares nothing)."""
    if not split.alias:
        raise InvalidSplit("a split needs an alias")
    if not split.weights:
        raise InvalidSplit(f"the split of {split.alias!r} weights no version")
    versions = [version for version, _ in split.weights]
    if len(set(versions)) != len(versions):
        raise InvalidSplit(f"the split of {split.alias!r} weights a version twice")
    for version, weight in split.weights:
        if not (math.isfinite(weight) and weight > 0):
            raise InvalidSplit(
                f"the weight of {version!r} must be a positive, finite number, not {weight}"
            )
    if split.sticky not in STICKY:
        raise InvalidSplit(f"sticky {split.sticky!r} is not one of {', '.join(STICKY)}")
    tenants = [tenant for tenant, _ in split.pins]
    if len(set(tenants)) != len(tenants):
        raise InvalidSplit(f"the split of {split.alias!r} pins a tenant twice")
    shadow = split.shadow
    if shadow is not None:
        if not (math.isfinite(shadow.share) and 0 < shadow.share <= 1):
            raise InvalidSplit(f"a shadow share must be in (0, 1], not {shadow.share}")
        if shadow.version in versions:
            raise InvalidSplit(f"the shadow version {shadow.version!r} is also weighted")
    return split


def check_plan(plan: RolloutPlan) -> RolloutPlan:
    """A plan a rollout can follow: steps strictly increasing percentages from 0 to 100
    (``SHADOW_STEP`` only first) ending at 100, a positive interval, and thresholds that
    some interval could pass."""
    steps = plan.steps
    if not steps or steps[-1] != 100:
        raise InvalidRollout(f"a plan's steps must end at 100, not {list(steps)}")
    if any(not 0 <= step <= 100 for step in steps):
        raise InvalidRollout(f"a plan's steps must be percentages in 0..100, not {list(steps)}")
    if SHADOW_STEP in steps[1:]:
        raise InvalidRollout("only a plan's first step may be the shadow step (0)")
    if any(later <= earlier for earlier, later in pairwise(steps)):
        raise InvalidRollout(f"a plan's steps must strictly increase, not {list(steps)}")
    _in_range("interval_s", plan.interval_s, low=0, high=math.inf, low_open=True)
    _in_range("max_error_rate", plan.max_error_rate, low=0, high=1)
    _in_range("max_latency_ratio", plan.max_latency_ratio, low=0, high=math.inf, low_open=True)
    _in_range("min_agreement", plan.min_agreement, low=-1, high=1)
    _in_range("min_requests", plan.min_requests, low=0, high=math.inf)
    _in_range("shadow_share", plan.shadow_share, low=0, high=1, low_open=True)
    return plan


def _in_range(name: str, value: float, *, low: float, high: float, low_open: bool = False) -> None:
    finite = math.isfinite(value)
    above = value > low if low_open else value >= low
    if not (finite and above and value <= high):
        opening = "(" if low_open else "["
        closing = ")" if math.isinf(high) else "]"
        raise InvalidRollout(f"{name} must be in {opening}{low}, {high}{closing}, not {value}")

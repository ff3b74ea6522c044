"""Which version of a split alias serves one request (pure).

A pinned tenant gets its pin. Otherwise the split's weights, among the versions some
replica serves now (a candidate whose replicas are still loading gets nothing yet),
share the unit interval in the split's order, and the request's point in it chooses:
a hash of (alias, tenant) or (alias, user) when the split is sticky, so one caller sees
one version for as long as the weights hold (and, as a canary's weight grows, the
callers it already had stay on it); a fresh draw when it is not.
"""

from __future__ import annotations

import hashlib

from headway.registry.model import Split

_SCALE = float(1 << 64)


def sticky_point(alias: str, key: str) -> float:
    """A point in [0, 1) that depends only on (alias, key)."""
    digest = hashlib.blake2b(f"{alias}\0{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / _SCALE


def choose_version(
    split: Split, tenant: str, user: str | None, served: frozenset[str], draw: float
) -> str | None:
    """The version for this request, or None when no weighted version is served.
    ``draw``: a uniform [0, 1) number, used when the split is not sticky."""
    for pinned_tenant, version in split.pins:
        if pinned_tenant == tenant:
            return version
    weights = [(version, weight) for version, weight in split.weights if version in served]
    if not weights:
        return None
    if split.sticky == "none":
        point = draw
    else:
        point = sticky_point(split.alias, user if split.sticky == "user" and user else tenant)
    target = point * sum(weight for _, weight in weights)
    for version, weight in weights:
        target -= weight
        if target < 0:
            return version
    return weights[-1][0]


def shadow_version(split: Split, served: frozenset[str], draw: float) -> str | None:
    """The version this request is copied to, if its share draws it and it is served."""
    shadow = split.shadow
    if shadow is None or shadow.version not in served or draw >= shadow.share:
        return None
    return shadow.version

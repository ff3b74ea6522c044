"""Which model version serves the request, and the pool that serves that version.

The version is chosen once, here, and every chunk of the request goes to it, even if
the split changes while the request runs (the chunks carry the version; a replica
serves only the versions it advertises). A name is a version (served as itself) or an
alias: an alias without a split serves its primary version; one with a split chooses
per ``gateway/splits.py`` (pins, weights, stickiness) among the versions being served,
and may pick a version to copy the request to (shadow traffic, see ``stages/shadow``).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from headway.errors import NotFound
from headway.gateway.pool import ReplicaPool
from headway.gateway.pools import Pools
from headway.gateway.splits import choose_version, shadow_version
from headway.registry.model import ModelRecord, Snapshot


@dataclass(slots=True)
class ShadowTarget:
    record: ModelRecord
    pool: ReplicaPool


@dataclass(slots=True)
class Target:
    record: ModelRecord
    pool: ReplicaPool
    alias: str
    """What the request is billed under: the alias that resolved, or the model's name
    when the client named a version."""
    shadow: ShadowTarget | None = None


def resolve(
    names: Sequence[str],
    snapshot: Snapshot,
    pools: Pools,
    tenant: str,
    user: str | None = None,
    rng: random.Random | None = None,
) -> Target:
    """The first of ``names`` the registry knows (an alias or a version), and its pool."""
    for name in names:
        record = snapshot.resolve_model(name)
        if record is None:
            continue
        if name == record.version:
            return Target(record, pools.serving(record), record.name)
        split = snapshot.splits.get(name)
        if split is None:
            return Target(record, pools.serving(record), name)
        draw = (rng or random).random
        served = pools.served_versions()
        chosen = choose_version(split, tenant, user, served, draw())
        if chosen is not None:
            record = snapshot.models.get(chosen, record)
        target = Target(record, pools.serving(record), name)
        copy_to = shadow_version(split, served, draw())
        if copy_to is not None and copy_to != record.version and copy_to in snapshot.models:
            shadow = snapshot.models[copy_to]
            target.shadow = ShadowTarget(shadow, pools.serving(shadow))
        return target
    raise NotFound(f"model {names[-1]!r} does not exist")

"""Which model version serves the request, and the pool that serves that version.

The version is chosen once, here, and every chunk of the request goes to it (a
rollout may have two versions ready at once). Today an alias names one version;
a traffic split (canary, A/B) will choose among an alias's versions here, and
nowhere else.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from headway.errors import NotFound
from headway.gateway.pool import ReplicaPool
from headway.gateway.pools import Pools
from headway.registry.model import ModelRecord, Snapshot


@dataclass(slots=True)
class Target:
    record: ModelRecord
    pool: ReplicaPool
    alias: str
    """What the request is billed under: the alias that resolved, or the model's name
    when the client named a version."""


def resolve(names: Sequence[str], snapshot: Snapshot, pools: Pools) -> Target:
    """The first of ``names`` the registry knows (an alias or a version), and its pool."""
    for name in names:
        record = snapshot.resolve_model(name)
        if record is not None:
            alias = record.name if name == record.version else name
            return Target(record, pools.serving(record), alias)
    raise NotFound(f"model {names[-1]!r} does not exist")

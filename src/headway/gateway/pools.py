"""The model pools this gateway routes to, and which one serves a given model version."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from headway.errors import NoReplicas, NotFound
from headway.gateway.pool import ReplicaPool
from headway.registry.model import ModelRecord


class Pools:
    def __init__(self, pools: Mapping[str, ReplicaPool]) -> None:
        self._pools = dict(pools)

    def __iter__(self) -> Iterator[ReplicaPool]:
        return iter(self._pools.values())

    def __getitem__(self, name: str) -> ReplicaPool:
        return self._pools[name]

    def for_route(self, route: str) -> ReplicaPool | None:
        """The pool a route's requests usually go to, for the check made before parsing."""
        if route == "rerank" and "rerank" in self._pools:
            return self._pools["rerank"]
        return self._pools.get("embed")

    def serving(self, record: ModelRecord) -> ReplicaPool:
        """A pool with ready replicas serving this exact version."""
        for pool in self._pools.values():
            if record.version in pool.versions:
                return pool
        if not any(pool.ready_count for pool in self._pools.values()):
            raise NoReplicas("no replica is ready yet", retry_after_s=1.0)
        raise NotFound(f"model {record.name!r} ({record.version[:12]}) is not being served")

    def served_versions(self) -> frozenset[str]:
        return frozenset().union(*(pool.versions for pool in self._pools.values()))

    @property
    def ready(self) -> bool:
        """Every pool has a ready replica."""
        return bool(self._pools) and all(pool.ready_count for pool in self._pools.values())

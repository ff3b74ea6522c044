"""The model pools this gateway routes to, and which one serves a given model version.

A cross-encoder is served by the rerank pool, every other model by the embed pool (as the
workers choose what to serve: ``worker/main.py``'s ``POOL_KINDS``); a gateway without a
rerank pool sends everything to embed. The checks made before a replica is asked (the
precheck before parsing, the wait for a cold pool) go by that, so rerank by cosine on an
embedding model never waits for, nor wakes, a rerank pool that serves no cross-encoder.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from headway.errors import NoReplicas, NotFound
from headway.gateway.pool import ReplicaPool
from headway.registry.model import ModelRecord, Snapshot


class Pools:
    def __init__(self, pools: Mapping[str, ReplicaPool], rerank_alias: str = "rerank") -> None:
        """``rerank_alias``: what a rerank request naming no model asks for first."""
        self._pools = dict(pools)
        self._rerank_alias = rerank_alias

    def __iter__(self) -> Iterator[ReplicaPool]:
        return iter(self._pools.values())

    def __getitem__(self, name: str) -> ReplicaPool:
        return self._pools[name]

    def for_route(self, route: str, snapshot: Snapshot) -> ReplicaPool | None:
        """The pool a route's requests usually go to, for the check made before parsing:
        rerank's is that of the rerank alias (a request naming no model), else embed's."""
        if route == "rerank":
            return self.for_record(snapshot.resolve_model(self._rerank_alias))
        return self._pools.get("embed")

    def for_models(self, names: Sequence[str], snapshot: Snapshot) -> ReplicaPool | None:
        """The pool of the first of ``names`` the registry knows (embed's if none)."""
        record = next(filter(None, map(snapshot.resolve_model, names)), None)
        return self.for_record(record)

    def for_record(self, record: ModelRecord | None) -> ReplicaPool | None:
        """The pool that serves a model of ``record``'s kind (see the module docstring)."""
        if record is not None and record.kind == "cross-encoder" and "rerank" in self._pools:
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

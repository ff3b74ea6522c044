"""The results cache on the request path: texts already computed by this version skip
the workers.

Between the quota charge and admission each text of an embeddings request is looked up by
(model version, its processing settings, dimensions, SHA-256 of the text, the tenant's scope:
its own or its shared group's); only the misses (``Lookup.todo``) are admitted and dispatched,
so a hit takes no permit and no worker time. New rows are stored, in the memory tier at once
and in the shared tier without holding the answer.

The key is the guarantee: a tenant is answered only from entries it (or its group) filled, so
its latency on a text another tenant sent is a fresh text's; an answer never mixes versions, and
a request resolved to a new version finds nothing of the old one. The processing settings are
the version's kind, quantization and width; everything else that shapes a vector (tokenizer,
pooling, normalisation, maximum tokens) is in the version's manifest, and so in its hash. Rerank
is not cached: a (query, document) pair rarely repeats.

Cached texts are charged to the quota and billed like computed ones, with the tokens the model
read when it computed them: the tenant pays for the answer, not for where it came from.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import numpy as np

from headway.cache.entry import Entry
from headway.cache.key import namespace, text_key
from headway.cache.results import ResultsCache
from headway.gateway.stages.merge import Merged
from headway.gateway.stages.recent_hits import RecentHits
from headway.registry.model import ModelRecord, Tenant
from headway.tracing.spans import span

log = logging.getLogger(__name__)


class Cacheable(Protocol):
    """A parsed request the cache can serve in part: its texts, and a request of a few."""

    @property
    def texts(self) -> int: ...

    @property
    def cache_texts(self) -> Sequence[str] | None:
        """The texts its rows are keyed by, in order; None: this request is not cached."""

    def only(self: W, indices: Sequence[int]) -> W:
        """The same request for just these texts (in this order)."""


W = TypeVar("W", bound=Cacheable)


@dataclass(slots=True)
class Lookup(Generic[W]):
    todo: W | None
    """What still needs the workers: the whole request, only its misses, or None."""
    scope: str = ""
    keys: Sequence[bytes] = ()
    found: Sequence[Entry | None] = ()
    misses: Sequence[int] = ()
    """Indices of the texts ``todo`` computes, in order."""

    @property
    def hits(self) -> int:
        return len(self.keys) - len(self.misses)


WHOLE_HIT_WINDOW_S = 1.0
"""How long after the cache last answered a tenant a whole request a full pool still lets
that tenant's requests be parsed and looked up (``may_answer``)."""


class RequestCache:
    """The gateway's side of the cache: ``look_up`` before admission, ``complete`` after."""

    def __init__(
        self, cache: ResultsCache | None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        """``cache`` None: the cache is off (every request goes to the workers)."""
        self._cache = cache
        self._clock = clock
        self._whole_hits: RecentHits[int] = RecentHits(WHOLE_HIT_WINDOW_S)
        self._filling: set[asyncio.Task[None]] = set()

    async def close(self) -> None:
        """Let the fills under way finish, then close the shared tier's connection."""
        if self._filling:
            await asyncio.gather(*self._filling, return_exceptions=True)
        if self._cache is not None:
            await self._cache.close()

    async def forget_tenant(self, name: str, tenant_id: int) -> None:
        """Drop a deleted tenant's entries in this gateway's memory and in Redis (other
        gateways' memory keeps its own scope until evicted, where no later tenant can
        reach it: its id is never given again).

        A tenant in a shared group takes the group's entries with it: an entry does not
        say which member filled it, so forgetting what this one sent means forgetting
        them all (the other members compute them again). Its own scope goes too, in
        case it was filled before the tenant joined the group."""
        self._whole_hits.forget(tenant_id)
        cache = self._cache
        if cache is not None:
            for scope in cache.scopes_holding(name, tenant_id):
                await cache.drop_scope(scope)

    def may_answer(self, tenant: Tenant) -> bool:
        """Whether a request of ``tenant`` might be answered by the cache alone, so a full
        pool should not refuse it before it is parsed: the cache serves the tenant and
        answered *this tenant* a whole request within the last ``WHOLE_HIT_WINDOW_S``.
        Where its texts rarely repeat, a full pool then refuses before the body is
        parsed, as without a cache; where they do, a request whose every text is known
        is still served. Another tenant's hits change nothing here."""
        if self._cache is None or not self._cache.enabled_for(tenant.name):
            return False
        return self._whole_hits.recent(tenant.id, self._clock())

    async def look_up(self, work: W, tenant: Tenant, record: ModelRecord) -> Lookup[W]:
        cache = self._cache
        texts = work.cache_texts
        if cache is None or texts is None or not cache.enabled_for(tenant.name):
            return Lookup(work)
        scope = cache.scope_of(tenant.name, tenant.id)
        processing = f"kind={record.kind};quantization={record.quantization}"
        ns = namespace(record.version, processing, record.dimensions, "embed", scope)
        keys = [text_key(ns, text) for text in texts]
        with span("cache", {"headway.texts": len(keys)}) as looked:
            found = await cache.get_many(scope, keys)
            misses = [index for index, entry in enumerate(found) if entry is None]
            looked.set("headway.cache.misses", len(misses))
        if not misses:
            self._whole_hits.mark(tenant.id, self._clock())
            return Lookup(None, scope, keys, found, misses)
        todo = work if len(misses) == len(keys) else work.only(misses)
        return Lookup(todo, scope, keys, found, misses)

    def complete(self, lookup: Lookup[W], computed: Merged | None) -> Merged:
        """The whole request's rows: the found ones and ``computed`` (the misses', in order)."""
        if not lookup.keys:
            assert computed is not None
            return computed
        if computed is not None:
            self._fill(lookup, computed)
        if not lookup.misses:
            return from_entries(lookup.found)
        assert computed is not None
        if len(lookup.misses) == len(lookup.keys):
            return computed
        values = np.empty((len(lookup.keys), computed.values.shape[1]), dtype=np.float32)
        values[list(lookup.misses)] = computed.values
        tokens = computed.tokens
        for index, entry in enumerate(lookup.found):
            if entry is not None:
                values[index] = np.frombuffer(entry.values, dtype="<f4")
                tokens += entry.tokens
        return Merged(values, tokens, computed.queue_s, computed.inference_s)

    def _fill(self, lookup: Lookup[W], computed: Merged) -> None:
        cache = self._cache
        if cache is None or len(computed.row_tokens) != len(lookup.misses):
            return  # a worker that does not report tokens per row: nothing exact to keep
        rows = np.ascontiguousarray(computed.values, dtype="<f4")
        items = [
            (lookup.keys[index], Entry(rows[row].tobytes(), int(computed.row_tokens[row])))
            for row, index in enumerate(lookup.misses)
        ]
        task = asyncio.ensure_future(self._put(cache, lookup.scope, items))
        self._filling.add(task)
        task.add_done_callback(self._filling.discard)

    @staticmethod
    async def _put(cache: ResultsCache, scope: str, items: list[tuple[bytes, Entry]]) -> None:
        try:
            await cache.put_many(scope, items)
        except Exception:  # a cache that cannot be filled only costs a later miss
            log.exception("could not store %d results in the cache", len(items))


def from_entries(entries: Sequence[Entry | None]) -> Merged:
    rows = [np.frombuffer(entry.values, dtype="<f4") for entry in entries if entry is not None]
    tokens = sum(entry.tokens for entry in entries if entry is not None)
    return Merged(np.stack(rows), tokens, 0.0, 0.0)

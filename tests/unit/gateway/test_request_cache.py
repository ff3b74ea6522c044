"""RequestCache: per-tenant scopes on look-up, per-tenant "may answer", forgetting a tenant."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from headway.cache.entry import Entry
from headway.cache.memory import MemoryCache
from headway.cache.metrics import CacheMetrics
from headway.cache.results import ResultsCache
from headway.gateway.stages.cache import WHOLE_HIT_WINDOW_S, RequestCache
from headway.gateway.stages.merge import Merged
from headway.registry.model import ModelRecord, Tenant
from headway.settings import CacheSettings
from tests.fakes import FakeClock, until

RECORD = ModelRecord("v1", "m", "embedding", 2, "fp32")
IDS = {"hostile": 1, "victim": 2, "a": 3, "b": 4, "c": 5}


def tenant(name: str, tenant_id: int | None = None) -> Tenant:
    """The tenant of that name (its usual id, or ``tenant_id``: another of the name)."""
    return Tenant(IDS[name] if tenant_id is None else tenant_id, name, "interactive", 1e3, 1e3)


@dataclass
class Texts:
    cache_texts: Sequence[str]

    @property
    def texts(self) -> int:
        return len(self.cache_texts)

    def only(self, indices: Sequence[int]) -> Texts:
        return Texts([self.cache_texts[i] for i in indices])


def computed(n: int) -> Merged:
    rows = np.ones((n, 2), dtype=np.float32)
    return Merged(rows, 3 * n, 0.0, 0.0, np.full(n, 3, dtype=np.uint32))


def make(**settings: object) -> tuple[RequestCache, ResultsCache, FakeClock]:
    clock = FakeClock()
    results = ResultsCache(
        MemoryCache(1 << 20), None, CacheMetrics(), CacheSettings.model_validate(settings)
    )
    return RequestCache(results, clock), results, clock


async def serve(cache: RequestCache, who: str | Tenant, texts: list[str]) -> bool:
    """One request's look-up and completion; True if the cache answered it whole."""
    lookup = await cache.look_up(Texts(texts), tenant(who) if isinstance(who, str) else who, RECORD)
    if lookup.todo is None:
        cache.complete(lookup, None)
        return True
    cache.complete(lookup, computed(len(lookup.misses)))
    return False


async def test_a_whole_hit_lets_that_tenant_only_skip_the_precheck_for_the_window() -> None:
    cache, results, clock = make()
    await serve(cache, "hostile", ["same"])
    await until(lambda: results.memory.entries == 1)
    assert not cache.may_answer(tenant("hostile"))  # stored, not yet answered whole
    assert await serve(cache, "hostile", ["same"])
    assert cache.may_answer(tenant("hostile"))
    assert not cache.may_answer(tenant("victim"))
    clock.advance(WHOLE_HIT_WINDOW_S)
    assert not cache.may_answer(tenant("hostile"))


async def test_a_tenant_never_reads_another_tenants_entries() -> None:
    cache, results, _ = make()
    await serve(cache, "a", ["secret"])
    await until(lambda: results.memory.entries == 1)
    assert not await serve(cache, "b", ["secret"])
    assert await serve(cache, "a", ["secret"])


async def test_a_tenant_created_with_a_deleted_ones_name_reads_none_of_its_entries() -> None:
    """As in a gateway that never heard of the deletion: the old acme's entries are still in
    its memory, under the old id, where the new acme (another id) cannot reach them."""
    cache, results, _ = make()
    await serve(cache, "a", ["the first a's text"])
    await until(lambda: results.memory.entries == 1)
    again = tenant("a", tenant_id=99)
    assert not await serve(cache, again, ["the first a's text"])
    assert not cache.may_answer(again)
    assert await serve(cache, "a", ["the first a's text"])  # the old id's, untouched


async def test_a_shared_group_reads_its_members_entries() -> None:
    cache, results, _ = make(shared_groups={"corp": ("a", "b")})
    await serve(cache, "a", ["shared"])
    await until(lambda: results.memory.entries == 1)
    assert await serve(cache, "b", ["shared"])
    assert not await serve(cache, "c", ["shared"])


async def test_forgetting_a_tenant_drops_its_entries_its_groups_and_its_mark() -> None:
    cache, results, _ = make(shared_groups={"corp": ("a", "b")})
    results.memory.put_many(
        f"tenant:{IDS['a']}", [(b"k" * 32, Entry(b"\0" * 8, 1))]
    )  # before it joined
    await serve(cache, "a", ["x"])
    await serve(cache, "c", ["y"])
    await until(lambda: results.memory.entries == 3)
    assert await serve(cache, "a", ["x"]) and cache.may_answer(tenant("a"))
    await cache.forget_tenant("a", IDS["a"])
    assert not cache.may_answer(tenant("a"))
    assert (
        results.memory.scope_held(f"tenant:{IDS['a']}")
        == results.memory.scope_held("group:corp")
        == 0
    )
    assert results.memory.entries == 1  # c's
    assert not await serve(cache, "b", ["x"])


async def test_without_a_cache_nothing_is_answered_or_forgotten() -> None:
    cache = RequestCache(None)
    assert not cache.may_answer(tenant("a"))
    await cache.forget_tenant("a", IDS["a"])
    assert (await cache.look_up(Texts(["x"]), tenant("a"), RECORD)).todo is not None

"""The results cache keeps tenants apart: the hostile tenant learns nothing from it.

Each model call costs a fixed, real ``COST_S`` (the synthetic backend's wait), so a text
the cache answers is clearly faster than one a worker computes. Tenant B's latency on
texts tenant A sent is measured against B's latency on fresh texts, the requests of both
samples interleaved in a shuffled order, and compared with the two-sample
Kolmogorov–Smirnov test (``quality.stats.ks_test``). The same measurement shows its
power twice: A's own repeats, and B's requests where A and B share a group, are told
apart from fresh texts by a huge margin.

Thresholds: "indistinguishable" is p > 0.001 (the samples come from one code path, so a
flake is a 1-in-1,000 event at most); "told apart" is p < 1e-6. A clean separation of 40
against 40 gives D = 1 and p ~ 6e-19 (hits ~1 ms, misses above ``COST_S``); on a 2-core
box at load 8 a quarter of the hits were slowed past the misses and it still gave D =
0.75, p ~ 8e-11. p stays under 1e-6 until D falls below ~0.6.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field

from headway.cache.results import ResultsCache
from headway.metering.sink import MemorySink
from headway.quality.stats import ks_test
from headway.settings import AdmissionSettings
from tests.fakes import until
from tests.service.conftest import Stack, auth, make_stack
from tests.service.test_admin_api import ADMIN, create_tenant
from tests.service.test_admission import Gate
from tests.service.test_cache_path import Seen, cache_of, embed

A, B = "demo-key-search-app", "demo-key-support-bot"
COST_S = 0.008
ROUNDS = 40
INDISTINGUISHABLE_P = 1e-3
SEPARATED_P = 1e-6


def fixed_cost(seconds: float) -> None:
    time.sleep(COST_S)


@dataclass
class Samples:
    seconds: dict[str, list[float]] = field(default_factory=dict)
    headers: dict[str, set[frozenset[str]]] = field(default_factory=dict)

    def add(self, name: str, seconds: float, headers: frozenset[str]) -> None:
        self.seconds.setdefault(name, []).append(seconds)
        self.headers.setdefault(name, set()).add(headers)


async def timed(stack: Stack, key: str, text: str) -> tuple[float, frozenset[str]]:
    body = {"model": "synthetic", "input": [text]}
    started = time.perf_counter()
    response = await stack.client.post("/v1/embeddings", headers=auth(key), json=body)
    seconds = time.perf_counter() - started
    assert response.status_code == 200, response.text
    varying = {"x-request-id", "content-length"}
    return seconds, frozenset(name for name in response.headers if name not in varying)


async def measure(stack: Stack, cache: ResultsCache) -> Samples:
    """A sends ``ROUNDS`` texts; then, in each round, shuffled: B sends one of A's texts
    and a fresh one, A repeats one of its texts and sends a fresh one."""
    sent_by_a = [f"probe sent-by-a {i:04d}" for i in range(ROUNDS)]
    for text in sent_by_a:
        await embed(stack, [text], key=A)
    await until(lambda: cache.memory.entries == ROUNDS)
    samples, order = Samples(), random.Random(25)
    for i, text in enumerate(sent_by_a):
        round_ = [
            ("b_on_a_texts", B, text),
            ("b_fresh", B, f"probe fresh-to-b {i:04d}"),
            ("a_repeats", A, text),
            ("a_fresh", A, f"probe fresh-to-a {i:04d}"),
        ]
        order.shuffle(round_)
        for name, key, sent in round_:
            samples.add(name, *await timed(stack, key, sent))
    return samples


async def test_a_tenants_latency_on_another_tenants_texts_is_a_fresh_texts(tmp_path):
    cache, sink = cache_of(), MemorySink()
    stack = await make_stack(tmp_path, cache=cache, sleep=fixed_cost, metering=sink)
    try:
        samples = await measure(stack, cache)
    finally:
        await stack.close()
    seconds = samples.seconds
    across = ks_test(seconds["b_on_a_texts"], seconds["b_fresh"])
    own = ks_test(seconds["a_repeats"], seconds["a_fresh"])
    assert across.p_value > INDISTINGUISHABLE_P, (across, _medians(seconds))
    assert own.p_value < SEPARATED_P, (own, _medians(seconds))
    # nor do its answers' headers or its usage rows differ: every one of B's was computed
    assert samples.headers["b_on_a_texts"] == samples.headers["b_fresh"]
    b_rows = [e for e in sink.events if e.tenant == "support-bot"]
    assert len(b_rows) == 2 * ROUNDS and all(e.inference_s > 0 for e in b_rows)


async def test_the_same_measurement_tells_a_shared_groups_hits_apart(tmp_path):
    cache = cache_of(shared_groups={"corp": ("search-app", "support-bot")})
    stack = await make_stack(tmp_path, cache=cache, sleep=fixed_cost)
    try:
        samples = await measure(stack, cache)
    finally:
        await stack.close()
    across = ks_test(samples.seconds["b_on_a_texts"], samples.seconds["b_fresh"])
    assert across.p_value < SEPARATED_P, (across, _medians(samples.seconds))


def _medians(seconds: dict[str, list[float]]) -> dict[str, float]:
    return {name: round(sorted(s)[len(s) // 2] * 1000, 2) for name, s in seconds.items()}


async def test_one_tenants_whole_hits_leave_a_full_pool_refusing_another_before_parsing(
    tmp_path,
):
    """A hostile tenant repeating one text keeps the shortcut on for itself only."""
    gate, cache = Gate(), cache_of()
    stack = await make_stack(
        tmp_path,
        cache=cache,
        sleep=gate.sleep,
        admission=AdmissionSettings(static_limit_texts=1),
    )
    try:
        gate.open.set()
        await embed(stack, ["repeated"], key=B)
        await until(lambda: cache.memory.entries == 1)
        await embed(stack, ["repeated"], key=B)  # a whole hit for B
        gate.open.clear()
        holder = asyncio.ensure_future(embed(stack, ["holds the pool"], key=A))
        pool = stack.gateway.pools["embed"]
        await until(lambda: pool.admission.outstanding == 1)
        broken = b'{"model": '
        victim = await stack.client.post("/v1/embeddings", headers=auth(A), content=broken)
        assert victim.status_code == 503  # refused before parsing, as without a cache
        hostile = await stack.client.post("/v1/embeddings", headers=auth(B), content=broken)
        assert hostile.status_code == 400  # parsed: the cache might answer B
        gate.open.set()
        await holder
    finally:
        gate.open.set()
        await stack.close()


async def test_deleting_a_tenant_forgets_its_entries_and_a_new_one_of_its_name_starts_empty(
    tmp_path,
):
    cache = cache_of()
    stack = await make_stack(tmp_path, cache=cache)
    try:
        await embed(stack, ["secret of a"], key=A)
        await embed(stack, ["kept by b"], key=B)
        await until(lambda: cache.memory.entries == 2)
        deleted = await stack.client.delete("/admin/tenants/search-app", headers=ADMIN)
        assert deleted.status_code == 200
        assert cache.memory.entries == 1
        created = await create_tenant(stack.client, "search-app")
        seen = Seen(stack)
        await embed(stack, ["secret of a"], key=created["key"])
        await embed(stack, ["kept by b"], key=B)
        assert seen.texts == ["secret of a"]  # computed again; B's entry was kept
    finally:
        await stack.close()


async def test_deleting_a_group_member_forgets_the_groups_entries(tmp_path):
    groups = {"corp": ("search-app", "support-bot")}
    cache = cache_of(shared_groups=groups)
    stack = await make_stack(tmp_path, cache=cache)
    try:
        await embed(stack, ["sent by a"], key=A)
        await embed(stack, ["sent by b"], key=B)
        await embed(stack, ["sent by someone else"], key="demo-key-nightly-index")
        await until(lambda: cache.memory.entries == 3)
        seen = Seen(stack)
        await embed(stack, ["sent by a"], key=B)  # shared: a hit
        assert seen.texts == []
        deleted = await stack.client.delete("/admin/tenants/search-app", headers=ADMIN)
        assert deleted.status_code == 200
        assert cache.memory.entries == 1  # the group's two went; nightly-index's stays
        await embed(stack, ["sent by a"], key=B)
        assert seen.texts == ["sent by a"]
    finally:
        await stack.close()

"""The results cache on the request path: only misses reach the workers, answers equal."""

from __future__ import annotations

import asyncio
import base64

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from headway import wire
from headway.cache.memory import MemoryCache
from headway.cache.metrics import CacheMetrics
from headway.cache.results import ResultsCache
from headway.metering.sink import MemorySink
from headway.settings import CacheSettings
from tests.service.conftest import auth, make_stack

REGISTRIES: dict[int, CollectorRegistry] = {}


def cache_of(**settings: object) -> ResultsCache:
    registry = CollectorRegistry()
    cache = ResultsCache(
        MemoryCache(1 << 20), None, CacheMetrics(registry), CacheSettings(**settings)
    )
    REGISTRIES[id(cache)] = registry
    return cache


class Seen:
    """The texts each embed call carried to a worker."""

    def __init__(self, stack) -> None:
        self.texts: list[str] = []
        send = stack.transport.send

        async def recording(request):
            if request.path.endswith("/embed"):
                self.texts += wire.embed_decoder.decode(request.body).texts
            return await send(request)

        stack.transport.send = recording


async def embed(stack, texts, key="demo-key-search-app", **fields):
    body = {"model": "synthetic", "input": texts} | fields
    response = await stack.client.post("/v1/embeddings", headers=auth(key), json=body)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.fixture
async def stacks(tmp_path):
    sink = MemorySink()
    cache = cache_of()
    cached = await make_stack(tmp_path / "a", cache=cache, metering=sink)
    plain = await make_stack(tmp_path / "b")
    cached.cache_registry = REGISTRIES[id(cache)]
    yield cached, plain, sink
    await cached.close()
    await plain.close()


async def test_only_the_misses_go_to_the_workers_and_the_answer_is_in_order(stacks):
    cached, plain, _ = stacks
    seen = Seen(cached)
    await embed(cached, ["alpha", "beta"])
    await asyncio.sleep(0)  # the fill is scheduled after the answer
    answer = await embed(cached, ["gamma", "beta", "alpha", "delta"])
    assert seen.texts == ["alpha", "beta", "gamma", "delta"]
    direct = await embed(plain, ["gamma", "beta", "alpha", "delta"])
    assert [d["embedding"] for d in answer["data"]] == [d["embedding"] for d in direct["data"]]
    assert [d["index"] for d in answer["data"]] == [0, 1, 2, 3]


async def test_a_request_the_cache_answers_whole_reaches_no_worker_and_bills_the_same(stacks):
    cached, _, sink = stacks
    seen = Seen(cached)
    first = await embed(cached, ["one", "two three four"])
    await asyncio.sleep(0)
    second = await embed(cached, ["two three four", "one"])
    assert seen.texts == ["one", "two three four"]
    assert second["usage"] == first["usage"]  # the tokens the model read, kept per text
    events = [e for e in sink.events if e.outcome == "served"]
    assert [e.texts for e in events] == [2, 2] and events[0].tokens == events[1].tokens
    assert all(e.billable for e in events)
    hits = generate_latest(cached.cache_registry).decode()
    assert 'headway_cache_lookups_total{result="memory"} 2.0' in hits
    assert 'headway_cache_lookups_total{result="miss"} 2.0' in hits


async def test_base64_answers_come_from_the_same_rows(stacks):
    cached, _, _ = stacks
    floats = await embed(cached, ["x"])
    await asyncio.sleep(0)
    packed = await embed(cached, ["x"], encoding_format="base64")
    row = np.frombuffer(base64.b64decode(packed["data"][0]["embedding"]), dtype="<f4")
    assert np.allclose(row, floats["data"][0]["embedding"])


async def test_a_disabled_tenant_neither_reads_nor_fills_the_cache(tmp_path):
    stack = await make_stack(tmp_path, cache=cache_of(disabled_tenants=("search-app",)))
    try:
        seen = Seen(stack)
        await embed(stack, ["same"])
        await asyncio.sleep(0)
        await embed(stack, ["same"])
        assert seen.texts == ["same", "same"]
        await embed(stack, ["same"], key="demo-key-support-bot")
        await asyncio.sleep(0)
        await embed(stack, ["same"], key="demo-key-support-bot")
        assert seen.texts == ["same", "same", "same"]
    finally:
        await stack.close()


async def test_by_default_each_tenants_entries_are_its_own(tmp_path):
    stack = await make_stack(tmp_path, cache=cache_of())
    try:
        seen = Seen(stack)
        await embed(stack, ["shared text"])
        await asyncio.sleep(0)
        await embed(stack, ["shared text"], key="demo-key-support-bot")
        assert seen.texts == ["shared text", "shared text"]
    finally:
        await stack.close()


async def test_a_new_version_never_reads_the_old_versions_rows(tmp_path):
    stack = await make_stack(tmp_path, cache=cache_of(), seeds=(0, 1))
    try:
        seen = Seen(stack)
        versions = {
            record.version
            for name, record in stack.gateway.snapshots.current.models.items()
            if name != "synthetic"
        }
        assert len(versions) == 2
        answers = {}
        for version in sorted(versions):
            answers[version] = await embed(stack, ["same text"], model=version)
            await asyncio.sleep(0)
        assert seen.texts == ["same text", "same text"]
        first, second = (answers[v]["data"][0]["embedding"] for v in sorted(versions))
        assert first != second
    finally:
        await stack.close()


async def test_a_full_pool_refuses_before_parsing_until_the_cache_answers_whole_requests(
    tmp_path,
):
    from headway.settings import AdmissionSettings
    from tests.fakes import until
    from tests.service.test_admission import Gate

    gate = Gate()
    stack = await make_stack(
        tmp_path,
        cache=cache_of(),
        sleep=gate.sleep,
        admission=AdmissionSettings(static_limit_texts=1),
    )
    try:
        gate.open.set()
        await embed(stack, ["known"])  # computed and stored: no whole hit yet
        await asyncio.sleep(0)
        gate.open.clear()
        holder = asyncio.ensure_future(embed(stack, ["holds the pool"]))
        pool = stack.gateway.pools["embed"]
        await until(lambda: pool.admission.outstanding == 1)
        broken = await stack.client.post(
            "/v1/embeddings", headers=auth("demo-key-search-app"), content=b'{"model": '
        )
        assert broken.status_code == 503  # refused before the body was read as JSON
        gate.open.set()
        await holder
        assert (await embed(stack, ["known"]))["data"]  # a whole hit, with room
        gate.open.clear()
        holder = asyncio.ensure_future(embed(stack, ["holds it again"]))
        await until(lambda: pool.admission.outstanding == 1)
        served = await embed(stack, ["known"])  # the pool is full, the cache answers
        assert len(served["data"]) == 1
        broken = await stack.client.post(
            "/v1/embeddings", headers=auth("demo-key-search-app"), content=b'{"model": '
        )
        assert broken.status_code == 400  # parsed, since the cache might have answered
        gate.open.set()
        await holder
    finally:
        gate.open.set()
        await stack.close()

"""``headway bench cache``: goodput past capacity without and with the results cache.

The real model, one replica, admission on (as ``headway up`` runs it). The workload
is what a search box sends: 1 text per request, drawn from ``DISTINCT_TEXTS`` short
queries (``QUERY_WORDS`` words of the load generator's one-token vocabulary, so
10 to 20 tokens with ``[CLS]`` and ``[SEP]``) with Zipf popularity: the text of rank
k (from 1) is drawn with probability proportional to ``1 / k**ZIPF_S``. The texts
and the draws come from seeds, so both runs send the same bytes in the same order.

1. **Capacity**, uncached: the cache off, offered ``PROBE_X`` times a guess; the
   served rate of the run's second half, once the probe did saturate the pool (a
   guess the pool keeps up with is tripled and the probe run again).
2. **Without and with the cache**: a fresh system each (the cache starts cold),
   offered ``OFFERED_X`` times that capacity, open loop, Poisson arrivals, the same
   seed. Goodput counts what was served within the request's deadline. The hit ratio
   is the gateway's own count (``headway_cache_lookups_total``) over the run; beside
   it, the ideal: the share of requests whose text was sent before (what a cache that
   computed every text once would hit). The gateway's CPU is read from ``/proc``
   around the run (as ``served.measure`` does) and divided by the requests.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import msgspec
import numpy as np
from prometheus_client import CollectorRegistry

from headway.cache.entry import Entry
from headway.cache.key import namespace, text_key
from headway.cache.memory import MemoryCache
from headway.cache.metrics import CacheMetrics
from headway.cache.results import ResultsCache
from headway.cache.scopes import tenant_scope
from headway.catalog import ensure_default_model
from headway.registry.open import open_registry
from headway.settings import CacheSettings, Settings
from headway_tools.bench.errors import ServingFailed
from headway_tools.bench.host import process_cpu_s
from headway_tools.bench.served import GATEWAY, Processes, bench_settings, serving
from headway_tools.bench.stats import cpu_us_per_request
from headway_tools.loadgen import Report, RequestClass, Schedule, Step, Summary, run_load
from headway_tools.loadgen.corpus import WORDS
from headway_tools.loadgen.errors import InvalidSpec
from headway_tools.loadgen.workload import PreparedRequest, Workload

INTERACTIVE_KEY = "demo-key-search-app"
MODEL = "all-MiniLM-L6-v2"
DISTINCT_TEXTS = 10_000
ZIPF_S = 1.1
QUERY_WORDS = (8, 18)  # one token each: 10-20 tokens with [CLS] and [SEP]
TEXT_SEED = 12
DRAW_SEED = 7
ARRIVAL_SEED = 11
DEADLINE_MS = 1000  # each request's X-Timeout-Ms; goodput = served within it
OFFERED_X = 4.0
GOAL_X = 3.0
PROBE_X = 3.0
PROBE_GUESS_RPS = 60.0
PROBE_TRIES = 3
CAPACITY_PROBE_S = 10.0
SATURATED = 0.9  # a probe served below this share of what it offered saturated the pool


def query_texts(count: int, seed: int = TEXT_SEED) -> tuple[str, ...]:
    """``count`` distinct queries of ``QUERY_WORDS`` words, the same for the same seed."""
    rng = random.Random(f"headway.bench.cache.texts:{seed}")
    texts: dict[str, None] = {}
    while len(texts) < count:
        words = rng.choices(WORDS, k=rng.randint(*QUERY_WORDS))
        texts.setdefault(" ".join(words), None)
    return tuple(texts)


def zipf_cum_weights(count: int, s: float) -> list[float]:
    """Cumulative weights of ranks 1..count under Zipf(s), for ``random.choices``."""
    return list(itertools.accumulate(1.0 / rank**s for rank in range(1, count + 1)))


def ideal_hit_ratio(ranks: Sequence[int]) -> float:
    """The share of draws whose text was drawn before: an unbounded cache's hit ratio
    when every text is computed once."""
    return 1.0 - len(set(ranks)) / len(ranks) if ranks else 0.0


@dataclass(frozen=True, slots=True)
class ZipfWorkload(Workload):
    """One request class, 1 text per request, each text drawn from ``texts`` by Zipf rank.

    It replaces the load generator's numbered texts (which never repeat) with repeats
    as real queries have them; everything else of the open loop is the load generator's.
    """

    texts: tuple[str, ...] = ()
    zipf_s: float = ZIPF_S

    def __post_init__(self) -> None:
        Workload.__post_init__(self)
        if len(self.classes) != 1:
            raise InvalidSpec("a Zipf workload has exactly one request class")
        if not self.texts:
            raise InvalidSpec("a Zipf workload needs texts to draw from")

    def ranks(self, count: int) -> list[int]:
        """The ranks (0: the most popular) of ``count`` requests, the same for the same seed."""
        rng = random.Random(f"headway.bench.cache.draws:{self.seed}")
        weights = zipf_cum_weights(len(self.texts), self.zipf_s)
        return rng.choices(range(len(self.texts)), cum_weights=weights, k=count)

    def prepare(self, count: int) -> Iterator[PreparedRequest]:
        model = self.classes[0].model
        for rank in self.ranks(count):
            body = msgspec.json.encode({"model": model, "input": [self.texts[rank]]})
            yield PreparedRequest(0, 1, body)


def zipf_workload(texts: tuple[str, ...]) -> ZipfWorkload:
    search = RequestClass("search", INTERACTIVE_KEY, model=MODEL, timeout_ms=DEADLINE_MS)
    return ZipfWorkload((search,), seed=DRAW_SEED, texts=texts)


_LOOKUP_LINE = re.compile(r'^headway_cache_lookups_total\{[^}]*result="(\w+)"[^}]*\} (\S+)$')


def cache_lookups(metrics_text: str) -> dict[str, float]:
    """``headway_cache_lookups_total`` by result (memory, redis, miss) from /metrics text."""
    counts: dict[str, float] = {}
    for line in metrics_text.splitlines():
        match = _LOOKUP_LINE.match(line)
        if match:
            counts[match[1]] = counts.get(match[1], 0.0) + float(match[2])
    return counts


@dataclass(frozen=True, slots=True)
class CachePoint:
    """One open-loop run: the client's summary, the gateway's counts and CPU over it."""

    cache: bool
    offered_x: float
    summary: Summary
    behind_schedule: bool
    lookups: Mapping[str, float]
    """Texts looked up during the run, by where they were found (memory, redis, miss)."""
    gateway_cpu_s: float
    ideal_hit_ratio: float

    @property
    def hit_ratio(self) -> float | None:
        """Hits over lookups, from the gateway's counters; None when it counted none."""
        looked_up = sum(self.lookups.values())
        if looked_up <= 0:
            return None
        return (self.lookups.get("memory", 0.0) + self.lookups.get("redis", 0.0)) / looked_up

    @property
    def cpu_us_per_request(self) -> float:
        """Gateway CPU per request sent (served, shed or timed out alike)."""
        return cpu_us_per_request(self.gateway_cpu_s, self.summary.offered)

    @property
    def cpu_us_per_served(self) -> float:
        return cpu_us_per_request(self.gateway_cpu_s, self.summary.served)


@dataclass(frozen=True, slots=True)
class CacheResults:
    capacity_rps: float
    probe_rps: float
    """What the capacity probe that saturated the pool offered."""
    points: tuple[CachePoint, ...]
    seconds: float
    cost: CacheCost

    def point(self, cache: bool) -> CachePoint:
        return next(p for p in self.points if p.cache == cache)

    @property
    def goodput_x(self) -> float | None:
        """Goodput with the cache over goodput without it."""
        without = self.point(False).summary.goodput_rps
        return None if without <= 0 else self.point(True).summary.goodput_rps / without


@dataclass(frozen=True, slots=True)
class CacheCost:
    """The cache's own CPU per text, measured in this process on the run's texts."""

    miss_us: float
    """Key, look-up (not found), and the row stored."""
    hit_us: float
    """Key and look-up (found)."""


def cache_cost(texts: Sequence[str], dimensions: int = 384, rounds: int = 3) -> CacheCost:
    """What ``stages/cache.py`` spends per text, through the same calls (the key, the
    memory tier with its metrics), best of ``rounds``."""
    samples = [asyncio.run(_cache_cost_once(texts, dimensions)) for _ in range(rounds)]
    return CacheCost(
        min(miss for miss, _ in samples) / len(texts) * 1e6,
        min(hit for _, hit in samples) / len(texts) * 1e6,
    )


async def _cache_cost_once(texts: Sequence[str], dimensions: int) -> tuple[float, float]:
    """(seconds for every text missed and stored, seconds for every text found)."""
    row = np.zeros(dimensions, dtype="<f4").tobytes()
    metrics = CacheMetrics(CollectorRegistry())
    cache = ResultsCache(MemoryCache(1 << 30, 1 << 30), None, metrics, CacheSettings())
    scope = tenant_scope(1)
    ns = namespace("bench", "kind=embedding;quantization=fp32", dimensions, "embed", scope)
    started = time.process_time()
    keys = [text_key(ns, text) for text in texts]
    await cache.get_many(scope, keys)
    await cache.put_many(scope, [(key, Entry(row, 12)) for key in keys])
    missed = time.process_time() - started
    started = time.process_time()
    await cache.get_many(scope, [text_key(ns, text) for text in texts])
    return missed, time.process_time() - started


def cache_settings(data_dir: Path, enabled: bool) -> Settings:
    """One tenant sends every request: its own scope, given the whole memory tier."""
    memory = CacheSettings().memory_bytes
    cache = {"enabled": enabled, "scope": "tenant", "memory_scope_bytes": memory}
    return bench_settings(data_dir, {"backend": "onnx"}, {"cache": cache})


def _load(processes: Processes, workload: ZipfWorkload, rps: float, seconds: float) -> Report:
    schedule = Schedule((Step(seconds, rps),), arrivals="poisson", seed=ARRIVAL_SEED)
    timeout_s = DEADLINE_MS / 1000 + 1.0
    run = run_load(processes.gateway_url, workload, schedule, client_timeout_s=timeout_s)
    return asyncio.run(run).report


def measure_capacity(data_dir: Path, workload: ZipfWorkload, seconds: float) -> tuple[float, float]:
    """(capacity req/s, the rate offered by the probe that saturated the pool), uncached."""
    guess = PROBE_GUESS_RPS
    with serving(cache_settings(data_dir, False)) as processes:
        for _ in range(PROBE_TRIES):
            offered = PROBE_X * guess
            report = _load(processes, workload, offered, seconds)
            steady = report.timeline[len(report.timeline) // 2 :]
            capacity = sum(s.served for s in steady) / sum(s.seconds for s in steady)
            if capacity < SATURATED * offered:
                return capacity, offered
            guess = offered
    raise ServingFailed(
        f"the pool kept up with {offered:.0f} req/s in {PROBE_TRIES} capacity probes; "
        "raise PROBE_GUESS_RPS"
    )


def cache_point(
    data_dir: Path, workload: ZipfWorkload, *, cache: bool, capacity_rps: float, seconds: float
) -> CachePoint:
    """A fresh system (a cold cache), ``OFFERED_X`` times capacity offered for ``seconds``."""
    with (
        serving(cache_settings(data_dir, cache)) as processes,
        httpx.Client(base_url=processes.gateway_metrics_url, timeout=10) as scraper,
    ):
        before = cache_lookups(scraper.get("/metrics").text)
        cpu_before = process_cpu_s(processes.pids[GATEWAY])
        report = _load(processes, workload, OFFERED_X * capacity_rps, seconds)
        cpu_s = process_cpu_s(processes.pids[GATEWAY]) - cpu_before
        after = cache_lookups(scraper.get("/metrics").text)
    lookups = {result: after[result] - before.get(result, 0.0) for result in after}
    ideal = ideal_hit_ratio(workload.ranks(report.overall.offered))
    return CachePoint(
        cache, OFFERED_X, report.overall, report.behind_schedule, lookups, cpu_s, ideal
    )


def run_cache_bench(data_dir: Path, *, seconds: float) -> CacheResults:
    settings = cache_settings(data_dir, True)
    registry = open_registry(settings)
    try:
        registry.seed_demo()
        ensure_default_model(settings, registry)
    finally:
        registry.close()
    workload = zipf_workload(query_texts(DISTINCT_TEXTS))
    capacity, probe = measure_capacity(data_dir, workload, min(CAPACITY_PROBE_S, seconds))
    points = tuple(
        cache_point(data_dir, workload, cache=cache, capacity_rps=capacity, seconds=seconds)
        for cache in (False, True)
    )
    return CacheResults(capacity, probe, points, seconds, cache_cost(workload.texts))

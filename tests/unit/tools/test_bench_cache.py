"""``headway bench cache``: its workload, its counters and its section, from made-up results."""

import itertools
import math
from collections import Counter

import msgspec
import pytest

from headway_tools.bench import cache_report
from headway_tools.bench.cache import (
    DISTINCT_TEXTS,
    QUERY_WORDS,
    CacheCost,
    CachePoint,
    CacheResults,
    ZipfWorkload,
    cache_cost,
    cache_lookups,
    ideal_hit_ratio,
    query_texts,
    zipf_cum_weights,
    zipf_workload,
)
from headway_tools.bench.host import Machine
from headway_tools.loadgen import InvalidSpec, RequestClass, Summary
from headway_tools.loadgen.corpus import WORDS

MACHINE = Machine("2026-01-01 00:00 UTC", 2, "AMD EPYC", "Linux 6.1", "3.11.7", 0.5)
COMMAND = "headway bench cache --seconds 30"


# the workload -------------------------------------------------------------------------


def test_queries_are_distinct_short_and_made_of_one_token_words():
    texts = query_texts(DISTINCT_TEXTS)
    assert len(texts) == len(set(texts)) == DISTINCT_TEXTS
    vocabulary = set(WORDS)
    for text in texts:
        words = text.split(" ")
        assert QUERY_WORDS[0] <= len(words) <= QUERY_WORDS[1]
        assert set(words) <= vocabulary
    assert query_texts(50) == texts[:50]  # the same seed: the same queries
    assert query_texts(50, seed=99) != texts[:50]


def test_zipf_weights_fall_as_a_power_of_the_rank():
    weights = zipf_cum_weights(4, 1.1)
    singles = [weights[0]] + [b - a for a, b in itertools.pairwise(weights)]
    assert singles == pytest.approx([1.0, 2**-1.1, 3**-1.1, 4**-1.1])


def test_draws_follow_zipf_and_repeat_with_the_seed():
    workload = zipf_workload(query_texts(1000))
    ranks = workload.ranks(200_000)
    counts = Counter(ranks)
    assert counts[0] / counts[1] == pytest.approx(2**1.1, rel=0.05)
    assert counts[0] / counts[9] == pytest.approx(10**1.1, rel=0.1)
    assert workload.ranks(500) == ranks[:500]


def test_each_request_is_one_text_of_the_drawn_rank():
    texts = query_texts(100)
    workload = zipf_workload(texts)
    prepared = list(workload.prepare(300))
    assert [p.texts for p in prepared] == [1] * 300
    assert {p.class_index for p in prepared} == {0}
    bodies = [msgspec.json.decode(p.body) for p in prepared]
    assert [b["input"] for b in bodies] == [[texts[r]] for r in workload.ranks(300)]
    assert {b["model"] for b in bodies} == {"all-MiniLM-L6-v2"}
    assert [p.body for p in workload.prepare(300)] == [p.body for p in prepared]


def test_a_zipf_workload_needs_texts_and_one_class():
    search = RequestClass("search", "key")
    with pytest.raises(InvalidSpec, match="texts"):
        ZipfWorkload((search,))
    with pytest.raises(InvalidSpec, match="one request class"):
        ZipfWorkload((search, RequestClass("other", "key")), texts=("a",))


def test_the_ideal_hit_ratio_counts_repeats():
    assert ideal_hit_ratio([0, 0, 1, 0]) == 0.5
    assert ideal_hit_ratio([1, 2, 3]) == 0.0
    assert ideal_hit_ratio([]) == 0.0


# the gateway's counters ---------------------------------------------------------------

METRICS = """\
# HELP headway_cache_lookups_total Texts looked up in the results cache.
# TYPE headway_cache_lookups_total counter
headway_cache_lookups_total{result="memory"} 750.0
headway_cache_lookups_total{result="redis"} 0.0
headway_cache_lookups_total{result="miss"} 250.0
headway_cache_lookups_created{result="memory"} 1.7e+09
headway_cache_bytes 123456.0
"""


def test_lookups_are_read_from_the_metrics_text():
    assert cache_lookups(METRICS) == {"memory": 750.0, "redis": 0.0, "miss": 250.0}
    assert cache_lookups("headway_requests_total 3.0\n") == {}


def summary(offered: int, served: int, goodput: int, *, shed: int = 0) -> Summary:
    return Summary(
        name="overall",
        start_s=0.0,
        seconds=10.0,
        offered=offered,
        served=served,
        goodput=goodput,
        shed=shed,
        quota=0,
        timeouts=offered - served - shed,
        errors=0,
        served_texts=served,
        latency_p50_ms=120.0,
        latency_p95_ms=450.0,
        latency_p99_ms=700.0,
        rejection_p99_ms=5.0,
        lag_p99_ms=1.0,
        lag_max_ms=2.0,
    )


def point(cache: bool, goodput: int, lookups: dict[str, float]) -> CachePoint:
    return CachePoint(
        cache, 4.0, summary(4000, goodput, goodput, shed=4000 - goodput), False, lookups, 2.0, 0.8
    )


def test_a_point_reports_hits_and_cpu_per_request():
    on = point(True, 3500, {"memory": 3000.0, "redis": 200.0, "miss": 800.0})
    assert on.hit_ratio == pytest.approx(0.8)
    assert on.cpu_us_per_request == pytest.approx(500.0)
    assert on.cpu_us_per_served == pytest.approx(2e6 / 3500)
    off = point(False, 1000, {})
    assert off.hit_ratio is None
    nothing = CachePoint(False, 4.0, summary(10, 0, 0, shed=10), False, {}, 1.0, 0.0)
    assert math.isnan(nothing.cpu_us_per_served)


# the section --------------------------------------------------------------------------


def results(goodput_on: int, goodput_off: int = 1000) -> CacheResults:
    return CacheResults(
        100.0,
        180.0,
        (
            point(False, goodput_off, {}),
            point(True, goodput_on, {"memory": 3200.0, "redis": 0.0, "miss": 800.0}),
        ),
        10.0,
        CacheCost(2.5, 1.25),
    )


def test_the_cache_cost_is_measured_per_text():
    cost = cache_cost(query_texts(200), rounds=1)
    assert cost.hit_us > 0 and cost.miss_us > 0


def test_the_section_shows_both_runs_and_the_goal():
    section = cache_report.render(results(3500), MACHINE, COMMAND, 10.0)
    assert "2.5 µs for a miss, 1.2 µs for a hit" in section
    assert section.startswith("## Results cache")
    assert f"Command: `{COMMAND}`" in section and MACHINE.date in section
    assert "Capacity measured first" in section and "100.0 req/s" in section
    assert (
        "| off | 400.0 | 100.0 | 100.0 | 100.0% | 75.0% | 0 | 0 | 450 | n/a | 80.0% "
        "| 500 | 2,000 | no |" in section
    )
    assert (
        "| on | 400.0 | 350.0 | 350.0 | 350.0% | 12.5% | 0 | 0 | 450 | 80.0% | 80.0% "
        "| 500 | 571 | no |" in section
    )
    assert "Goodput with the cache: 3.50× that without it (goal ≥ 3×): met." in section


def test_the_section_says_when_the_goal_is_missed():
    assert "(goal ≥ 3×): **missed**" in cache_report.render(results(2000), MACHINE, COMMAND, 10)
    no_goodput = cache_report.render(results(2000, goodput_off=0), MACHINE, COMMAND, 10)
    assert "Goodput with the cache: n/a that without it (goal ≥ 3×): **missed**" in no_goodput

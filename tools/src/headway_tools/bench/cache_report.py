"""``headway bench cache``'s Markdown section, with the goal and whether it was met."""

from __future__ import annotations

import math

from headway_tools.bench.cache import (
    DEADLINE_MS,
    DISTINCT_TEXTS,
    GOAL_X,
    OFFERED_X,
    PROBE_X,
    QUERY_WORDS,
    ZIPF_S,
    CachePoint,
    CacheResults,
)
from headway_tools.bench.host import Machine
from headway_tools.bench.stats import fmt_latency, fmt_ratio, markdown_table

SECTION = "cache"


def _pct(part: float, whole: float) -> str:
    return "n/a" if whole <= 0 else f"{100 * part / whole:.1f}%"


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _us(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:,.0f}"


def _met(ok: bool) -> str:
    return "met" if ok else "**missed**"


def _row(point: CachePoint, capacity_rps: float) -> list[str]:
    s = point.summary
    return [
        "on" if point.cache else "off",
        f"{s.offered_rps:,.1f}",
        f"{s.served_rps:,.1f}",
        f"{s.goodput_rps:,.1f}",
        _pct(s.goodput_rps, capacity_rps),
        _pct(s.shed, s.offered),
        str(s.timeouts),
        str(s.errors),
        fmt_latency(s.latency_p95_ms),
        _share(point.hit_ratio),
        _share(point.ideal_hit_ratio),
        _us(point.cpu_us_per_request),
        _us(point.cpu_us_per_served),
        "yes" if point.behind_schedule else "no",
    ]


def render(results: CacheResults, machine: Machine, command: str, seconds: float) -> str:
    on, off = results.point(True), results.point(False)
    ratio = results.goodput_x
    return "\n\n".join(
        [
            "## Results cache: goodput past capacity on repeated texts",
            f"Command: `{command}`  \nDate: {machine.date}  \n"
            f"Commit: `{machine.commit}` (CPU: {machine.cpu_model})  \n"
            f"Machine: {machine.nproc} CPUs, {machine.cpu_model}; 1-minute load average "
            f"{machine.load_average:.2f} at start; the load generator runs on the same machine "
            "as the gateway and the worker.",
            f"The real model (all-MiniLM-L6-v2), 1 replica, admission on. Requests of 1 text "
            f"drawn from {DISTINCT_TEXTS:,} distinct queries ({QUERY_WORDS[0]}–{QUERY_WORDS[1]} "
            f"words, one token each) with Zipf(s = {ZIPF_S:g}) popularity, the same seed in "
            f"both runs; deadline (`X-Timeout-Ms`) {DEADLINE_MS} ms. Capacity measured first, "
            f"uncached (served req/s of the second half when offered {PROBE_X:g}× a guess, "
            f"{results.probe_rps:,.0f} req/s): {results.capacity_rps:,.1f} req/s. Each run a "
            f"fresh system (the cache starts cold), open-loop Poisson at {OFFERED_X:g}× "
            f"capacity for {seconds:g} s. Goodput = served within the deadline, from the "
            "intended send time. Hit ratio: the gateway's `headway_cache_lookups_total` over "
            "the run; ideal: the share of requests whose text was sent before. Gateway CPU "
            "from `/proc` over the run, per request sent and per request served.",
            markdown_table(
                [
                    "cache",
                    "offered req/s",
                    "served req/s",
                    "goodput req/s",
                    "goodput / capacity",
                    "shed",
                    "timeouts",
                    "errors",
                    "p95 ms",
                    "hit ratio",
                    "ideal hit ratio",
                    "gateway CPU µs/request",
                    "µs/served",
                    "client behind",
                ],
                [_row(off, results.capacity_rps), _row(on, results.capacity_rps)],
                "lrrrrrrrrrrrrl",
            ),
            f"Goodput with the cache: {'n/a' if ratio is None else fmt_ratio(ratio)} that "
            f"without it (goal ≥ {GOAL_X:g}×): {_met(ratio is not None and ratio >= GOAL_X)}. "
            f"The gateway's CPU per request: {_us(on.cpu_us_per_request)} µs with the cache "
            f"({_share(on.hit_ratio)} hits), {_us(off.cpu_us_per_request)} µs without; per "
            f"request served {_us(on.cpu_us_per_served)} µs against "
            f"{_us(off.cpu_us_per_served)} µs. The cache's own CPU per text (key, look-up "
            f"and store, measured in-process on the same {DISTINCT_TEXTS:,} texts): "
            f"{results.cost.miss_us:.1f} µs for a miss, {results.cost.hit_us:.1f} µs for a hit.",
        ]
    )

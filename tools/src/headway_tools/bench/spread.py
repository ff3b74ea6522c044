"""Open-loop load spread evenly over several gateways, read back as one run.

As a load balancer in front of ``headway up --gateways N`` would: each gateway gets
its own Poisson stream at 1/N of the rate (their sum is a Poisson stream at the whole
rate), all from this process at the same time, and the records of the N streams are
summarized together, so the figures are the service's, not one gateway's. With one
URL this is ``run_load`` itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np

from headway_tools.loadgen import LoadResult, Records, Schedule, Step, Workload, run_load, summarize

_COLUMNS = (
    "class_index",
    "intended_s",
    "lag_s",
    "latency_s",
    "status",
    "outcome",
    "texts",
    "deadline_s",
)


async def run_spread(
    urls: Sequence[str],
    workload: Workload,
    steps: Sequence[Step],
    *,
    seed: int,
    client_timeout_s: float,
) -> LoadResult:
    """``steps`` offered in all, 1/len(urls) of each step's rate to each gateway."""
    if len(urls) == 1:
        schedule = Schedule(tuple(steps), arrivals="poisson", seed=seed)
        return await run_load(urls[0], workload, schedule, client_timeout_s=client_timeout_s)
    share = [Step(step.seconds, step.rps / len(urls)) for step in steps]
    results = await asyncio.gather(
        *(
            run_load(
                url,
                workload,
                Schedule(tuple(share), arrivals="poisson", seed=seed + i),
                client_timeout_s=client_timeout_s,
            )
            for i, url in enumerate(urls)
        )
    )
    records = together([r.records for r in results])
    return LoadResult(records, summarize(records, results[0].report.duration_s))


def together(parts: Sequence[Records]) -> Records:
    """One set of records from runs of the same workload (their classes are the same)."""
    offsets = np.cumsum([0, *(len(p) for p in parts)])
    errors = {
        int(start) + i: e
        for p, start in zip(parts, offsets, strict=False)
        for i, e in p.errors.items()
    }
    return Records(
        class_names=parts[0].class_names,
        **{column: np.concatenate([getattr(p, column) for p in parts]) for column in _COLUMNS},
        errors=errors,
    )

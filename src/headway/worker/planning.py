"""Pure batch planning: which queued chunks run next, and how texts split into model calls.

Padding is the enemy of batching on a CPU: a batch runs at the length of its
longest text, so one long text among short ones makes the whole call pay for
it. ``plan_runs`` sorts texts by length and cuts the sorted list into model
calls with a dynamic programme that minimises ``sum(call_overhead + n * longest)``
subject to ``n * longest <= max_tokens`` per call (a single text is always
allowed). Sorting first makes the optimal partition contiguous.
"""

from __future__ import annotations

from collections.abc import Sequence


def plan_runs(
    lengths: Sequence[int], max_tokens: int, call_overhead_tokens: int
) -> list[list[int]]:
    """Indices of ``lengths`` grouped into model calls; every index appears exactly once."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    sizes = [max(1, lengths[i]) for i in order]
    n = len(sizes)
    best = [0.0] + [float("inf")] * n
    cut = [0] * (n + 1)
    for end in range(1, n + 1):
        longest = sizes[end - 1]
        for start in range(end - 1, -1, -1):
            padded = (end - start) * longest
            if padded > max_tokens and end - start > 1:
                break
            cost = best[start] + call_overhead_tokens + padded
            if cost < best[end]:
                best[end] = cost
                cut[end] = start
    runs: list[list[int]] = []
    end = n
    while end > 0:
        start = cut[end]
        runs.append(order[start:end])
        end = start
    runs.reverse()
    return runs


def padded_tokens(lengths: Sequence[int], runs: Sequence[Sequence[int]]) -> int:
    """Tokens actually computed, padding included, by a plan."""
    return sum(len(run) * max(max(1, lengths[i]) for i in run) for run in runs if run)

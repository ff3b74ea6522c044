"""The pool's throughput, learned online from what it completes (pure).

At the end of each window the rate ``r`` of texts completed in it is a sample of the pool's
throughput. An estimate below ``r`` rises to it at once: the pool did that much (so it follows
replicas that join). An estimate above ``r`` is lowered, by an exponential weight ``alpha``,
only by an **informative** window, one in which at least half of the limit stayed outstanding
from its start to its end: only under a backlog throughout was ``r`` what the pool could do
rather than what it was given. A window busy only at moments (a burst, a few refusals) changes
nothing: lowered there, the limit would sink to the arrival rate and shed work the pool could do
(the figures: docs/DESIGN.md, "Admission control").

**Several gateways.** A gateway that learned only the texts *it* completes, and took the whole
floor, would size its limit for a pool of its own: N gateways would admit N pools' work. So the
samples are the **pool's**: every worker answer carries its completed-texts counter
(``wire.COMPLETED_HEADER``), and what the counters moved in a window is what the pool completed,
every gateway's work included. A gateway's limit (floor included) is its **share** of the pool's:
what it completed itself over that, smoothed like the throughput, so the limits of all gateways
add up to one pool's. The share is 1 until its first sample (one gateway, or workers that send
no counter) and moves only in windows where this gateway completed work: an idle gateway keeps
its last share instead of sinking to zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Window:
    """What happened in one window of the pool's life."""

    seconds: float
    completed_texts: int
    least_outstanding: int
    limit: int

    @property
    def informative(self) -> bool:
        return self.least_outstanding * 2 >= self.limit


def next_throughput(current: float, window: Window, alpha: float = 0.5) -> float:
    """The estimate after ``window``, in texts per second."""
    if window.seconds <= 0:
        return current
    rate = window.completed_texts / window.seconds
    if rate >= current:
        return rate
    if window.informative:
        return current + alpha * (rate - current)
    return current


def admission_limit(
    throughput: float, mean_latency_s: float, floor: int, static: int | None = None
) -> int:
    """Little's law: outstanding work = throughput x mean time in system, at least ``floor``.

    ``mean_latency_s`` is a share of the latency budget (``mean_latency_share``): Little's
    law fixes the *mean* time in system, and the tail must fit the budget too.
    """
    if static is not None:
        return static
    return max(floor, int(throughput * mean_latency_s))


def next_share(
    current: float | None, own_completed: int, pool_completed: int, alpha: float
) -> float | None:
    """This gateway's share of the pool's completed texts after a window (see the module doc).

    ``None``: no sample yet (the share counts as 1); the first sample is taken whole,
    not smoothed from 1, because gateways started together under load each admit a
    whole limit until it arrives. Unchanged by a window where this gateway or the pool
    completed nothing; a sample above 1 (this gateway's completions are counted when its
    requests finish, the pool's when the chunks do, so a window may see more of the
    first) counts as 1.
    """
    if own_completed <= 0 or pool_completed <= 0:
        return current
    sample = min(1.0, own_completed / pool_completed)
    if current is None:
        return sample
    return current + alpha * (sample - current)


def floor_texts(ready_replicas: int, per_replica: int, share: float) -> int:
    """The least limit: ``per_replica`` texts for each ready replica (at least one), times
    this gateway's share of the pool, and never below one text."""
    return max(1, math.ceil(max(1, ready_replicas) * per_replica * share))

"""The pool's throughput, learned online from what it completes (pure).

Time is cut into windows (250 ms by default). At the end of a window the rate
``r`` of texts completed in it is a sample of the pool's throughput:

- a pool that completed ``r`` texts per second can do at least that, so an
  estimate below ``r`` rises to it at once (this is how it follows replicas that
  join: they finish the outstanding work sooner, so ``r`` rises);
- an estimate above ``r`` is lowered only by an **informative** window, one in
  which the pool had a backlog throughout: at least half of the limit stayed
  outstanding from its start to its end. Only then was ``r`` what the pool could
  do rather than what it was given; the estimate moves toward it by an exponential
  weight ``alpha``, following capacity down when replicas die or slow down under
  load. A window that was busy only at moments (a burst at 90% load, when a few
  requests are refused) says nothing about capacity and changes nothing: lowered
  there, the limit would sink to the arrival rate and shed work the pool could do.

With ``alpha = 0.5`` and 250 ms windows a loss of capacity is 94% followed
within four windows, one second.
"""

from __future__ import annotations

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

    ``mean_latency_s`` is a share of the latency budget (60% by default): Little's
    law fixes the *mean* time in system, and the tail must fit the budget too.
    """
    if static is not None:
        return static
    return max(floor, int(throughput * mean_latency_s))

"""The pool's throughput, learned online from what it completes (pure).

Time is cut into windows (250 ms by default). At the end of a window the rate
``r`` of texts completed in it is a sample of the pool's throughput, but it
only measures *capacity* when the pool had more work than it could do at once:

- an **informative** window (work was refused, or at least half of the limit
  was outstanding at some point) moves the estimate toward ``r`` by an
  exponential weight ``alpha``: it follows capacity down when replicas die or
  slow down (their queues fill the limit), and up when they join (more replicas
  finish the same outstanding work sooner, so ``r`` rises);
- an idle window can only raise it: ``X = max(X, r)``, since a pool that completed
  ``r`` texts per second can do at least that.

With ``alpha = 0.5`` and 250 ms windows the estimate covers 94% of a step in
four windows, i.e. one second.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Window:
    """What happened in one window of the pool's life."""

    seconds: float
    completed_texts: int
    refused: int
    peak_outstanding: int
    limit: int

    @property
    def informative(self) -> bool:
        return self.refused > 0 or self.peak_outstanding * 2 >= self.limit


def next_throughput(current: float, window: Window, alpha: float = 0.5) -> float:
    """The estimate after ``window``, in texts per second."""
    if window.seconds <= 0:
        return current
    rate = window.completed_texts / window.seconds
    if window.informative:
        return current + alpha * (rate - current)
    return max(current, rate)


def admission_limit(
    throughput: float, latency_budget_s: float, floor: int, static: int | None = None
) -> int:
    """Little's law: outstanding work = throughput x time in system, never below ``floor``."""
    if static is not None:
        return static
    return max(floor, int(throughput * latency_budget_s))

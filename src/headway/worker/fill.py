"""How long an idle batcher waits for a batch to fill: pure functions of the queue,
the arrival rate and the model's cost.

With ``q`` texts queued on an idle model, Poisson arrivals at ``λ`` texts/s and a call of
``n`` texts costing ``a + b·n`` seconds, waiting ``w`` to run the ``k = λ·w`` arrivals with
the ``q`` (rather than now, and then them) changes their summed latency by

    D(w) = q·w + λ·w² + λ·w·(b·q − a)

which is convex, least at ``w* = (a − b·q)/2 − q/(2λ)``: waiting pays only while
``a > b·q + q/λ``, so never on a per-text-cost model, never at idle, and less with every
text queued. ``adaptive_wait_s`` is that optimum, recomputed on each arrival, bounded by
``max_wait_s`` from the oldest arrival, the time the arrivals take to fill the batch, and
the earliest queued deadline less the expected run. The batcher asks only when the model
was idle: a batch formed during a run waits no more. ``fixed_wait_s`` (a setting) always
waits up to ``max_wait_s``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Queued:
    """What waits: ``texts`` in all, the oldest arrival's time, the earliest deadline."""

    texts: int
    oldest_at: float
    earliest_deadline: float


@dataclass(frozen=True, slots=True)
class Cost:
    """A model call's cost as ``per_call_s + per_text_s × texts`` (fitted; see estimates)."""

    per_call_s: float = 0.0
    per_text_s: float = 0.0

    def seconds(self, texts: float) -> float:
        return self.per_call_s + self.per_text_s * texts


def fixed_wait_s(now: float, queued: Queued, max_batch_size: int, max_wait_s: float) -> float:
    """Up to ``max_wait_s`` from the oldest arrival, whatever is expected, until full."""
    if queued.texts >= max_batch_size:
        return 0.0
    return max(0.0, queued.oldest_at + max_wait_s - now)


def adaptive_wait_s(
    now: float,
    queued: Queued,
    arrival_rate: float,
    cost: Cost,
    max_batch_size: int,
    max_wait_s: float,
) -> float:
    """The wait that least raises the total latency (module docstring), within bounds;
    ``arrival_rate`` in texts per second; 0 means run now."""
    q = queued.texts
    if q >= max_batch_size or arrival_rate <= 0:
        return 0.0
    best = (cost.per_call_s - cost.per_text_s * q) / 2 - q / (2 * arrival_rate)
    to_fill = (max_batch_size - q) / arrival_rate
    left = queued.oldest_at + max_wait_s - now
    # The deadline must still be met by the call that runs after the wait, with the
    # texts expected meanwhile: now + w + a + b·(q + λ·w) <= deadline.
    slack = (queued.earliest_deadline - now - cost.seconds(q)) / (
        1 + cost.per_text_s * arrival_rate
    )
    return max(0.0, min(best, to_fill, left, slack))

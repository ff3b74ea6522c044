"""The token bucket, as a pure function of its state and the time.

A bucket holds at most ``burst`` tokens and refills at ``rate`` tokens per
second. Taking ``cost`` tokens succeeds only if that many are there; a refused
take changes nothing. Invariant: over any interval of length ``t`` starting
from a full bucket, the tokens granted never exceed ``burst + rate x t``.

The same arithmetic runs in Redis (``redis_store.py``'s Lua script) so that
every gateway agrees; this is the reference the script is tested against.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BucketState:
    tokens: float
    updated_s: float


@dataclass(frozen=True, slots=True)
class Take:
    """The outcome of one take: granted or not, what is left, when to retry."""

    granted: bool
    remaining: float
    retry_after_s: float
    state: BucketState


def take(state: BucketState | None, now_s: float, rate: float, burst: float, cost: float) -> Take:
    """Refill for the time elapsed, then take ``cost`` if there is enough."""
    if state is None:
        tokens = burst
    else:
        elapsed = max(0.0, now_s - state.updated_s)
        tokens = min(burst, state.tokens + elapsed * rate)
    if cost <= tokens:
        left = tokens - cost
        return Take(True, left, 0.0, BucketState(left, now_s))
    missing = cost - tokens
    wait = missing / rate if cost <= burst else float("inf")
    return Take(False, tokens, wait, BucketState(tokens, now_s))


def refund(state: BucketState, now_s: float, rate: float, burst: float, cost: float) -> BucketState:
    """Give back ``cost`` tokens (work charged but not done on our side), never above burst."""
    elapsed = max(0.0, now_s - state.updated_s)
    tokens = min(burst, state.tokens + elapsed * rate + cost)
    return BucketState(tokens, now_s)

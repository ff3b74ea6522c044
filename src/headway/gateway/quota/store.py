"""The quota seam: where buckets live. In this process, or in Redis for many gateways.

``QuotaStore.take`` answers a ``QuotaDecision`` (a value; the quota stage turns a
refusal into 429). ``refund`` gives tokens back for work charged but not done on
our side. A shared store that cannot be reached raises ``QuotaStoreUnavailable``,
which ``FallbackQuotaStore`` turns into a local share. Buckets are keyed by
tenant id (never given twice), so a tenant created with a deleted one's name starts
with a full bucket of its own, not the old one's level; rate and burst travel with
each call, so changing a tenant's quota takes effect on its next request.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from headway.gateway.quota.bucket import BucketState, refund, take


class QuotaStoreUnavailable(Exception):
    """The shared quota store could not be reached or did not answer in time."""


@dataclass(frozen=True, slots=True)
class Quota:
    """A tenant's bucket: ``rate`` texts per second, at most ``burst`` at once."""

    tenant_id: int
    rate: float
    burst: float


@dataclass(frozen=True, slots=True)
class QuotaDecision:
    granted: bool
    remaining: float
    retry_after_s: float
    limit: float
    reset_s: float
    """Seconds until the bucket would be full again."""


def decision(quota: Quota, granted: bool, remaining: float, retry_after_s: float) -> QuotaDecision:
    return QuotaDecision(
        granted, remaining, retry_after_s, quota.burst, (quota.burst - remaining) / quota.rate
    )


class QuotaStore(Protocol):
    async def take(self, quota: Quota, cost: float) -> QuotaDecision: ...

    async def refund(self, quota: Quota, cost: float) -> None: ...

    async def close(self) -> None: ...


class LocalQuotaStore:
    """Buckets in this process: exact for one gateway. ``share`` scales every rate and
    burst (a gateway standing in for 1/N of a shared quota)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, share: float = 1.0) -> None:
        self._clock = clock
        self._buckets: dict[int, BucketState] = {}
        self._paused_at: float | None = None
        self.share = share

    def _scaled(self, quota: Quota) -> Quota:
        if self.share == 1.0:
            return quota
        return Quota(quota.tenant_id, quota.rate * self.share, quota.burst * self.share)

    async def take(self, quota: Quota, cost: float) -> QuotaDecision:
        scaled = self._scaled(quota)
        outcome = take(
            self._buckets.get(quota.tenant_id), self._clock(), scaled.rate, scaled.burst, cost
        )
        self._buckets[quota.tenant_id] = outcome.state
        return decision(scaled, outcome.granted, outcome.remaining, outcome.retry_after_s)

    def pause(self) -> None:
        """Stop refilling every bucket until ``resume`` (the fallback's buckets earn
        nothing while the shared store answers)."""
        if self._paused_at is None:
            self._paused_at = self._clock()

    def resume(self) -> None:
        """Every bucket as it was at ``pause``, as if the time between had not passed."""
        if self._paused_at is None:
            return
        held = self._clock() - self._paused_at
        self._paused_at = None
        if held > 0:
            self._buckets = {
                tenant_id: BucketState(state.tokens, state.updated_s + held)
                for tenant_id, state in self._buckets.items()
            }

    async def refund(self, quota: Quota, cost: float) -> None:
        state = self._buckets.get(quota.tenant_id)
        if state is not None:
            scaled = self._scaled(quota)
            self._buckets[quota.tenant_id] = refund(
                state, self._clock(), scaled.rate, scaled.burst, cost
            )

    async def close(self) -> None:
        pass

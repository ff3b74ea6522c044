"""One pool's admission state: a thin stateful wrapper around the pure parts.

``try_admit`` returns a ``Permit`` or a ``Refusal`` (a value; only the HTTP
edge turns it into 503). Every permit is released exactly once, saying whether
its work completed. ``pool_completed`` hears what the pool's workers completed for
every gateway (their counters' growth): the pool's throughput is learned from that,
and this gateway's share of it from its own completions, so its limit is its share
of the pool's (``estimate.py``). Until a counter is heard (workers that send none)
its own completions are the pool's and its share is 1, as for a gateway alone. The
estimates roll forward lazily on each call (no timer task). All calls happen on
the gateway's event loop, which is the single owner of this state.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from headway.gateway.admission.estimate import (
    Window,
    admission_limit,
    floor_texts,
    next_share,
    next_throughput,
)
from headway.gateway.admission.policy import (
    Occupancy,
    RefusalReason,
    Shares,
    refusal,
    tier_allowance,
)
from headway.registry.model import Tier


@dataclass(frozen=True, slots=True)
class AdmissionConfig:
    enabled: bool = True
    latency_budget_s: float = 0.5
    mean_latency_share: float = 0.6
    shares: Shares = field(default_factory=Shares)
    window_s: float = 0.25
    alpha: float = 0.5
    floor_texts_per_replica: int = 32
    static_limit: int | None = None


@dataclass(frozen=True, slots=True)
class Permit:
    tenant: str
    tier: Tier
    texts: int


@dataclass(frozen=True, slots=True)
class Refusal:
    reason: RefusalReason
    retry_after_s: float


@dataclass
class _WindowCounters:
    started: float
    least_outstanding: int
    completed_texts: int = 0
    pool_completed_texts: int = 0


@dataclass
class AdmissionController:
    config: AdmissionConfig
    ready_replicas: Callable[[], int]
    clock: Callable[[], float] = time.monotonic
    throughput: float = 0.0
    """The pool's, every gateway's work included: texts per second."""
    share: float | None = None
    """This gateway's share of the pool's completions; None before its first sample
    (alone, or no counter heard), when it counts as 1."""
    outstanding: int = 0
    shadow_outstanding: int = 0
    """Texts of shadow copies in flight: never in ``outstanding`` (they take no one's room)."""
    _by_tier: Counter[str] = field(default_factory=Counter)
    _by_tenant: dict[str, Counter[str]] = field(default_factory=dict)
    _window: _WindowCounters | None = None
    _counters_heard: bool = False

    @property
    def limit(self) -> int:
        """This gateway's share of the pool's limit (the whole of it when alone)."""
        share = self._share()
        floor = floor_texts(self.ready_replicas(), self.config.floor_texts_per_replica, share)
        mean_latency_s = self.config.latency_budget_s * self.config.mean_latency_share
        return admission_limit(
            share * self.throughput, mean_latency_s, floor, self.config.static_limit
        )

    def precheck(self, tier: Tier) -> Refusal | None:
        """Made before the body is parsed: is there room for even one text of this tier?"""
        self._roll(self.clock())
        counted = self._by_tier[tier] if tier == "interactive" else self.outstanding
        if not self.config.enabled or counted == 0:
            return None
        if counted + 1 <= tier_allowance(tier, self.limit, self.config.shares.batch):
            return None
        return Refusal(
            "pool_full" if tier == "interactive" else "batch_share", self.retry_after_s()
        )

    def try_admit(self, tenant: str, tier: Tier, texts: int) -> Permit | Refusal:
        self._roll(self.clock())
        tenants = self._by_tenant.setdefault(tier, Counter())
        if self.config.enabled:
            occupancy = Occupancy(
                total=self.outstanding,
                tier=self._by_tier[tier],
                tenant=tenants[tenant],
                active_tenants_in_tier=len(tenants) + (0 if tenant in tenants else 1),
            )
            reason = refusal(texts, tier, occupancy, self.limit, self.config.shares)
            if reason is not None:
                return Refusal(reason, self.retry_after_s())
        self.outstanding += texts
        self._by_tier[tier] += texts
        tenants[tenant] += texts
        return Permit(tenant, tier, texts)

    def release(self, permit: Permit, *, completed: bool) -> None:
        window = self._roll(self.clock())
        self.outstanding -= permit.texts
        window.least_outstanding = min(window.least_outstanding, self.outstanding)
        self._by_tier[permit.tier] -= permit.texts
        tenants = self._by_tenant[permit.tier]
        tenants[permit.tenant] -= permit.texts
        if tenants[permit.tenant] <= 0:
            del tenants[permit.tenant]
        if completed:
            window.completed_texts += permit.texts

    def pool_completed(self, texts: int) -> None:
        """The pool's workers completed ``texts`` more, this gateway's work among them."""
        self._roll(self.clock()).pool_completed_texts += texts
        self._counters_heard = True

    def try_spare(self, texts: int) -> bool:
        """A shadow copy of ``texts``: taken only into room nothing else uses, below
        ``shares.shadow`` of the limit counting all outstanding work (shadow included), so a
        pool at capacity runs none; admission switched off does not switch this off."""
        self._roll(self.clock())
        used = self.outstanding + self.shadow_outstanding + texts
        if used > self.config.shares.shadow * self.limit:
            return False
        self.shadow_outstanding += texts
        return True

    def release_spare(self, texts: int) -> None:
        self.shadow_outstanding -= texts

    def retry_after_s(self) -> float:
        """Backlog ÷ drain rate: when the work outstanding now should be done (this
        gateway's, drained at its share of the pool's rate)."""
        drain = self._share() * self.throughput
        if drain <= 0:
            return self.config.latency_budget_s
        return self.outstanding / drain

    def _share(self) -> float:
        return 1.0 if self.share is None else self.share

    def _roll(self, now: float) -> _WindowCounters:
        window = self._window
        if window is not None and now - window.started < self.config.window_s:
            return window
        if window is not None:
            pool_completed = (
                window.pool_completed_texts if self._counters_heard else window.completed_texts
            )
            self.throughput = next_throughput(
                self.throughput,
                Window(
                    seconds=now - window.started,
                    completed_texts=pool_completed,
                    least_outstanding=window.least_outstanding,
                    limit=self.limit,
                ),
                self.config.alpha,
            )
            self.share = next_share(
                self.share,
                window.completed_texts,
                window.pool_completed_texts,
                self.config.alpha,
            )
        self._window = _WindowCounters(now, least_outstanding=self.outstanding)
        return self._window

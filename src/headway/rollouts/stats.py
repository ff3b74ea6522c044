"""What each version did in one step of a rollout, in counts every gateway can add up.

A gateway keeps one ``VersionCounts`` per role (primary, candidate, shadow) for the
step it is in and upserts it as an ``Observation``; the analysis sums every gateway's
(``merged``). Latency is kept as a histogram over the fixed ``LATENCY_BOUNDS_S``, not
as samples, so two gateways' counts merge by adding buckets. Its quantiles are
therefore estimates (linear inside a bucket, as Prometheus's ``histogram_quantile``),
not ``headway.quantile``'s nearest rank over samples that no longer exist.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from headway.registry.model import Observation, ObservedRole
from headway.rollouts.compare import Agreement

LATENCY_BOUNDS_S: tuple[float, ...] = tuple(
    float(f"{bound:.3g}") for bound in np.geomspace(0.001, 60.0, 40)
)
"""Upper bounds of the latency buckets, 1 ms to 60 s, log-spaced (each ~1.33× the one
before, so an estimate is off by at most a third); one more bucket holds the rest.
Observations store counts against these bounds: changing them orphans stored counts."""

ROLES: tuple[ObservedRole, ...] = ("primary", "candidate", "shadow")


class LatencyHistogram:
    """Counts of latencies per bucket: bucket ``i`` holds (bound ``i-1``, bound ``i``],
    bucket 0 holds [0, 1 ms], and the last one everything above 60 s."""

    __slots__ = ("counts",)

    def __init__(self, counts: Iterable[int] = ()) -> None:
        given = list(counts)
        if given and len(given) != len(LATENCY_BOUNDS_S) + 1:
            raise ValueError(
                f"{len(given)} latency buckets, not the {len(LATENCY_BOUNDS_S) + 1} "
                "of LATENCY_BOUNDS_S"
            )
        self.counts = given or [0] * (len(LATENCY_BOUNDS_S) + 1)

    @property
    def total(self) -> int:
        return sum(self.counts)

    def add(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(LATENCY_BOUNDS_S, seconds)] += 1

    def merge(self, other: LatencyHistogram) -> None:
        pairs = zip(self.counts, other.counts, strict=True)
        self.counts = [mine + theirs for mine, theirs in pairs]

    def quantile(self, q: float) -> float | None:
        """The ``q`` quantile, interpolated linearly within its bucket; None when empty.

        In the open-ended last bucket there is nothing to interpolate towards, so the
        answer is its lower bound, 60 s: "at least this slow"."""
        if not 0 <= q <= 1:
            raise ValueError(f"quantile {q} is outside [0, 1]")
        total = self.total
        if total == 0:
            return None
        rank = q * total
        below = 0
        for index, count in enumerate(self.counts):
            if count and below + count >= rank:
                if index == len(LATENCY_BOUNDS_S):
                    return LATENCY_BOUNDS_S[-1]
                lower = LATENCY_BOUNDS_S[index - 1] if index else 0.0
                upper = LATENCY_BOUNDS_S[index]
                return lower + (upper - lower) * (rank - below) / count
            below += count
        raise AssertionError("unreachable: the last non-empty bucket reaches the total")


@dataclass(slots=True)
class VersionCounts:
    """One version's requests, failures, latencies and (shadow) agreement in a step."""

    requests: int = 0
    errors: int = 0
    latency: LatencyHistogram = field(default_factory=LatencyHistogram)
    agreement_n: int = 0
    agreement_sum: float = 0.0
    top1_n: int = 0
    top1_agree: int = 0

    def record(self, latency_s: float, *, failed: bool) -> None:
        self.requests += 1
        if failed:
            self.errors += 1
        self.latency.add(latency_s)

    def record_agreement(self, agreement: Agreement) -> None:
        self.agreement_n += 1
        self.agreement_sum += agreement.measure
        if agreement.top1 is not None:
            self.top1_n += 1
            self.top1_agree += int(agreement.top1)

    @property
    def error_rate(self) -> float:
        return self.errors / self.requests if self.requests else 0.0

    @property
    def mean_agreement(self) -> float | None:
        return self.agreement_sum / self.agreement_n if self.agreement_n else None

    def p95(self) -> float | None:
        return self.latency.quantile(0.95)

    def add(self, other: VersionCounts) -> None:
        self.requests += other.requests
        self.errors += other.errors
        self.latency.merge(other.latency)
        self.agreement_n += other.agreement_n
        self.agreement_sum += other.agreement_sum
        self.top1_n += other.top1_n
        self.top1_agree += other.top1_agree

    def to_observation(
        self, rollout_id: int, step: int, gateway_id: str, role: ObservedRole
    ) -> Observation:
        return Observation(
            rollout_id=rollout_id,
            step=step,
            gateway_id=gateway_id,
            role=role,
            requests=self.requests,
            errors=self.errors,
            latency_buckets=tuple(self.latency.counts),
            agreement_n=self.agreement_n,
            agreement_sum=self.agreement_sum,
            top1_n=self.top1_n,
            top1_agree=self.top1_agree,
        )

    @classmethod
    def from_observation(cls, observation: Observation) -> VersionCounts:
        return cls(
            requests=observation.requests,
            errors=observation.errors,
            latency=LatencyHistogram(observation.latency_buckets),
            agreement_n=observation.agreement_n,
            agreement_sum=observation.agreement_sum,
            top1_n=observation.top1_n,
            top1_agree=observation.top1_agree,
        )


def merged(observations: Iterable[Observation]) -> dict[ObservedRole, VersionCounts]:
    """Every gateway's counts summed per role; each role present, empty when unseen."""
    totals: dict[ObservedRole, VersionCounts] = {role: VersionCounts() for role in ROLES}
    for observation in observations:
        totals[observation.role].add(VersionCounts.from_observation(observation))
    return totals

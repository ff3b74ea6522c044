"""Ejecting replicas that keep failing (pure).

A replica is ejected after ``threshold`` consecutive failures, for
``base_s x 2^(times ejected before)`` capped at ``max_s``, so a replica that keeps
coming back broken stays out longer each time. Never more than half the pool is
ejected at once: past that, failures are more likely the callers' or the
network's than the replicas', and ejecting more would only concentrate load.
When its interval ends a replica is on probation: it takes traffic again; a
failure ejects it again at once (for twice as long), a success ends the
probation, and a second success in good standing forgets its past ejections.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class EjectionPolicy:
    threshold: int = 5
    base_s: float = 1.0
    max_s: float = 30.0
    max_share: float = 0.5


@dataclass(frozen=True, slots=True)
class Health:
    """One replica's failure record."""

    consecutive_failures: int = 0
    ejections: int = 0
    ejected_until: float = 0.0
    probing: bool = False

    def ejected(self, now: float) -> bool:
        return now < self.ejected_until


def after_success(health: Health) -> Health:
    if health.probing:
        return Health(ejections=health.ejections)  # probation passed; backoff remembered
    return Health()


def after_failure(
    health: Health, now: float, policy: EjectionPolicy, ejected_now: int, pool_size: int
) -> Health:
    """The record after a failed call; ejects on the threshold, or on a failed probation."""
    failures = health.consecutive_failures + 1
    due = failures >= policy.threshold or (health.probing and not health.ejected(now))
    room = ejected_now + 1 <= policy.max_share * pool_size
    if not (due and room):
        return Health(failures, health.ejections, health.ejected_until, health.probing)
    interval = min(policy.max_s, policy.base_s * 2**health.ejections)
    return Health(0, health.ejections + 1, now + interval, probing=True)

"""Failed key checks as a token bucket per subject, a pure function of its state and the time.

A subject (a client address, a key prefix) holds at most ``failures`` tokens and refills at
``failures / window_s`` a second. Each failed check takes one; with less than one left the
subject is locked: refused before any key of it is checked, until a whole token is back
(``locked_for``). A refusal takes nothing, so it never lengthens a lockout, and the wait
it names is the real one. Invariant (the token bucket's, as in ``quota/bucket.py``): over
any interval of ``t`` seconds a subject fails at most ``failures + failures × t /
window_s`` times, however the failures and refusals interleave.

Why a bucket and not a lockout that doubles: the state is two numbers per subject (in
Redis too), a refusal says exactly when to come back, and someone who mistyped from behind
the same address as a guesser waits at most ``window_s / failures``, never longer each
time. The guesser gains nothing from that: keys are 256 random bits.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FailureLimit:
    """At most ``failures`` at once, one more every ``window_s / failures`` seconds."""

    failures: int
    window_s: float

    @property
    def rate(self) -> float:
        return self.failures / self.window_s

    @property
    def idle_s(self) -> float:
        """After this long without a failure the bucket is full: nothing to remember."""
        return self.window_s


@dataclass(slots=True)
class BucketState:
    """What a subject has left, as of ``updated_s``. (Slotted, not frozen: one is made per
    failed check.)"""

    tokens: float
    updated_s: float


def allowance(state: BucketState | None, now_s: float, limit: FailureLimit) -> float:
    """The failures the subject may still make at once (a fraction while it refills)."""
    if state is None:
        return float(limit.failures)
    elapsed = max(0.0, now_s - state.updated_s)
    return min(float(limit.failures), state.tokens + elapsed * limit.rate)


def locked_for(state: BucketState | None, now_s: float, limit: FailureLimit) -> float:
    """Seconds until the subject may fail again; 0: it may be checked now."""
    left = allowance(state, now_s, limit)
    return 0.0 if left >= 1.0 else (1.0 - left) / limit.rate


def fail(state: BucketState | None, now_s: float, limit: FailureLimit) -> BucketState:
    """The state after one failed check (a locked subject's is unchanged: not counted)."""
    left = allowance(state, now_s, limit)
    return BucketState(left - 1.0 if left >= 1.0 else left, now_s)

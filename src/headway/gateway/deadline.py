"""``X-Timeout-Ms`` becomes a deadline on the gateway's monotonic clock.

The remaining budget, not the absolute time, travels to workers, so no two
machines' clocks need to agree.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from headway.errors import ValidationFailed

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class Deadline:
    at: float
    clock: Clock

    def remaining_s(self) -> float:
        return self.at - self.clock()


def deadline_from_headers(
    headers: Mapping[str, str], *, default_ms: int, max_ms: int, clock: Clock
) -> Deadline:
    raw = headers.get("x-timeout-ms")
    if raw is None:
        timeout_ms = default_ms
    else:
        if not raw.strip().isdigit() or int(raw) <= 0:
            raise ValidationFailed("X-Timeout-Ms must be a positive integer of milliseconds")
        timeout_ms = min(int(raw), max_ms)
    return Deadline(clock() + timeout_ms / 1000, clock)

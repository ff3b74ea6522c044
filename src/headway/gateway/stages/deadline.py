"""``X-Timeout-Ms`` becomes a deadline on the gateway's monotonic clock.

The remaining budget, not the absolute time, travels to workers, so no two
machines' clocks need to agree. Absent, the tier's default applies; above the
tier's maximum, the maximum.
"""

from __future__ import annotations

from collections.abc import Mapping

from headway.errors import ValidationFailed
from headway.gateway.context import Clock, Deadline
from headway.gateway.query import decimal
from headway.settings import TierTimeouts


def deadline_from_headers(
    headers: Mapping[str, str], timeouts: TierTimeouts, clock: Clock
) -> Deadline:
    raw = headers.get("x-timeout-ms")
    timeout_ms = timeouts.default_ms if raw is None else _positive_ms(raw, timeouts.max_ms)
    return Deadline(clock() + timeout_ms / 1000, clock)


def _positive_ms(raw: str, max_ms: int) -> int:
    timeout_ms = decimal(raw.strip(), cap=max_ms)
    if not timeout_ms:  # not a number, or 0
        raise ValidationFailed("X-Timeout-Ms must be a positive integer of milliseconds")
    return timeout_ms

"""A retry budget: retries may add at most ``ratio`` of recent requests (pure, clocked).

Over a sliding window (10 one-second buckets) the budget counts requests and
retries; a retry is allowed while ``retries < ratio x requests + floor``, the
floor (``min_per_s`` x window) letting a quiet pool still retry. So a pool-wide
brown-out, where every call fails, is amplified by at most ``1 + ratio``, not 2x.
Hedges draw on the same budget as retries.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class RetryBudget:
    clock: Callable[[], float]
    ratio: float = 0.2
    min_per_s: float = 5.0
    window_s: int = 10
    _requests: list[int] = field(default_factory=list)
    _retries: list[int] = field(default_factory=list)
    _slots: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._requests = [0] * self.window_s
        self._retries = [0] * self.window_s
        self._slots = [-1] * self.window_s

    def _slot(self) -> int:
        second = math.floor(self.clock())
        index = second % self.window_s
        if self._slots[index] != second:
            self._slots[index] = second
            self._requests[index] = 0
            self._retries[index] = 0
        return index

    def _live(self, counts: list[int]) -> int:
        oldest = math.floor(self.clock()) - self.window_s
        return sum(c for c, s in zip(counts, self._slots, strict=True) if s > oldest)

    def record_request(self) -> None:
        self._requests[self._slot()] += 1

    def try_retry(self) -> bool:
        """Spend one retry if the budget allows it."""
        index = self._slot()
        allowed = self.ratio * self._live(self._requests) + self.min_per_s * self.window_s
        if self._live(self._retries) >= allowed:
            return False
        self._retries[index] += 1
        return True

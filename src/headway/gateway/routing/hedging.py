"""When to hedge: a quantile of the pool's recent chunk latencies (pure, bounded memory).

A chunk that has not answered by the pool's recent p95 is sent again to another
replica, and the first answer wins. When latency is steady about one chunk in
twenty waits that long; the chunks of a slow replica all do, which is the point
(what that costs: docs/benchmarks.md, "A slow replica, with and without hedging").
The quantile is recomputed every ``refresh_every``
samples from the last ``size``, and is unknown (no hedging) until
``min_samples`` have been seen, so a cold pool is not hedged on a guess.
"""

from __future__ import annotations

from headway.quantile import quantile


class LatencyQuantile:
    def __init__(
        self,
        quantile: float = 0.95,
        *,
        size: int = 1000,
        min_samples: int = 50,
        refresh_every: int = 50,
    ) -> None:
        self.quantile = quantile
        self._samples: list[float] = []
        self._size = size
        self._next = 0
        self._min_samples = min_samples
        self._refresh_every = refresh_every
        self._since_refresh = 0
        self._value: float | None = None

    def record(self, latency_s: float) -> None:
        if len(self._samples) < self._size:
            self._samples.append(latency_s)
        else:
            self._samples[self._next] = latency_s
            self._next = (self._next + 1) % self._size
        self._since_refresh += 1
        if len(self._samples) >= self._min_samples and (
            self._value is None or self._since_refresh >= self._refresh_every
        ):
            self._value = quantile(self._samples, self.quantile)
            self._since_refresh = 0

    def value_s(self) -> float | None:
        """The quantile of recent samples; None until there are enough of them."""
        return self._value

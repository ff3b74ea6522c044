"""What the batcher measures to decide its wait: the arrival rate and the model's cost.

Both are exponentially weighted, so they follow a load that changes; each ``observe``
is a few arithmetic operations on the batcher's owner task (``submit`` and the end of
a run), with no clock of their own: the batcher passes its clock's readings.
"""

from __future__ import annotations

import math

from headway.worker.fill import Cost

ARRIVAL_WEIGHT = 0.5
"""Heavy, so the rate follows a burst within a couple of arrivals: a closed-loop client's
requests come back together right after a batch, and an estimate that lagged them by
tens of arrivals would run the first of them alone."""
MIN_INTERVAL_S = 1e-6
"""Chunks read in the same clock tick count as this far apart (a finite rate)."""
COST_WEIGHT = 0.1
MIN_SIZE_VARIANCE = 0.25
"""Below this spread of batch sizes (texts²) the per-call and per-text parts of the cost
cannot be told apart; the cost is then taken as all per text, which never waits."""


class ArrivalRate:
    """Texts per second arriving: the weighted mean texts of a chunk over the weighted mean
    interval between chunks. Zero until two chunks have arrived."""

    def __init__(self, weight: float = ARRIVAL_WEIGHT) -> None:
        self._weight = weight
        self._last_at = math.nan
        self.interval_s = math.inf
        self.texts = 0.0

    def observe(self, at: float, texts: int) -> None:
        if math.isnan(self._last_at):
            self.texts = float(texts)
        else:
            self.texts += self._weight * (texts - self.texts)
            interval = max(0.0, at - self._last_at)
            if math.isinf(self.interval_s):
                self.interval_s = interval
            else:
                self.interval_s += self._weight * (interval - self.interval_s)
        self._last_at = at

    @property
    def texts_per_s(self) -> float:
        if math.isinf(self.interval_s):
            return 0.0
        return self.texts / max(self.interval_s, MIN_INTERVAL_S)


class CostFit:
    """``seconds = per_call + per_text × texts`` fitted to the batches that ran, by least
    squares with exponentially fading weights (the last ~1/weight batches count most)."""

    def __init__(self, weight: float = COST_WEIGHT) -> None:
        self._weight = weight
        self._n = self._s = self._nn = self._ns = 0.0
        self._seen = False

    def observe(self, texts: int, seconds: float) -> None:
        if not self._seen:
            self._n, self._s, self._nn, self._ns = texts, seconds, texts * texts, texts * seconds
            self._seen = True
            return
        w = self._weight
        self._n += w * (texts - self._n)
        self._s += w * (seconds - self._s)
        self._nn += w * (texts * texts - self._nn)
        self._ns += w * (texts * seconds - self._ns)

    @property
    def cost(self) -> Cost:
        """The fitted line, neither part negative; ``Cost()`` before any batch."""
        if not self._seen or self._n <= 0:
            return Cost()
        variance = self._nn - self._n * self._n
        all_per_text = Cost(0.0, max(0.0, self._s / self._n))
        if variance < MIN_SIZE_VARIANCE:
            return all_per_text
        per_text = (self._ns - self._n * self._s) / variance
        per_call = self._s - per_text * self._n
        if per_text < 0:
            return Cost(max(0.0, self._s), 0.0)
        if per_call < 0:
            return all_per_text
        return Cost(per_call, per_text)

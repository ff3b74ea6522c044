"""The one quantile function: nearest rank, for the product and its tooling alike.

The ``q`` quantile (``0 <= q <= 1``) of ``n`` samples is the ``ceil(q × n)``-th
smallest, and the smallest for ``q = 0``. It is always one of the samples; at
least ``q × n`` samples are at or below it and fewer than ``max(q × n, 1)`` are
strictly below it, which is what "p99 latency" promises a reader. It never
decreases as ``q`` grows.

``q`` is taken as the decimal it prints as: ``0.07`` means 7/100, not the binary
float just above it, so p7 of 100 samples is the 7th smallest, never the 8th.
The sample is selected in linear time (``numpy.partition``), not sorted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np
import numpy.typing as npt


def quantile(samples: Sequence[float] | npt.NDArray[np.float64], q: float) -> float:
    """The nearest-rank ``q`` quantile of a non-empty collection of numbers."""
    if not 0 <= q <= 1:
        raise ValueError(f"quantile {q} is outside [0, 1]")
    values = np.asarray(samples, dtype=np.float64)
    if values.ndim != 1:
        raise ValueError(f"quantile of a {values.ndim}-dimensional array")
    if values.size == 0:
        raise ValueError("quantile of no samples")
    kth = max(math.ceil(Fraction(str(float(q))) * values.size), 1) - 1
    return float(np.partition(values, kth)[kth])

"""Power of two choices (pure).

Sample two distinct candidates uniformly at random and take the one with less
outstanding work. Compared with always taking the least loaded, it does not
send a herd to the same replica between load updates, and compared with random
choice it keeps the worst queue exponentially shorter (Mitzenmacher).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def choose(candidates: Sequence[T], load: Callable[[T], float], rng: random.Random) -> T | None:
    if not candidates:
        return None
    if len(candidates) == 1:
        return candidates[0]
    first, second = rng.sample(range(len(candidates)), 2)
    a, b = candidates[first], candidates[second]
    return b if load(b) < load(a) else a

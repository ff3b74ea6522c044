"""Intended send times of an open-loop run: a step function of rates.

A schedule is a list of steps, each holding a rate for a duration; the steps
follow one another. Arrivals within a step are either evenly spaced (``fixed``:
the k-th arrival of a step at rate r starts ``k / r`` after the step began, so
a step of d seconds holds ``ceil(d × r)`` arrivals) or a Poisson process
(``poisson``: exponential gaps of mean ``1 / r`` from a seeded RNG). A Poisson
process is memoryless, so restarting it at each step boundary is exactly a
Poisson process with a piecewise-constant rate. A step at rate 0 is a pause.

Offsets are seconds from the start of the run, non-decreasing, and all lie
before ``duration_s``; the same schedule always gives the same offsets.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from headway_tools.loadgen.errors import InvalidSpec

Arrivals = Literal["fixed", "poisson"]
ARRIVALS: tuple[Arrivals, ...] = ("fixed", "poisson")


@dataclass(frozen=True, slots=True)
class Step:
    """``rps`` arrivals per second for ``seconds``."""

    seconds: float
    rps: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.seconds) and self.seconds > 0):
            raise InvalidSpec(f"a step lasts a positive number of seconds, not {self.seconds}")
        if not (math.isfinite(self.rps) and self.rps >= 0):
            raise InvalidSpec(f"a step's rate is a number of requests/s >= 0, not {self.rps}")


@dataclass(frozen=True, slots=True)
class Schedule:
    steps: tuple[Step, ...]
    arrivals: Arrivals = "fixed"
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.steps:
            raise InvalidSpec("a schedule needs at least one step")
        if self.arrivals not in ARRIVALS:
            raise InvalidSpec(
                f"arrivals must be one of {', '.join(ARRIVALS)}, not {self.arrivals!r}"
            )

    @property
    def duration_s(self) -> float:
        return sum(step.seconds for step in self.steps)

    def offsets(self) -> Iterator[float]:
        """Intended send times, in seconds from the start of the run."""
        rng = random.Random(f"headway.loadgen.arrivals:{self.seed}")
        began = 0.0
        for step in self.steps:
            ends = began + step.seconds
            if step.rps > 0:
                if self.arrivals == "fixed":
                    yield from _fixed(began, step)
                else:
                    yield from _poisson(began, ends, step.rps, rng)
            began = ends


def _fixed(began: float, step: Step) -> Iterator[float]:
    # k / rps, not a running sum: no drift over a long step. The epsilon keeps
    # d × r that is an integer up to float error (0.3 s × 10/s) from gaining one.
    count = math.ceil(step.seconds * step.rps - 1e-9)
    for k in range(count):
        yield began + k / step.rps


def _poisson(began: float, ends: float, rps: float, rng: random.Random) -> Iterator[float]:
    at = began + rng.expovariate(rps)
    while at < ends:
        yield at
        at += rng.expovariate(rps)

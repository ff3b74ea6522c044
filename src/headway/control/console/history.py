"""The last ten minutes of every pool's admission state, one sample a second.

The gateway's ``Background`` calls ``PoolHistory.sample`` every ``INTERVAL_S``; it
reads each pool's limit, outstanding texts, learned throughput, ready replicas and
the total it has shed, and appends them to that pool's deque. The deque is bounded
(``window_s / interval_s`` samples, plus one) and samples older than ``window_s``
are dropped on each append too, so memory stays the same however long the gateway
runs and however irregular the sampling. The shed *rate* is derived when read: the
difference of two consecutive totals over the seconds between them (never below
zero). ``record`` is pure given its arguments; the clock is injected.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from prometheus_client.registry import Collector

from headway.control.console.readings import shed_totals
from headway.gateway.pool import ReplicaPool

INTERVAL_S = 1.0
WINDOW_S = 600.0


@dataclass(frozen=True, slots=True)
class PoolSample:
    limit: int
    outstanding: int
    throughput: float
    """Texts per second, as the admission controller has learned it."""
    shed_total: float
    """Requests refused by admission control since the gateway started."""
    ready: int


@dataclass(frozen=True, slots=True)
class Point:
    """One sample as a chart plots it: ``ago_s`` seconds before the read (<= 0)."""

    ago_s: float
    limit: int
    outstanding: int
    throughput: float
    shed_per_s: float
    ready: int


Reader = Callable[[], Mapping[str, PoolSample]]


class PoolHistory:
    def __init__(
        self,
        read: Reader,
        clock: Callable[[], float],
        *,
        window_s: float = WINDOW_S,
        interval_s: float = INTERVAL_S,
    ) -> None:
        self._read = read
        self._clock = clock
        self.window_s = window_s
        self.interval_s = interval_s
        self._size = math.ceil(window_s / interval_s) + 1
        self._samples: dict[str, deque[tuple[float, PoolSample]]] = {}

    async def sample(self) -> None:
        """One step of the background loop."""
        self.record(self._clock(), self._read())

    def record(self, now: float, samples: Mapping[str, PoolSample]) -> None:
        for pool, sample in samples.items():
            kept = self._samples.setdefault(pool, deque(maxlen=self._size))
            kept.append((now, sample))
            while kept and kept[0][0] < now - self.window_s:
                kept.popleft()

    def points(self, pool: str, now: float | None = None) -> list[Point]:
        """The pool's samples, oldest first, as of ``now`` (default: the clock)."""
        at = self._clock() if now is None else now
        kept = self._samples.get(pool, ())
        points: list[Point] = []
        previous: tuple[float, PoolSample] | None = None
        for when, sample in kept:
            if when < at - self.window_s:
                previous = (when, sample)
                continue
            rate = 0.0
            if previous is not None and when > previous[0]:
                rate = max(0.0, (sample.shed_total - previous[1].shed_total) / (when - previous[0]))
            points.append(
                Point(
                    when - at,
                    sample.limit,
                    sample.outstanding,
                    sample.throughput,
                    rate,
                    sample.ready,
                )
            )
            previous = (when, sample)
        return points


def pool_reader(pools: Iterable[ReplicaPool], shed_counter: Collector) -> Reader:
    """Reads every pool's admission state now, and its shed total from ``shed_counter``
    (``headway_shed_total``, or a registry that has it)."""

    def read() -> dict[str, PoolSample]:
        shed = shed_totals(shed_counter)
        return {
            pool.name: PoolSample(
                pool.admission.limit,
                pool.admission.outstanding,
                pool.admission.throughput,
                shed.get(pool.name, 0.0),
                pool.ready_count,
            )
            for pool in pools
        }

    return read

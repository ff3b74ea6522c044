"""When ``headway up`` stops an idle pool's workers (``up.idle_stop_s``).

Once a second the supervisor reads every gateway's ``/metrics`` (on its operations
listener) and sums, per pool, the chunks sent to it
(``headway_chunk_attempts_total{kind="first"}``) and the requests held for it
(``headway_pool_waiting_requests``), and takes the most ready replicas any
gateway sees (``headway_ready_replicas``). A pool is busy while its chunk count moves,
while requests wait for it, while no gateway sees a ready replica (it is starting:
never stop a worker still loading its model) and while the gateways cannot be read
(never stop what cannot be seen). ``IdleWatch`` is the pure part: fed those readings
and the time, it says when a pool has been quiet for ``idle_stop_s``.
"""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

READ_TIMEOUT_S = 1.0


@dataclass(frozen=True, slots=True)
class PoolTraffic:
    chunks: float
    """Chunks sent to the pool so far (first attempts), summed over gateways."""
    ready: float
    """Ready replicas, as the gateway that sees the most sees them."""
    waiting: float
    """Requests held for the pool now, summed over gateways."""


def pool_traffic(expositions: Iterable[str]) -> dict[str, PoolTraffic]:
    """Every pool's traffic from the gateways' ``/metrics`` texts."""
    chunks: dict[str, float] = {}
    ready: dict[str, float] = {}
    waiting: dict[str, float] = {}
    for text in expositions:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                pool = sample.labels.get("pool")
                if pool is None:
                    continue
                if sample.name == "headway_chunk_attempts_total":
                    if sample.labels.get("kind") == "first":
                        chunks[pool] = chunks.get(pool, 0.0) + sample.value
                elif sample.name == "headway_ready_replicas":
                    ready[pool] = max(ready.get(pool, 0.0), sample.value)
                elif sample.name == "headway_pool_waiting_requests":
                    waiting[pool] = waiting.get(pool, 0.0) + sample.value
    return {
        pool: PoolTraffic(chunks.get(pool, 0.0), ready.get(pool, 0.0), waiting.get(pool, 0.0))
        for pool in chunks.keys() | ready.keys() | waiting.keys()
    }


def read_metrics(url: str, context: ssl.SSLContext | None = None) -> str | None:
    """A gateway's ``/metrics`` text (``url``: its operations listener); None when it does
    not answer 200 in time."""
    try:
        with urllib.request.urlopen(
            url + "/metrics", timeout=READ_TIMEOUT_S, context=context
        ) as response:
            if response.status != 200:
                return None
            return bytes(response.read()).decode("utf-8", errors="replace")
    except (urllib.error.URLError, OSError, ValueError):
        return None


@dataclass(slots=True)
class _Quiet:
    chunks: float
    since: float


class IdleWatch:
    """Per pool, since when it has been quiet (see the module docstring)."""

    def __init__(self, idle_stop_s: float) -> None:
        self.idle_stop_s = idle_stop_s
        self._quiet: dict[str, _Quiet] = {}

    def observe(self, pool: str, traffic: PoolTraffic | None, now: float) -> bool:
        """Take one reading (None: the gateways could not be read); True once the pool has
        been quiet for ``idle_stop_s``."""
        quiet = self._quiet.get(pool)
        busy = (
            quiet is None
            or traffic is None
            or traffic.ready == 0
            or traffic.waiting > 0
            or traffic.chunks != quiet.chunks
        )
        if quiet is None or busy:
            if traffic is not None:
                chunks = traffic.chunks
            else:  # unread: keep the last count seen
                chunks = 0.0 if quiet is None else quiet.chunks
            self._quiet[pool] = _Quiet(chunks, now)
            return False
        return now - quiet.since >= self.idle_stop_s

    def forget(self, pool: str) -> None:
        """The pool was stopped: its next start begins a fresh watch."""
        self._quiet.pop(pool, None)

"""What this gateway's requests did, per model version, for the rollouts watching them.

The request path reports every answer it gives for a model request (``outcome``:
served, or failed on our side — a 5xx; the client's own 4xx say nothing about a
version) and every shadow copy (``ShadowObserver``). Only versions some active rollout
watches are counted (``watch``), so the path pays one set look-up otherwise. The
rollout controller ``drain``s the counts every tick into the step they belong to.
Shadow copies are also passed on to ``metrics`` (every version pair, watched or not).
"""

from __future__ import annotations

from collections.abc import Iterable

from headway.rollouts.compare import Agreement
from headway.rollouts.observer import ShadowObserver
from headway.rollouts.stats import VersionCounts


class VersionRecorder:
    def __init__(self, metrics: ShadowObserver | None = None) -> None:
        self._metrics = metrics
        self.watched: frozenset[str] = frozenset()
        self._served: dict[str, VersionCounts] = {}
        self._shadow: dict[tuple[str, str], VersionCounts] = {}

    def watch(self, versions: Iterable[str]) -> None:
        self.watched = frozenset(versions)

    def outcome(self, version: str, ok: bool, latency_s: float) -> None:
        if version not in self.watched:
            return
        counts = self._served.get(version)
        if counts is None:
            counts = self._served[version] = VersionCounts()
        counts.record(latency_s, failed=not ok)

    def _pair(self, primary: str, candidate: str) -> VersionCounts | None:
        if candidate not in self.watched:
            return None
        counts = self._shadow.get((primary, candidate))
        if counts is None:
            counts = self._shadow[primary, candidate] = VersionCounts()
        return counts

    def shadow_skipped(self, primary: str, candidate: str) -> None:
        """Not a request of the candidate's: nothing to judge it on, only to count."""
        if self._metrics is not None:
            self._metrics.shadow_skipped(primary, candidate)

    def shadow_failed(self, primary: str, candidate: str, latency_s: float) -> None:
        if self._metrics is not None:
            self._metrics.shadow_failed(primary, candidate, latency_s)
        counts = self._pair(primary, candidate)
        if counts is not None:
            counts.record(latency_s, failed=True)

    def shadow_compared(
        self, primary: str, candidate: str, latency_s: float, agreement: Agreement
    ) -> None:
        if self._metrics is not None:
            self._metrics.shadow_compared(primary, candidate, latency_s, agreement)
        counts = self._pair(primary, candidate)
        if counts is None:
            return
        counts.record(latency_s, failed=False)
        counts.record_agreement(agreement)

    def drain(self) -> tuple[dict[str, VersionCounts], dict[tuple[str, str], VersionCounts]]:
        """The counts since the last drain: by version, and shadow copies by (primary,
        candidate)."""
        served, shadow = self._served, self._shadow
        self._served, self._shadow = {}, {}
        return served, shadow

"""Per version, served or shadowed, are its outputs still distributed as when it went live?

Everything runs on the gateway's event loop but the store calls and the statistics, which
get copies of the samples in a thread. The request path (``observe_embeddings``,
``observe_scores``) only samples rows into the version's ``VersionSample`` and histogram: no
I/O, no statistics. A shadow copy's rows go into the candidate version's sample like served
ones, so a candidate's reference is its outputs when it first ran as a shadow.

``evaluate`` (every ``interval_s``, under ``Background``) settles each version's reference:
the first time, one found in the store (taken before a restart, or by another gateway)
replaces the local one, whose rows move into the window; a full local one with none found is
stored with ``save_if_absent``, and what the store returns is adopted (another gateway may
have been first). With a full reference and two window rows it measures (the MMD permutation
test for embeddings, the KS test for scores); a version is *drifting* once its window holds
``window_size`` rows and the p-value is below ``p_value_threshold``. A store failure leaves
that reference unsaved until the next round (the local one is used meanwhile); the round
finishes the other versions, then raises the failure for ``Background`` to log and count.

A version's gauges exist once its reference is full (statistics 0, p-values 1), so
Prometheus sees each series before it moves. The ``version`` label is the version's first 12
hex characters, its values bounded by the versions the registry serves.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from headway.quality.references import (
    QualityKind,
    QualityStoreError,
    Reference,
    ReferenceStore,
)
from headway.quality.sample import BernoulliSampler, VersionSample
from headway.quality.stats import centroid_drift, ks_test, mmd_test, row_norms
from headway.settings import QualitySettings

log = logging.getLogger(__name__)

NORM_BUCKETS = (0.1, 0.5, 0.8, 0.9, 0.95, 0.99, 0.999, 1.001, 1.01, 1.05, 1.1, 1.2, 1.5, 2.0,
                5.0, 10.0, 100.0)  # fmt: skip
"""Around 1.0 (an L2-normalised model gives 1.0 ± 1e-6), then wide either side."""
SCORE_BUCKETS = tuple(step / 10 for step in range(11))
LABEL_CHARS = 12

Traffic = Literal["served", "shadow", "both"]


@dataclass(frozen=True, slots=True)
class Measured:
    """What one round computed for a version; None: not measured (yet), or not of its
    kind (the MMD for embeddings, the KS test for rerank scores)."""

    mean_norm: float | None = None
    centroid_drift: float | None = None
    mmd: float | None = None
    """MMD²ᵤ of the reference against the window."""
    mmd_p_value: float | None = None
    score_mean: float | None = None
    score_ks: float | None = None
    score_ks_p_value: float | None = None

    @property
    def p_value(self) -> float | None:
        return self.mmd_p_value if self.score_ks_p_value is None else self.score_ks_p_value


@dataclass(frozen=True, slots=True, kw_only=True)
class VersionQuality(Measured):
    """One version's quality, as the console shows it."""

    version: str
    kind: QualityKind
    reference_rows: int
    window_rows: int
    reference_taken_at: float | None
    """Wall-clock time the reference was complete; None while it fills."""
    drifting: bool = False
    traffic: Traffic = "served"
    """Where its rows were offered from since this gateway first saw it: requests it
    served, shadow copies of another version's requests (a candidate), or both."""


@dataclass(slots=True, eq=False)
class _Tracked:
    version: str
    kind: QualityKind
    sample: VersionSample
    observe: Callable[[float], None]
    """The version's norm or score histogram."""
    looked_up: bool = False
    """The store was asked for an earlier reference (and answered)."""
    stored: bool = False
    """The reference in use is the stored one."""
    taken_at: float | None = None
    measured: Measured = field(default_factory=Measured)
    drifting: bool = False
    served: bool = False
    """Rows of requests it served were offered."""
    shadowed: bool = False
    """Rows of shadow copies were offered."""

    @property
    def label(self) -> str:
        return self.version[:LABEL_CHARS]

    @property
    def traffic(self) -> Traffic:
        if self.shadowed:
            return "both" if self.served else "shadow"
        return "served"


class QualityMonitor:
    def __init__(
        self,
        settings: QualitySettings,
        store: ReferenceStore,
        registry: CollectorRegistry,
        clock: Callable[[], float] = time.time,
        rng: np.random.Generator | None = None,
    ) -> None:
        """``clock``: wall-clock seconds (a reference's ``taken_at``); ``rng``: every
        sampling and permutation draw (seed it in tests)."""
        self._settings = settings
        self._store = store
        self._clock = clock
        self._rng = rng if rng is not None else np.random.default_rng()
        self._tracked: dict[tuple[str, QualityKind], _Tracked] = {}
        self._norms = Histogram(
            "headway_quality_embedding_norm",
            "Euclidean norm of sampled embedding rows.",
            ["version"],
            buckets=NORM_BUCKETS,
            registry=registry,
        )
        self._scores = Histogram(
            "headway_quality_rerank_score",
            "Sampled rerank relevance scores.",
            ["version"],
            buckets=SCORE_BUCKETS,
            registry=registry,
        )

        def gauge(name: str, text: str, *labels: str) -> Gauge:
            return Gauge(name, text, list(labels), registry=registry)

        self._reference_rows = gauge(
            "headway_quality_reference_rows", "Rows in the version's reference.", "version", "kind"
        )
        self._window_rows = gauge(
            "headway_quality_window_rows", "Rows in the version's recent window.", "version", "kind"
        )
        self._centroid = gauge(
            "headway_quality_centroid_drift",
            "1 - cosine of the reference's and the window's mean embeddings.",
            "version",
        )
        self._mmd = gauge(
            "headway_quality_mmd",
            "Unbiased MMD^2 (Gaussian kernel), reference vs window.",
            "version",
        )
        self._mmd_p = gauge(
            "headway_quality_mmd_p_value", "Permutation p-value of the MMD^2.", "version"
        )
        self._ks = gauge(
            "headway_quality_score_ks",
            "KS statistic of rerank scores, reference vs window.",
            "version",
        )
        self._ks_p = gauge(
            "headway_quality_score_ks_p_value", "Asymptotic p-value of the KS statistic.", "version"
        )
        self._drift = gauge(
            "headway_quality_drift",
            "1: the window's p-value is below the threshold (with a full window).",
            "version",
            "kind",
        )
        self._evaluations = Counter(
            "headway_quality_evaluations", "Rounds of drift evaluation.", registry=registry
        )

    # the request path: sampling only, no I/O ---------------------------------------

    def observe_embeddings(
        self, version: str, rows: npt.NDArray[np.float32], *, shadow: bool = False
    ) -> None:
        """A request's embeddings (n × dims) of ``version``: served, or a shadow copy's."""
        if not self._settings.enabled or rows.ndim != 2:
            return
        tracked = self._tracked.get((version, "embedding"))
        if tracked is None:
            tracked = self._track(version, "embedding", rows.shape[1])
        _mark(tracked, shadow)
        taken = tracked.sample.offer(rows)
        if taken is None:
            return
        for norm in np.sqrt(np.einsum("ij,ij->i", taken, taken)).tolist():
            tracked.observe(norm)
        if tracked.taken_at is None and tracked.sample.reference_full:
            tracked.taken_at = self._clock()

    def observe_scores(
        self, version: str, scores: npt.NDArray[np.float32], *, shadow: bool = False
    ) -> None:
        """A rerank request's relevance scores (n,) of ``version``: served, or a shadow
        copy's."""
        if not self._settings.enabled:
            return
        tracked = self._tracked.get((version, "rerank"))
        if tracked is None:
            tracked = self._track(version, "rerank", 1)
        _mark(tracked, shadow)
        taken = tracked.sample.offer(scores.reshape(-1, 1))
        if taken is None:
            return
        for score in taken[:, 0].tolist():
            tracked.observe(score)
        if tracked.taken_at is None and tracked.sample.reference_full:
            tracked.taken_at = self._clock()

    # the background round ----------------------------------------------------------

    async def evaluate(self) -> None:
        """One round over every version seen (see the module's docstring)."""
        if not self._settings.enabled:
            return
        failures: list[QualityStoreError] = []
        for tracked in list(self._tracked.values()):
            try:
                await self._settle_reference(tracked)
            except QualityStoreError as exc:
                failures.append(exc)
            if tracked.sample.reference_full and tracked.sample.window_rows >= 2:
                await self._measure(tracked)
            self._publish(tracked)
        self._evaluations.inc()
        if failures:
            raise failures[0]

    def summary(self) -> list[VersionQuality]:
        """Every version seen, by version then kind."""
        return [self._summary_of(self._tracked[key]) for key in sorted(self._tracked)]

    # -------------------------------------------------------------------------------

    def _track(self, version: str, kind: QualityKind, width: int) -> _Tracked:
        settings = self._settings
        sampler = BernoulliSampler(settings.sample_share, self._rng)
        sample = VersionSample(width, settings.reference_size, settings.window_size, sampler)
        histogram = self._norms if kind == "embedding" else self._scores
        tracked = _Tracked(version, kind, sample, histogram.labels(version[:LABEL_CHARS]).observe)
        self._tracked[(version, kind)] = tracked
        return tracked

    async def _settle_reference(self, tracked: _Tracked) -> None:
        if not tracked.looked_up:
            found = await asyncio.to_thread(self._store.load, tracked.version, tracked.kind)
            tracked.looked_up = True
            if found is not None:
                self._adopt(tracked, found)
                return
        if tracked.stored or not tracked.sample.reference_full:
            return
        taken_at = tracked.taken_at if tracked.taken_at is not None else self._clock()
        mine = Reference(tracked.version, tracked.kind, taken_at, tracked.sample.reference())
        kept = await asyncio.to_thread(self._store.save_if_absent, mine)
        if kept.taken_at == mine.taken_at and np.array_equal(kept.sample, mine.sample):
            tracked.taken_at, tracked.stored = taken_at, True
        else:
            self._adopt(tracked, kept)

    def _adopt(self, tracked: _Tracked, reference: Reference) -> None:
        if reference.dims != tracked.sample.width:
            raise QualityStoreError(
                f"the stored reference of {tracked.label} ({tracked.kind}) is"
                f" {reference.dims} wide; this version's rows are {tracked.sample.width}"
            )
        tracked.sample.adopt(reference.sample)
        tracked.taken_at, tracked.stored = reference.taken_at, True

    async def _measure(self, tracked: _Tracked) -> None:
        reference, window = tracked.sample.reference(), tracked.sample.window()
        if tracked.kind == "embedding":
            rng = self._rng.spawn(1)[0]  # a Generator is not to be shared across threads
            permutations = self._settings.permutations
            measured = await asyncio.to_thread(
                _measure_embeddings, reference, window, permutations, rng
            )
        else:
            measured = await asyncio.to_thread(_measure_scores, reference, window)
        p_value = measured.p_value
        tracked.measured = measured
        tracked.drifting = (
            tracked.sample.window_rows >= self._settings.window_size
            and p_value is not None
            and p_value < self._settings.p_value_threshold
        )

    def _publish(self, tracked: _Tracked) -> None:
        label, kind, sample = tracked.label, tracked.kind, tracked.sample
        self._reference_rows.labels(label, kind).set(sample.reference_rows)
        self._window_rows.labels(label, kind).set(sample.window_rows)
        if not sample.reference_full:
            return
        measured = tracked.measured
        if kind == "embedding":
            self._centroid.labels(label).set(measured.centroid_drift or 0.0)
            self._mmd.labels(label).set(measured.mmd or 0.0)
            self._mmd_p.labels(label).set(_or_one(measured.mmd_p_value))
        else:
            self._ks.labels(label).set(measured.score_ks or 0.0)
            self._ks_p.labels(label).set(_or_one(measured.score_ks_p_value))
        self._drift.labels(label, kind).set(1.0 if tracked.drifting else 0.0)

    def _summary_of(self, tracked: _Tracked) -> VersionQuality:
        sample = tracked.sample
        return VersionQuality(
            **asdict(tracked.measured),
            version=tracked.version,
            kind=tracked.kind,
            reference_rows=sample.reference_rows,
            window_rows=sample.window_rows,
            reference_taken_at=tracked.taken_at if sample.reference_full else None,
            drifting=tracked.drifting,
            traffic=tracked.traffic,
        )


def _mark(tracked: _Tracked, shadow: bool) -> None:
    if shadow:
        tracked.shadowed = True
    else:
        tracked.served = True


def _measure_embeddings(
    reference: npt.NDArray[np.float32],
    window: npt.NDArray[np.float32],
    permutations: int,
    rng: np.random.Generator,
) -> Measured:
    mmd = mmd_test(reference, window, permutations, rng)
    return Measured(
        mean_norm=float(row_norms(window).mean()),
        centroid_drift=centroid_drift(reference, window),
        mmd=mmd.statistic,
        mmd_p_value=mmd.p_value,
    )


def _measure_scores(
    reference: npt.NDArray[np.float32], window: npt.NDArray[np.float32]
) -> Measured:
    ks = ks_test(reference[:, 0], window[:, 0])
    return Measured(
        score_mean=float(window[:, 0].mean()), score_ks=ks.statistic, score_ks_p_value=ks.p_value
    )


def _or_one(p_value: float | None) -> float:
    return 1.0 if p_value is None else p_value

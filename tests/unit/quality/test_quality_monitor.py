"""The quality monitor with a fake store, a fake clock and a seeded generator."""

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from headway.quality.monitor import QualityMonitor
from headway.quality.references import (
    MemoryReferenceStore,
    QualityStoreUnavailable,
    Reference,
)
from headway.settings import QualitySettings
from tests.fakes import FakeClock

VERSION = "ab" * 32
LABEL = VERSION[:12]
SIZE = 64
EVERY_ROW = QualitySettings(
    reference_size=SIZE, window_size=SIZE, sample_share=1.0, permutations=200
)


def unit_rows(seed: int, count: int, shift: float = 0.0, dims: int = 16) -> np.ndarray:
    """L2-normalised rows around a mean direction that ``shift`` moves."""
    rng = np.random.default_rng(seed)
    rows = rng.normal(size=(count, dims))
    rows[:, 0] += 2.0
    rows[:, 1] += shift
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


class Setup:
    def __init__(
        self,
        store=None,
        settings: QualitySettings = EVERY_ROW,
        clock: FakeClock | None = None,
        seed: int = 0,
    ) -> None:
        self.store = store if store is not None else MemoryReferenceStore()
        self.registry = CollectorRegistry()
        self.clock = clock or FakeClock(now=1_700_000_000.0)
        self.monitor = QualityMonitor(
            settings, self.store, self.registry, self.clock, np.random.default_rng(seed)
        )

    def metric(self, name: str, **labels: str) -> float | None:
        return self.registry.get_sample_value(name, {"version": LABEL, **labels})


async def test_the_reference_fills_first_then_the_window():
    setup = Setup()
    monitor = setup.monitor
    monitor.observe_embeddings(VERSION, unit_rows(1, 40))
    [quality] = monitor.summary()
    assert (quality.reference_rows, quality.window_rows, quality.reference_taken_at) == (
        40,
        0,
        None,
    )
    setup.clock.advance(5)
    monitor.observe_embeddings(VERSION, unit_rows(2, 30))
    [quality] = monitor.summary()
    assert (quality.reference_rows, quality.window_rows) == (SIZE, 6)
    assert quality.reference_taken_at == setup.clock.now  # when the reference filled
    assert setup.metric("headway_quality_embedding_norm_count") == 70


async def test_the_gauges_appear_with_a_full_reference_at_no_drift():
    setup = Setup()
    setup.monitor.observe_embeddings(VERSION, unit_rows(1, 10))
    await setup.monitor.evaluate()
    assert setup.metric("headway_quality_reference_rows", kind="embedding") == 10
    assert setup.metric("headway_quality_mmd_p_value") is None  # no full reference yet
    setup.monitor.observe_embeddings(VERSION, unit_rows(2, SIZE))
    await setup.monitor.evaluate()
    assert setup.metric("headway_quality_reference_rows", kind="embedding") == SIZE
    assert setup.metric("headway_quality_window_rows", kind="embedding") == 10
    assert setup.metric("headway_quality_drift", kind="embedding") == 0
    assert setup.metric("headway_quality_mmd_p_value") is not None
    assert setup.metric("headway_quality_centroid_drift") is not None
    assert setup.registry.get_sample_value("headway_quality_evaluations_total") == 2
    assert setup.store.load(VERSION, "embedding") is not None  # stored once full


async def test_a_shifted_window_is_flagged_as_drift():
    setup = Setup()
    monitor = setup.monitor
    monitor.observe_embeddings(VERSION, unit_rows(1, SIZE))
    monitor.observe_embeddings(VERSION, unit_rows(2, SIZE, shift=1.0))
    await monitor.evaluate()
    [quality] = monitor.summary()
    assert quality.drifting and quality.mmd_p_value == pytest.approx(1 / 201)
    assert quality.centroid_drift > 0.01 and quality.mmd > 0
    assert quality.mean_norm == pytest.approx(1.0, abs=1e-5)
    assert setup.metric("headway_quality_drift", kind="embedding") == 1
    assert setup.metric("headway_quality_mmd_p_value") == pytest.approx(1 / 201)


async def test_a_window_of_the_same_distribution_is_not_flagged():
    setup = Setup()
    monitor = setup.monitor
    monitor.observe_embeddings(VERSION, unit_rows(1, SIZE))
    monitor.observe_embeddings(VERSION, unit_rows(2, SIZE))
    await monitor.evaluate()
    [quality] = monitor.summary()
    assert not quality.drifting and quality.mmd_p_value > 0.05
    assert setup.metric("headway_quality_drift", kind="embedding") == 0


async def test_drift_waits_for_a_full_window():
    setup = Setup()
    monitor = setup.monitor
    monitor.observe_embeddings(VERSION, unit_rows(1, SIZE))
    monitor.observe_embeddings(VERSION, unit_rows(2, SIZE // 2, shift=3.0))
    await monitor.evaluate()
    [quality] = monitor.summary()
    assert quality.mmd_p_value < 0.01 and not quality.drifting
    monitor.observe_embeddings(VERSION, unit_rows(3, SIZE // 2, shift=3.0))
    await monitor.evaluate()
    assert monitor.summary()[0].drifting


async def test_a_stored_reference_is_reused_after_a_restart():
    store = MemoryReferenceStore()
    first = Setup(store)
    first.monitor.observe_embeddings(VERSION, unit_rows(1, SIZE))
    await first.monitor.evaluate()
    taken_at = first.monitor.summary()[0].reference_taken_at
    stored = store.load(VERSION, "embedding")
    assert stored is not None and stored.taken_at == taken_at

    first.clock.advance(3600)
    restarted = Setup(store, clock=first.clock, seed=1)  # the traffic has drifted since
    restarted.monitor.observe_embeddings(VERSION, unit_rows(2, SIZE, shift=1.0))
    await restarted.monitor.evaluate()
    [quality] = restarted.monitor.summary()
    assert quality.reference_taken_at == taken_at  # not retaken from drifted traffic
    assert (quality.reference_rows, quality.window_rows) == (SIZE, SIZE)
    assert quality.drifting
    assert store.saves == 1


async def test_the_first_writer_wins_and_the_loser_adopts_its_reference():
    store = MemoryReferenceStore()
    setup = Setup(store)
    setup.monitor.observe_embeddings(VERSION, unit_rows(1, 8))
    await setup.monitor.evaluate()  # asked the store once: nothing there yet
    other = Reference(VERSION, "embedding", 123.0, unit_rows(9, SIZE))
    store.save_if_absent(other)  # another gateway filled its reference first
    setup.monitor.observe_embeddings(VERSION, unit_rows(2, SIZE))
    await setup.monitor.evaluate()
    [quality] = setup.monitor.summary()
    assert quality.reference_taken_at == 123.0
    assert store.load(VERSION, "embedding") is other
    assert quality.window_rows == SIZE  # its own reference rows became window rows


class FailingStore(MemoryReferenceStore):
    def __init__(self) -> None:
        super().__init__()
        self.failing = True

    def save_if_absent(self, reference: Reference) -> Reference:
        if self.failing:
            raise QualityStoreUnavailable("down")
        return super().save_if_absent(reference)


async def test_a_failing_store_leaves_the_statistics_on_and_retries_the_save():
    store = FailingStore()
    setup = Setup(store)
    setup.monitor.observe_embeddings(VERSION, unit_rows(1, SIZE))
    setup.monitor.observe_embeddings(VERSION, unit_rows(2, SIZE, shift=1.0))
    with pytest.raises(QualityStoreUnavailable):
        await setup.monitor.evaluate()
    assert setup.monitor.summary()[0].drifting  # measured on the local reference
    assert setup.metric("headway_quality_drift", kind="embedding") == 1
    store.failing = False
    await setup.monitor.evaluate()
    assert store.load(VERSION, "embedding") is not None


async def test_rerank_scores_are_compared_with_ks():
    setup = Setup()
    monitor = setup.monitor
    rng = np.random.default_rng(4)
    monitor.observe_scores(VERSION, rng.uniform(0, 1, SIZE).astype(np.float32))
    monitor.observe_scores(VERSION, rng.uniform(0, 1, SIZE).astype(np.float32))
    await monitor.evaluate()
    [quality] = monitor.summary()
    assert quality.kind == "rerank" and not quality.drifting and quality.score_ks_p_value > 0.05
    monitor.observe_scores(VERSION, rng.uniform(0.4, 1, SIZE).astype(np.float32))
    await monitor.evaluate()
    [quality] = monitor.summary()
    assert quality.drifting and quality.score_ks_p_value < 0.01
    assert quality.score_mean == pytest.approx(0.7, abs=0.05)
    assert setup.metric("headway_quality_drift", kind="rerank") == 1
    assert setup.metric("headway_quality_score_ks") == pytest.approx(quality.score_ks)
    assert setup.metric("headway_quality_rerank_score_count") == 3 * SIZE
    assert quality.mmd is None  # an embedding statistic


async def test_one_version_can_have_both_kinds_each_with_its_own_series():
    setup = Setup()
    setup.monitor.observe_embeddings(VERSION, unit_rows(1, 4))
    setup.monitor.observe_scores(VERSION, np.array([0.5, 0.6], dtype=np.float32))
    kinds = [(q.kind, q.reference_rows) for q in setup.monitor.summary()]
    assert kinds == [("embedding", 4), ("rerank", 2)]
    await setup.monitor.evaluate()
    assert setup.metric("headway_quality_reference_rows", kind="rerank") == 2


async def test_a_candidates_shadow_rows_take_its_reference_and_say_so():
    setup = Setup()
    monitor = setup.monitor
    monitor.observe_embeddings(VERSION, unit_rows(1, SIZE), shadow=True)
    monitor.observe_scores(VERSION, np.array([0.5, 0.6], dtype=np.float32), shadow=True)
    assert [(q.kind, q.traffic) for q in monitor.summary()] == [
        ("embedding", "shadow"),
        ("rerank", "shadow"),
    ]
    await monitor.evaluate()
    stored = setup.store.load(VERSION, "embedding")
    assert stored is not None  # its reference: its outputs when it first ran as a shadow
    # Promoted: the rows it serves go to the same sample, its window.
    monitor.observe_embeddings(VERSION, unit_rows(2, SIZE, shift=1.0))
    await monitor.evaluate()
    quality = monitor.summary()[0]
    assert (quality.traffic, quality.window_rows, quality.drifting) == ("both", SIZE, True)
    assert quality.reference_taken_at == stored.taken_at


async def test_rows_it_served_are_served_traffic():
    setup = Setup()
    setup.monitor.observe_embeddings(VERSION, unit_rows(1, 4))
    assert setup.monitor.summary()[0].traffic == "served"


async def test_only_sampled_rows_are_kept_and_observed():
    settings = QualitySettings(sample_share=0.05)
    setup = Setup(settings=settings)
    for seed in range(200):
        setup.monitor.observe_embeddings(VERSION, unit_rows(seed, 32))
    [quality] = setup.monitor.summary()
    taken = quality.reference_rows + quality.window_rows
    assert 200 < taken < 440  # 6400 rows at 5%: 320 ± 4.5 standard deviations
    assert setup.metric("headway_quality_embedding_norm_count") == taken


async def test_a_disabled_monitor_keeps_and_measures_nothing():
    setup = Setup(settings=QualitySettings(enabled=False))
    setup.monitor.observe_embeddings(VERSION, unit_rows(1, 32))
    await setup.monitor.evaluate()
    assert setup.monitor.summary() == []
    assert setup.registry.get_sample_value("headway_quality_evaluations_total") == 0

"""The synthetic backend: cost as waiting, hiccups on a seeded share of calls, stable rows."""

import numpy as np
import pytest

from headway.catalog import synthetic_record
from headway.settings import SyntheticSettings
from headway.worker.backends.synthetic import SyntheticBackend


def test_a_call_waits_per_call_and_per_text():
    slept: list[float] = []
    backend = SyntheticBackend(call_ms=50, text_ms=5, dimensions=4, sleep=slept.append)
    backend.run(backend.encode_texts(["a b", "c"]))
    assert slept == [pytest.approx(0.060)]


def test_hiccups_add_their_time_to_about_their_share_of_calls():
    slept: list[float] = []
    backend = SyntheticBackend(
        call_ms=10, text_ms=0, dimensions=4, hiccup_share=0.2, hiccup_ms=500, sleep=slept.append
    )
    batch = backend.encode_texts(["x"])
    for _ in range(1000):
        backend.run(batch)
    assert set(np.round(slept, 6)) == {0.01, 0.51}
    assert 150 <= sum(s > 0.1 for s in slept) <= 250


def test_rows_depend_on_the_text_alone_and_speed_is_not_part_of_the_version():
    fast = SyntheticBackend(call_ms=0, text_ms=0, dimensions=8, sleep=lambda s: None)
    slow = SyntheticBackend(
        call_ms=0, text_ms=0, dimensions=8, hiccup_share=1, hiccup_ms=1, sleep=lambda s: None
    )
    texts = ["the same words", "other words"]
    np.testing.assert_array_equal(
        fast.run(fast.encode_texts(texts)), slow.run(slow.encode_texts(texts))
    )
    assert (
        synthetic_record(SyntheticSettings(call_ms=1)).version
        == synthetic_record(SyntheticSettings(call_ms=500, hiccup_share=0.5)).version
    )
    assert (
        synthetic_record(SyntheticSettings(dimensions=8)).version
        != synthetic_record(SyntheticSettings(dimensions=16)).version
    )

"""The synthetic backend: cost as waiting, hiccups on a seeded share of calls, stable rows."""

import numpy as np
import pytest

from headway.catalog import synthetic_aliases, synthetic_record
from headway.settings import SyntheticSettings
from headway.worker.backends.synthetic import InjectedFailure, SyntheticBackend


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


def test_the_seed_changes_rows_and_the_version_and_only_the_plain_model_takes_the_alias():
    texts = ["the same words"]
    plain, seeded = (
        SyntheticBackend(call_ms=0, text_ms=0, dimensions=8, seed=seed, sleep=lambda s: None)
        for seed in (0, 5)
    )
    assert not np.allclose(
        plain.run(plain.encode_texts(texts)), seeded.run(seeded.encode_texts(texts))
    )
    versions = {
        synthetic_record(SyntheticSettings(**options)).version
        for options in ({}, {"seed": 5}, {"fail_share": 0.1})
    }
    assert len(versions) == 3
    assert synthetic_aliases(SyntheticSettings()) == ("synthetic",)
    assert synthetic_aliases(SyntheticSettings(seed=5)) == ()
    assert synthetic_aliases(SyntheticSettings(fail_share=0.1)) == ()


def test_about_fail_share_of_calls_fail_the_same_way_every_run():
    def outcomes() -> list[bool]:
        backend = SyntheticBackend(
            call_ms=0, text_ms=0, dimensions=4, fail_share=0.3, sleep=lambda s: None
        )
        batch = backend.encode_texts(["x"])
        failed = []
        for _ in range(1000):
            try:
                backend.run(batch)
            except InjectedFailure:
                failed.append(True)
            else:
                failed.append(False)
        return failed

    assert InjectedFailure("x").status >= 500
    first = outcomes()
    assert 250 <= sum(first) <= 350
    assert outcomes() == first

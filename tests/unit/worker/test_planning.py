from hypothesis import given
from hypothesis import strategies as st

from headway.worker.planning import padded_tokens, plan_runs

lengths_st = st.lists(st.integers(min_value=1, max_value=256), min_size=1, max_size=48)


@given(lengths_st, st.integers(min_value=1, max_value=8192))
def test_every_text_runs_exactly_once_within_the_token_budget(lengths, budget):
    runs = plan_runs(lengths, budget, 64)
    assert sorted(i for run in runs for i in run) == list(range(len(lengths)))
    for run in runs:
        assert len(run) == 1 or len(run) * max(lengths[i] for i in run) <= budget


@given(lengths_st)
def test_plan_never_costs_more_than_one_padded_call(lengths):
    overhead = 64
    runs = plan_runs(lengths, 1 << 30, overhead)
    planned = padded_tokens(lengths, runs) + overhead * len(runs)
    single = len(lengths) * max(lengths) + overhead
    assert planned <= single


def test_short_and_long_texts_are_not_padded_together():
    lengths = [8] * 16 + [256] * 2
    runs = plan_runs(lengths, 8192, 64)
    assert len(runs) == 2
    assert padded_tokens(lengths, runs) == 16 * 8 + 2 * 256
    assert padded_tokens(lengths, [list(range(18))]) == 18 * 256


def test_similar_lengths_share_one_call():
    lengths = [20, 22, 21, 19, 23]
    assert plan_runs(lengths, 8192, 64) == [[3, 0, 2, 1, 4]]

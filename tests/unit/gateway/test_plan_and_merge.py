import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from headway import wire
from headway.gateway.stages.merge import merge
from headway.gateway.stages.plan import split


@given(st.integers(min_value=0, max_value=5000), st.integers(min_value=1, max_value=64))
def test_split_covers_every_text_in_order_with_balanced_chunks(n_texts, chunk):
    parts = split(n_texts, chunk)
    covered = [i for part in parts for i in range(part.start, part.stop)]
    assert covered == list(range(n_texts))
    sizes = [part.stop - part.start for part in parts]
    assert all(0 < size <= chunk for size in sizes)
    if sizes:
        assert max(sizes) - min(sizes) <= 1
        assert len(parts) == -(-n_texts // chunk)


def test_forty_texts_at_sixteen_become_three_balanced_chunks():
    assert [p.stop - p.start for p in split(40, 16)] == [14, 13, 13]


def result_of(rows: np.ndarray, tokens: int) -> wire.ChunkResult:
    values = np.ascontiguousarray(rows, dtype="<f4")
    width = values.shape[1] if values.ndim == 2 else 1
    return wire.ChunkResult("v", values.tobytes(), values.shape[0], width, tokens)


@given(st.integers(min_value=1, max_value=300), st.integers(min_value=1, max_value=32))
def test_merge_restores_the_original_order_and_sums_tokens(n_texts, chunk):
    rows = np.arange(n_texts * 3, dtype=np.float32).reshape(n_texts, 3)
    parts = split(n_texts, chunk)
    merged = merge([result_of(rows[part], part.stop - part.start) for part in parts])
    np.testing.assert_array_equal(merged.values, rows)
    assert merged.tokens == n_texts


def test_scores_merge_as_one_row_per_document():
    scores = np.array([0.1, 0.9, 0.5, 0.7], dtype=np.float32)
    merged = merge([result_of(scores[:2], 5), result_of(scores[2:], 6)])
    np.testing.assert_array_equal(merged.values, scores)
    assert merged.tokens == 11

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from headway.gateway.fanout import merge, split


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


@given(st.integers(min_value=1, max_value=300), st.integers(min_value=1, max_value=32))
def test_merge_restores_the_original_order(n_texts, chunk):
    rows = np.arange(n_texts * 3, dtype=np.float32).reshape(n_texts, 3)
    merged = merge([rows[part] for part in split(n_texts, chunk)])
    np.testing.assert_array_equal(merged, rows)

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from headway.rollouts.compare import (
    Agreement,
    average_ranks,
    cosines,
    embedding_agreement,
    rerank_agreement,
    spearman,
)


def test_cosine_divides_by_both_norms():
    primary = [[3.0, 4.0], [1.0, 0.0], [1.0, 1.0]]
    shadow = [[6.0, 8.0], [0.0, 2.0], [-1.0, -1.0]]
    assert cosines(primary, shadow) == pytest.approx([1.0, 0.0, -1.0])


def test_a_zero_row_agrees_with_nothing():
    assert cosines([[0.0, 0.0], [1.0, 2.0]], [[1.0, 0.0], [1.0, 2.0]]) == pytest.approx([0.0, 1.0])
    assert cosines([[0.0, 0.0]], [[0.0, 0.0]]) == pytest.approx([0.0])


def test_embedding_agreement_is_the_mean_cosine():
    got = embedding_agreement([[1.0, 0.0], [1.0, 0.0]], [[1.0, 0.0], [0.0, 1.0]])
    assert got == Agreement(pytest.approx(0.5), None)


def test_an_answer_of_another_shape_does_not_agree():
    assert embedding_agreement([[1.0, 0.0]], [[1.0, 0.0, 0.0]]).measure == 0.0
    assert embedding_agreement([[1.0, 0.0]], [[1.0, 0.0], [1.0, 0.0]]).measure == 0.0
    assert rerank_agreement([1.0, 2.0], [1.0, 2.0, 3.0]) == Agreement(0.0, False)


def test_ties_take_their_average_rank():
    assert average_ranks([10.0, 20.0, 20.0, 5.0]).tolist() == [2.0, 3.5, 3.5, 1.0]
    assert average_ranks([1.0, 1.0, 1.0]).tolist() == [2.0, 2.0, 2.0]


def test_spearman_of_same_reversed_and_tied_orders():
    assert spearman([0.1, 0.5, 0.9], [1.0, 2.0, 3.0]) == pytest.approx(1.0)
    assert spearman([0.1, 0.5, 0.9], [3.0, 2.0, 1.0]) == pytest.approx(-1.0)
    # ranks (1, 2, 3, 4) against (1.5, 1.5, 3, 4): Pearson of the ranks.
    expected = np.corrcoef([1, 2, 3, 4], [1.5, 1.5, 3, 4])[0, 1]
    assert spearman([1.0, 2.0, 3.0, 4.0], [7.0, 7.0, 8.0, 9.0]) == pytest.approx(expected)


def test_spearman_edge_cases():
    assert spearman([0.3], [0.9]) == 1.0
    assert spearman([2.0, 2.0, 2.0], [5.0, 5.0, 5.0]) == 1.0
    assert spearman([2.0, 2.0, 2.0], [1.0, 2.0, 3.0]) == 0.0
    assert spearman([1.0, 2.0, 3.0], [4.0, 4.0, 4.0]) == 0.0


def test_rerank_agreement_and_top1():
    assert rerank_agreement([0.2, 0.9, 0.1], [0.3, 0.8, 0.2]) == Agreement(pytest.approx(1.0), True)
    # Same top document, the rest swapped: rho = 1 - 6*2/(3*8) = 0.5.
    assert rerank_agreement([0.2, 0.9, 0.1], [0.1, 0.8, 0.2]) == Agreement(pytest.approx(0.5), True)
    assert rerank_agreement([0.9, 0.2], [0.2, 0.9]).top1 is False


@given(
    st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=2, max_size=30).flatmap(
        lambda a: st.tuples(
            st.just(a), st.lists(st.floats(-1e3, 1e3), min_size=len(a), max_size=len(a))
        )
    )
)
def test_spearman_is_a_correlation_and_symmetric(pair):
    a, b = pair
    rho = spearman(a, b)
    assert -1.0 <= rho <= 1.0
    assert rho == pytest.approx(spearman(b, a))

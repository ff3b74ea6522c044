from __future__ import annotations

import numpy as np
import pytest

from headway.models.evaluate import ModelComparison, compare_embeddings


def test_identical_embeddings_agree_completely() -> None:
    x = np.random.default_rng(0).normal(size=(10, 8)).astype(np.float32)
    assert compare_embeddings(x, x) == pytest.approx(ModelComparison(1.0, 1.0, 1.0))


def test_scale_does_not_matter() -> None:
    x = np.random.default_rng(1).normal(size=(6, 4)).astype(np.float32)
    result = compare_embeddings(x, 3.0 * x)
    assert result.min_cosine == pytest.approx(1.0)
    assert result.nn_agreement == 1.0


def test_known_cosines_and_neighbours() -> None:
    # reference neighbours: 0->1, 1->0, 2->3, 3->1. In the candidate row 2 moves
    # next to row 0, so the neighbours of rows 0 and 2 change; rows 1 and 3 keep theirs.
    reference = np.array([[1, 0, 0], [0.9, 0.2, 0], [0, 0.1, 1], [0, 1, 0]], dtype=np.float32)
    candidate = reference.copy()
    candidate[2] = [1, 0, 0.01]
    result = compare_embeddings(reference, candidate)
    moved = float(
        candidate[2] @ reference[2] / np.linalg.norm(candidate[2]) / np.linalg.norm(reference[2])
    )
    assert result.min_cosine == pytest.approx(moved)
    assert result.mean_cosine == pytest.approx((3.0 + moved) / 4)
    assert result.nn_agreement == pytest.approx(2 / 4)


@pytest.mark.parametrize(("a", "b"), [((3, 4), (3, 5)), ((1, 4), (1, 4)), ((4,), (4,))])
def test_shapes_are_checked(a: tuple[int, ...], b: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match="matrices"):
        compare_embeddings(np.ones(a, dtype=np.float32), np.ones(b, dtype=np.float32))

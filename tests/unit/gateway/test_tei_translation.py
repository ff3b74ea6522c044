"""TEI's translation: error types, unit rows, raw scores, refused texts (pure parts)."""

from __future__ import annotations

import numpy as np
import pytest

from headway.errors import (
    DeadlineExceeded,
    HeadwayError,
    InvalidRequest,
    MeteringUnavailable,
    NoReplicas,
    NotFound,
    Overloaded,
    PayloadTooLarge,
    QuotaExceeded,
    Unauthorized,
    UpstreamFailed,
    ValidationFailed,
)
from headway.gateway.endpoints.tei import error_type, raw_scores, tei_error, unit_rows
from headway.protocols.parse import texts_of
from headway.registry.model import ModelRecord


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (ValidationFailed("x"), "Validation"),
        (InvalidRequest("x"), "Validation"),
        (PayloadTooLarge("x"), "Validation"),
        (Unauthorized("x"), "Validation"),
        (NotFound("x"), "Validation"),
        (QuotaExceeded("x"), "Overloaded"),
        (Overloaded("x"), "Overloaded"),
        (NoReplicas("x"), "Unhealthy"),
        (MeteringUnavailable("x"), "Unhealthy"),
        (UpstreamFailed("x"), "Backend"),
        (DeadlineExceeded("x"), "Backend"),
        (HeadwayError("internal error"), "Backend"),
    ],
)
def test_every_error_has_one_of_teis_types(exc: HeadwayError, expected: str) -> None:
    assert error_type(exc) == expected


def test_a_tei_error_keeps_the_tables_status_and_retry_after() -> None:
    response = tei_error(Overloaded("pool full", retry_after_s=2.2))
    assert response.status == 503
    assert response.headers["retry-after"] == "3"
    assert response.body == b'{"error":"pool full","error_type":"Overloaded"}'


def test_unit_rows_leave_unit_rows_untouched_and_scale_the_others() -> None:
    rows = np.asarray([[0.6, 0.8], [3.0, 4.0], [0.0, 0.0]], dtype=np.float32)
    first = rows[:1]
    assert unit_rows(first) is first  # already unit-length: the very rows, not a copy
    scaled = unit_rows(rows)
    np.testing.assert_allclose(scaled, [[0.6, 0.8], [0.6, 0.8], [0.0, 0.0]])
    assert rows[1, 0] == 3.0  # not changed in place


def test_raw_scores_undo_the_mapping_to_zero_one() -> None:
    scores = np.asarray([0.5, 0.75, 0.0, 1.0], dtype=np.float32)
    embedding = ModelRecord("v", "m", "embedding", 8, "none")
    np.testing.assert_allclose(raw_scores(scores, embedding), [0.0, 0.5, -1.0, 1.0])
    cross = ModelRecord("v", "m", "cross-encoder", 1, "none")
    logits = np.asarray([-3.0, 0.0, 2.5], dtype=np.float32)
    sigmoid = (1 / (1 + np.exp(-logits.astype(np.float64)))).astype(np.float32)
    np.testing.assert_allclose(raw_scores(sigmoid, cross), logits, atol=1e-5)
    assert np.isfinite(raw_scores(np.asarray([0.0, 1.0], dtype=np.float32), cross)).all()


def test_texts_pass_and_token_ids_are_refused_naming_the_field_and_fix() -> None:
    assert texts_of("one", "inputs") == ["one"]
    assert texts_of(["a", "b"], "inputs") == ["a", "b"]
    for ids in ([1, 2, 3], [[1, 2], [3]], ["a", 7]):
        with pytest.raises(ValidationFailed, match=r"`input` holds token ids.*Do this"):
            texts_of(ids, "input", " Do this.")

"""What a request may ask of a model's shape: widths it was trained for, token limits."""

from __future__ import annotations

import numpy as np
import pytest

from headway.errors import ValidationFailed
from headway.gateway.endpoints.fit import check_max_tokens, check_width, narrowed, widths
from headway.registry.model import ModelRecord

PLAIN = ModelRecord("v1", "minilm", "embedding", 384, "none", max_tokens=256)
MRL = ModelRecord("v2", "nomic", "embedding", 768, "none", matryoshka_dimensions=(256, 512))


def test_a_model_not_trained_for_narrower_widths_gives_only_its_own() -> None:
    check_width(None, PLAIN, "dimensions")
    check_width(384, PLAIN, "dimensions")
    with pytest.raises(ValidationFailed, match=r"not trained to be truncated.*omit `dimensions`"):
        check_width(128, PLAIN, "dimensions")


def test_a_matryoshka_model_gives_the_widths_it_declares_and_names_them() -> None:
    assert widths(MRL) == [768, 512, 256]
    for width in (768, 512, 256):
        check_width(width, MRL, "output_dimension")
    with pytest.raises(ValidationFailed, match="can produce 768, 512, 256 dimensions, not 300"):
        check_width(300, MRL, "output_dimension")


def test_narrowing_keeps_the_first_components_at_unit_length() -> None:
    rows = np.asarray([[3.0, 4.0, 12.0], [0.0, 0.0, 1.0]], dtype=np.float32)
    assert narrowed(rows, None) is rows and narrowed(rows, 3) is rows
    head = narrowed(rows, 2)
    assert head.dtype == np.float32
    np.testing.assert_allclose(head[0], [0.6, 0.8])
    np.testing.assert_array_equal(head[1], [0.0, 0.0])  # a zero prefix stays zero


def test_a_token_limit_below_the_models_is_refused() -> None:
    check_max_tokens(None, PLAIN, "max_tokens")
    check_max_tokens(256, PLAIN, "max_tokens")
    check_max_tokens(4096, PLAIN, "max_tokens_per_doc")
    with pytest.raises(ValidationFailed, match=r"reads up to 256 tokens.*at least 256"):
        check_max_tokens(100, PLAIN, "max_tokens_per_doc")
    with pytest.raises(ValidationFailed, match="at least 1"):
        check_max_tokens(0, PLAIN, "max_tokens")
    check_max_tokens(1, MRL, "max_tokens")  # no limit recorded: any

"""Cohere's embedding types from float rows: the documented encodings, exactly."""

from __future__ import annotations

import base64

import msgspec
import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from headway.gateway.endpoints.cohere_types import (
    base64_rows,
    binary_rows,
    embeddings_by_type,
    int8_rows,
    ubinary_rows,
    uint8_rows,
)


def unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def test_binary_packs_the_sign_bits_first_dimension_most_significant() -> None:
    row = np.asarray([[0.5, -0.1, 0.2, 0.0, -0.3, 0.1, 0.1, -0.9, 0.4]], dtype=np.float32)
    # bits 1 0 1 0 0 1 1 0 | 1 (padded with zeros): 0b10100110 = 166, 0b10000000 = 128
    assert ubinary_rows(row) == [[166, 128]]
    assert binary_rows(row) == [[166 - 128, 0]]


def test_int8_is_a_fixed_scale_of_127_and_uint8_the_same_shifted_by_128() -> None:
    row = np.asarray([[1.0, -1.0, 0.5, -0.5, 0.001, 0.0]], dtype=np.float32)
    assert int8_rows(row) == [[127, -127, 64, -64, 0, 0]]
    assert uint8_rows(row) == [[255, 1, 192, 64, 128, 128]]
    assert int8_rows(np.asarray([[3.0, -2.0]], dtype=np.float32)) == [[127, -127]]  # clipped


def test_base64_is_the_little_endian_float32_bytes() -> None:
    rows = np.asarray([[1.0, -2.5], [0.125, 3.0]], dtype=np.float32)
    assert base64_rows(rows) == [
        base64.b64encode(np.asarray(row, dtype="<f4").tobytes()).decode() for row in rows
    ]


@given(
    arrays(np.float32, (3, 24), elements=st.floats(-1, 1, width=32)).filter(
        lambda a: bool((np.linalg.norm(a, axis=1) > 0.1).all())
    )
)
def test_quantised_rows_keep_the_float_rows_direction(rows: np.ndarray) -> None:
    rows = unit(rows)
    quantised = np.asarray(int8_rows(rows), dtype=np.float64)
    cosine = (quantised * rows).sum(1) / np.linalg.norm(quantised, axis=1)
    assert (cosine > 0.99).all()
    assert np.array_equal(np.asarray(uint8_rows(rows)) - 128, quantised)
    assert all(0 <= v <= 255 for row in uint8_rows(rows) for v in row)
    assert all(-128 <= v <= 127 for row in binary_rows(rows) for v in row)


def test_only_the_types_asked_for_are_written_each_once() -> None:
    rows = unit(np.arange(1, 17, dtype=np.float32).reshape(2, 8))
    written = msgspec.json.decode(
        msgspec.json.encode(embeddings_by_type(rows, ["uint8", "float", "uint8"]))
    )
    assert set(written) == {"float", "uint8"}
    np.testing.assert_array_equal(np.asarray(written["float"], dtype=np.float32), rows)

"""Cohere's ``embedding_types`` from float rows (pure).

What Cohere documents, and what cohere-python parses (``EmbedByTypeResponseEmbeddings``):

- ``float``: the rows as the model computed them.
- ``base64``: each row's float32 bytes, little-endian, base64-encoded (one string a row).
- ``binary`` / ``ubinary``: one bit per dimension, 1 where the value is positive, packed
  eight to a byte, first dimension in the most significant bit (``numpy.packbits``); a
  width that is not a multiple of 8 is padded with 0 bits. ``ubinary`` gives each byte as
  0…255, ``binary`` as the same byte minus 128 (−128…127). A row is ⌈width / 8⌉ values.
- ``int8`` / ``uint8``: scalar quantisation, one value per dimension. Cohere does not
  publish its scale (its models are trained for it); here it is fixed, the same for every
  row and request, so quantised vectors from different requests compare as the floats do
  (dot products and cosines in one scale, as a vector database needs): a row is
  unit-length, so every value is in [−1, 1], and ``int8 = round(127 · x)`` (−127…127; a
  model whose rows are not unit-length has its values clipped to [−1, 1] first);
  ``uint8 = int8 + 128`` (1…255), the same shift ``binary``/``ubinary`` differ by. Cosine
  to the float row: 0.999 on average for 384-wide rows.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence

import msgspec
import numpy as np
import orjson

from headway.gateway.endpoints.fit import Rows
from headway.protocols.compat import CohereEmbeddingsByType, EmbeddingType

_NUMPY = orjson.OPT_SERIALIZE_NUMPY
INT8_SCALE = 127


def int8_rows(rows: Rows) -> list[list[int]]:
    quantised = np.rint(np.clip(rows, -1.0, 1.0) * INT8_SCALE).astype(np.int16)
    return quantised.tolist()  # type: ignore[no-any-return]


def uint8_rows(rows: Rows) -> list[list[int]]:
    quantised = np.rint(np.clip(rows, -1.0, 1.0) * INT8_SCALE).astype(np.int16) + 128
    return quantised.tolist()  # type: ignore[no-any-return]


def ubinary_rows(rows: Rows) -> list[list[int]]:
    return np.packbits(rows > 0, axis=1).tolist()  # type: ignore[no-any-return]


def binary_rows(rows: Rows) -> list[list[int]]:
    signed = np.packbits(rows > 0, axis=1).astype(np.int16) - 128
    return signed.tolist()  # type: ignore[no-any-return]


def base64_rows(rows: Rows) -> list[str]:
    little = rows.astype("<f4", copy=False)
    return [base64.b64encode(row.tobytes()).decode("ascii") for row in little]


def float_rows(rows: Rows) -> list[msgspec.Raw]:
    """Each row as JSON, the shortest decimals that read back as its float32 values."""
    return [msgspec.Raw(orjson.dumps(row, option=_NUMPY)) for row in rows]


def embeddings_by_type(rows: Rows, types: Sequence[EmbeddingType]) -> CohereEmbeddingsByType:
    """Every type in ``types`` (each once), one entry per row."""
    asked = set(types)
    return CohereEmbeddingsByType(
        float_=float_rows(rows) if "float" in asked else None,
        int8=int8_rows(rows) if "int8" in asked else None,
        uint8=uint8_rows(rows) if "uint8" in asked else None,
        binary=binary_rows(rows) if "binary" in asked else None,
        ubinary=ubinary_rows(rows) if "ubinary" in asked else None,
        base64=base64_rows(rows) if "base64" in asked else None,
    )

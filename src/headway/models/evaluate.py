"""How far a candidate embedding model (e.g. int8) drifts from a reference.

Two numbers a retrieval user cares about, over one set of texts:

- cosine between the two models' embeddings of the same text (mean and min);
- nearest-neighbour agreement: the share of texts whose most similar *other*
  text is the same under both models, i.e. whether search results would change.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from headway.models.backend import Backend

_F32 = npt.NDArray[np.float32]


class ModelComparison(NamedTuple):
    """Agreement of a candidate model with a reference over the same texts."""

    mean_cosine: float
    min_cosine: float
    nn_agreement: float


def compare_embeddings(reference: _F32, candidate: _F32) -> ModelComparison:
    """Compare two ``[n, d]`` embedding matrices row by row (n >= 2)."""
    if reference.shape != candidate.shape or reference.ndim != 2 or len(reference) < 2:
        raise ValueError(f"need two [n>=2, d] matrices, got {reference.shape}, {candidate.shape}")
    ref = _unit_rows(reference)
    cand = _unit_rows(candidate)
    cosines = np.einsum("ij,ij->i", ref, cand)
    return ModelComparison(
        mean_cosine=float(cosines.mean()),
        min_cosine=float(cosines.min()),
        nn_agreement=float(np.mean(_nearest_other(ref) == _nearest_other(cand))),
    )


def compare_models(
    reference: Backend, candidate: Backend, texts: Sequence[str], *, batch_size: int = 32
) -> ModelComparison:
    """Embed ``texts`` with both embedding backends and compare the results."""
    return compare_embeddings(
        embed_all(reference, texts, batch_size), embed_all(candidate, texts, batch_size)
    )


def embed_all(backend: Backend, texts: Sequence[str], batch_size: int = 32) -> _F32:
    """Embeddings of ``texts`` in order, run in batches of similar length."""
    encoded = backend.encode_texts(texts)
    order = sorted(range(len(encoded)), key=lambda i: encoded[i].n_tokens)
    out = np.empty((len(encoded), backend.dimensions), dtype=np.float32)
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        out[rows] = backend.run([encoded[i] for i in rows])
    return out


def _unit_rows(x: _F32) -> npt.NDArray[np.float64]:
    x64 = x.astype(np.float64)
    norms: npt.NDArray[np.float64] = np.linalg.norm(x64, axis=1, keepdims=True)
    return x64 / np.maximum(norms, 1e-12)


def _nearest_other(unit: npt.NDArray[np.float64]) -> npt.NDArray[np.intp]:
    similarity = unit @ unit.T
    np.fill_diagonal(similarity, -np.inf)
    nearest: npt.NDArray[np.intp] = np.argmax(similarity, axis=1)
    return nearest

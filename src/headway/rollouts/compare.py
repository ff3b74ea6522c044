"""How closely a shadow's answer agrees with the primary's answer to the same request.

Embeddings are compared text by text with the cosine of the two vectors (divided by
both norms, so rows need not be normalised; a zero row agrees with nothing: 0). A
request's measure is the mean over its texts.

Rerank scores are compared as rankings: Spearman's rank correlation of the two score
vectors (ties take their average rank), plus whether both put the same document first.
One document ranks the same in both (1.0); a constant vector carries no ranking, so two
constant vectors agree (1.0) and one constant against a ranking does not (0.0).

An answer of another shape than the primary's (other dimensions, other text or
document count) could not stand in for it, so it agrees not at all (0.0, top-1 False).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Agreement:
    """One request's agreement: the measure (mean cosine, or Spearman's rho) and, for
    rerank, whether the top document is the same (None for embeddings)."""

    measure: float
    top1: bool | None


def cosines(primary: npt.ArrayLike, shadow: npt.ArrayLike) -> FloatArray:
    """The cosine of each row of ``primary`` with the same row of ``shadow``."""
    a = np.asarray(primary, dtype=np.float64)
    b = np.asarray(shadow, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 2:
        return np.zeros(a.shape[0] if a.ndim >= 1 else 0, dtype=np.float64)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    dots = np.einsum("ij,ij->i", a, b)
    out = np.zeros(a.shape[0], dtype=np.float64)
    np.divide(dots, norms, out=out, where=norms > 0)
    return out


def embedding_agreement(primary: npt.ArrayLike, shadow: npt.ArrayLike) -> Agreement:
    per_text = cosines(primary, shadow)
    return Agreement(float(per_text.mean()) if per_text.size else 0.0, None)


def average_ranks(values: npt.ArrayLike) -> FloatArray:
    """Ranks 1..n, tied values sharing the mean of the ranks they span."""
    x = np.asarray(values, dtype=np.float64)
    order = np.argsort(x, kind="stable")
    sorted_x = x[order]
    # Each run of equal values gets the mean of its first and last 1-based rank.
    starts = np.flatnonzero(np.r_[True, sorted_x[1:] != sorted_x[:-1]])
    ends = np.r_[starts[1:], x.size]
    run_rank = (starts + 1 + ends) / 2.0
    ranks = np.empty(x.size, dtype=np.float64)
    ranks[order] = np.repeat(run_rank, ends - starts)
    return ranks


def spearman(primary: npt.ArrayLike, shadow: npt.ArrayLike) -> float:
    a = np.asarray(primary, dtype=np.float64)
    b = np.asarray(shadow, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1 or a.size == 0:
        return 0.0
    if a.size == 1:
        return 1.0
    a_constant = bool(np.all(a == a[0]))
    b_constant = bool(np.all(b == b[0]))
    if a_constant or b_constant:
        return 1.0 if a_constant and b_constant else 0.0
    rho = np.corrcoef(average_ranks(a), average_ranks(b))[0, 1]
    return float(np.clip(rho, -1.0, 1.0))


def rerank_agreement(primary: npt.ArrayLike, shadow: npt.ArrayLike) -> Agreement:
    a = np.asarray(primary, dtype=np.float64)
    b = np.asarray(shadow, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1 or a.size == 0:
        return Agreement(0.0, False)
    return Agreement(spearman(a, b), bool(np.argmax(a) == np.argmax(b)))

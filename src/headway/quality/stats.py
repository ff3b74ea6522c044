"""Two-sample statistics: is a window of recent outputs distributed as the reference?

Pure functions (numpy only, no scipy), in float64 whatever comes in. ``mmd2_rbf`` is the
unbiased squared Maximum Mean Discrepancy (Gretton et al., JMLR 2012, eq. 3) with the
Gaussian kernel k(a, b) = exp(−‖a − b‖² / 2σ²)::

    MMD²ᵤ = Σ_{i≠j} k(xᵢ, xⱼ) / m(m−1) + Σ_{i≠j} k(yᵢ, yⱼ) / n(n−1) − 2 Σ k(xᵢ, yⱼ) / mn

Its expectation is 0 exactly when the two distributions are equal (the kernel is
characteristic), so a value near 0 (it may be slightly negative) means no detectable
difference. σ is the median pairwise distance over the pooled sample (``median_bandwidth``,
the median heuristic). ``mmd_test`` relabels the pooled sample at random, the labels being
exchangeable under the null hypothesis: p = (1 + #{permuted ≥ observed}) / (1 +
permutations), never 0 (Phipson & Smyth 2010). The kernel matrix is computed once, and a
block of relabellings is one matrix product, no Python loop over rows. ``ks_test``'s
asymptotic p-value is Q_KS((√nₑ + 0.12 + 0.11/√nₑ)·D) with nₑ = n₁n₂/(n₁+n₂) (Stephens'
correction, as in Numerical Recipes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[np.floating]
_F64 = npt.NDArray[np.float64]

PERMUTATION_BLOCK = 256
"""Permutations evaluated in one matrix product (bounds memory: block × pooled rows)."""
_ROUNDING = 1e-12
"""Relative error of a squared distance from the Gram matrix (float64, a few hundred
dimensions: ~1e-14), with room to spare."""
_TIE = 1e-12
"""A permuted statistic within this of the observed one counts as reaching it: the same
partition summed in another order must not miss by a rounding error."""


@dataclass(frozen=True, slots=True)
class MmdResult:
    statistic: float
    """MMD²ᵤ of the reference against the window (may be slightly negative)."""
    p_value: float
    """In (0, 1]: the permutation p-value; small means the window has moved."""
    bandwidth: float
    """σ of the Gaussian kernel."""


@dataclass(frozen=True, slots=True)
class KsResult:
    statistic: float
    """D = sup |F_reference − F_window|, in [0, 1]."""
    p_value: float
    """In [0, 1]: the asymptotic p-value of D."""


def row_norms(rows: Array) -> _F64:
    """The Euclidean norm of each row (an L2-normalised model gives 1.0 for every row)."""
    norms: _F64 = np.linalg.norm(np.asarray(rows, dtype=np.float64), axis=1)
    return norms


def centroid_drift(reference: Array, window: Array) -> float:
    """1 − cosine between the mean rows of the two samples, in [0, 2]: cheap, but blind to a
    change that keeps the mean. Two zero means have drifted by 0; one zero mean against another
    mean, by 1 (cosine 0)."""
    a = np.asarray(reference, dtype=np.float64).mean(axis=0)
    b = np.asarray(window, dtype=np.float64).mean(axis=0)
    norm_a, norm_b = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if norm_a == 0.0 or norm_b == 0.0:
        return 0.0 if norm_a == norm_b else 1.0
    cosine = float(a @ b) / (norm_a * norm_b)
    return 1.0 - min(1.0, max(-1.0, cosine))


def median_bandwidth(x: Array, y: Array) -> float:
    """The median of the pairwise Euclidean distances over ``x`` and ``y`` pooled. Where
    that is 0 (most pairs are equal rows), the median of the non-zero ones; 1.0 if every
    row is the same, so the kernel stays defined."""
    return _median_of(_squared_distances(_pooled(x, y)))


def mmd2_rbf(x: Array, y: Array, bandwidth: float) -> float:
    """The unbiased MMD² of ``x`` (m rows) and ``y`` (n rows), m, n ≥ 2, with a Gaussian
    kernel of width ``bandwidth``."""
    m, n = _sizes(x, y)
    kernel = _kernel(_squared_distances(_pooled(x, y)), bandwidth)
    np.fill_diagonal(kernel, 0.0)
    s_xx = float(kernel[:m, :m].sum())
    s_yy = float(kernel[m:, m:].sum())
    s_xy = float(kernel[:m, m:].sum())
    return s_xx / (m * (m - 1)) + s_yy / (n * (n - 1)) - 2.0 * s_xy / (m * n)


def mmd_test(
    reference: Array, window: Array, permutations: int, rng: np.random.Generator
) -> MmdResult:
    """MMD²ᵤ of the two samples and its permutation p-value over ``permutations``
    random relabellings of the pooled rows (drawn from ``rng``)."""
    if permutations < 1:
        raise ValueError(f"permutations must be at least 1, not {permutations}")
    m, n = _sizes(reference, window)
    distances = _squared_distances(_pooled(reference, window))
    bandwidth = _median_of(distances)
    kernel = _kernel(distances, bandwidth)
    np.fill_diagonal(kernel, 0.0)
    labels = np.zeros(m + n)
    labels[:m] = 1.0
    observed = float(_mmd2_of_labels(kernel, labels[None, :], m, n)[0])
    reached = 0
    for start in range(0, permutations, PERMUTATION_BLOCK):
        block = min(PERMUTATION_BLOCK, permutations - start)
        relabelled = rng.permuted(np.tile(labels, (block, 1)), axis=1)
        reached += int(
            np.count_nonzero(_mmd2_of_labels(kernel, relabelled, m, n) >= observed - _TIE)
        )
    return MmdResult(observed, (1 + reached) / (1 + permutations), bandwidth)


def ks_test(reference_scores: Array, window_scores: Array) -> KsResult:
    """The two-sample Kolmogorov–Smirnov test of two non-empty 1-D samples."""
    a = np.sort(np.asarray(reference_scores, dtype=np.float64).ravel())
    b = np.sort(np.asarray(window_scores, dtype=np.float64).ravel())
    if a.size == 0 or b.size == 0:
        raise ValueError("the KS test needs at least one score in each sample")
    at = np.concatenate((a, b))
    cdf_a = np.searchsorted(a, at, side="right") / a.size
    cdf_b = np.searchsorted(b, at, side="right") / b.size
    statistic = float(np.max(np.abs(cdf_a - cdf_b)))
    root = math.sqrt(a.size * b.size / (a.size + b.size))
    return KsResult(statistic, kolmogorov_sf((root + 0.12 + 0.11 / root) * statistic))


def kolmogorov_sf(lam: float) -> float:
    """Q_KS(λ) = 2 Σ_{j≥1} (−1)^{j−1} exp(−2j²λ²), the probability that the Kolmogorov
    distribution exceeds λ. Below λ = 1.18 that series converges slowly, so there its
    Jacobi-transformed twin is summed instead: 1 − (√(2π)/λ) Σ_{j≥1}
    exp(−(2j−1)²π²/8λ²). Four terms of either are exact to double precision."""
    if lam <= 0.0:
        return 1.0
    if lam < 1.18:
        y = math.exp(-(math.pi**2) / (8.0 * lam * lam))
        cdf = math.sqrt(2.0 * math.pi) / lam * sum(y ** ((2 * j - 1) ** 2) for j in range(1, 5))
        return min(1.0, max(0.0, 1.0 - cdf))
    x = math.exp(-2.0 * lam * lam)
    terms = (x ** (j * j) if j % 2 else -(x ** (j * j)) for j in range(1, 5))
    return min(1.0, max(0.0, 2.0 * sum(terms)))


def _sizes(x: Array, y: Array) -> tuple[int, int]:
    m, n = len(x), len(y)
    if m < 2 or n < 2:
        raise ValueError(f"MMD needs at least 2 rows in each sample, not {m} and {n}")
    return m, n


def _pooled(x: Array, y: Array) -> _F64:
    return np.concatenate((np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)))


def _squared_distances(z: _F64) -> _F64:
    """‖zᵢ − zⱼ‖² for every pair, from one Gram matrix: ‖zᵢ‖² + ‖zⱼ‖² − 2zᵢ·zⱼ. That
    difference of large terms is off by a few ulps of ‖zᵢ‖² + ‖zⱼ‖², so what is within
    ``_ROUNDING`` of it is 0: equal rows must be at distance 0, or their rounding noise
    would become the median bandwidth. Centring first (distances do not change) keeps
    the terms, and so the error, as small as the spread of the rows."""
    z = z - z.mean(axis=0)
    sq = np.einsum("ij,ij->i", z, z)
    scale = sq[:, None] + sq[None, :]
    distances: _F64 = scale - 2.0 * (z @ z.T)
    distances[distances <= _ROUNDING * scale] = 0.0
    np.fill_diagonal(distances, 0.0)
    return distances


def _median_of(squared: _F64) -> float:
    above = squared[np.triu_indices(len(squared), k=1)]
    if above.size == 0:
        return 1.0
    median = float(np.median(above))
    if median == 0.0:  # most pairs are equal rows: the scale is that of the others
        apart = above[above > 0.0]
        median = float(np.median(apart)) if apart.size else 0.0
    return math.sqrt(median) if median > 0.0 else 1.0


def _kernel(squared: _F64, bandwidth: float) -> _F64:
    if not bandwidth > 0.0:
        raise ValueError(f"the kernel bandwidth must be positive, not {bandwidth}")
    with np.errstate(over="ignore", divide="ignore"):  # exp(−∞) = 0: far apart
        kernel: _F64 = np.exp(squared / (-2.0 * bandwidth * bandwidth))
    return kernel


def _mmd2_of_labels(kernel: _F64, labels: _F64, m: int, n: int) -> _F64:
    """MMD²ᵤ for each row of ``labels`` (1: the row is in x, 0: in y), ``kernel`` K₀ with a
    zero diagonal. With a a row of labels, r = K₀·1 and T = 1ᵀK₀1: sₓₓ = aᵀK₀a,
    sₓᵧ = aᵀr − sₓₓ, sᵧᵧ = T − sₓₓ − 2sₓᵧ, for a whole block in one matrix product."""
    row_sums = kernel.sum(axis=1)
    total = float(row_sums.sum())
    s_xx = np.einsum("pn,pn->p", labels @ kernel, labels)
    s_xy = labels @ row_sums - s_xx
    s_yy = total - s_xx - 2.0 * s_xy
    result: _F64 = s_xx / (m * (m - 1)) + s_yy / (n * (n - 1)) - 2.0 * s_xy / (m * n)
    return result

"""Model quality: a sample of what each version computed, for drift (``quality/``).

Only rows the model computed for this request are seen (never the cache's: they say
nothing new, and were seen when computed); embeddings for their norm and place,
rerank scores for their distribution. Microseconds: most requests sample no row.

The shadow copy's rows (``stages/shadow.py``) come here too, under the candidate's
version and marked ``shadow``: a candidate's reference is taken when it first runs as a
shadow, and its drift is known before it serves anyone.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import numpy.typing as npt

from headway.gateway.stages.merge import Merged


class QualitySampler(Protocol):
    """Where a version's outputs are sampled (``quality.monitor.QualityMonitor``)."""

    def observe_embeddings(
        self, version: str, rows: npt.NDArray[np.float32], *, shadow: bool = False
    ) -> None: ...

    def observe_scores(
        self, version: str, scores: npt.NDArray[np.float32], *, shadow: bool = False
    ) -> None: ...


def watch_quality(
    quality: QualitySampler, version: str, merged: Merged, *, shadow: bool = False
) -> None:
    """``merged``: what ``version`` computed for a request, embeddings (rows) or relevance
    scores (one per document), whatever route it came by; ``shadow``: for a shadow copy,
    not for the client."""
    if merged.values.ndim == 2:
        quality.observe_embeddings(version, merged.values, shadow=shadow)
    else:
        quality.observe_scores(version, merged.values, shadow=shadow)

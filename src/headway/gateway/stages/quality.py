"""Model quality: a sample of what each version computed, for drift (``quality/``).

Only rows the model computed for this request are seen (never the cache's: they say
nothing new, and were seen when computed); embeddings for their norm and place,
rerank scores for their distribution. Microseconds: most requests sample no row.
"""

from __future__ import annotations

from headway.gateway.stages.merge import Merged
from headway.quality.monitor import QualityMonitor


def watch_quality(quality: QualityMonitor, route: str, version: str, merged: Merged) -> None:
    if route == "rerank":
        quality.observe_scores(version, merged.values)
    else:
        quality.observe_embeddings(version, merged.values)

"""Which pools ``headway up`` starts with it: the rerank pool only with a cross-encoder to
serve (without one rerank is scored on the embed pool and its worker would serve nothing)."""

import pytest

from headway.registry.model import ModelRecord, Snapshot
from headway.settings import load_settings
from headway.up.supervisor import holds_cross_encoder, prewarmed_pools

MINILM = ModelRecord("e" * 64, "all-MiniLM-L6-v2", "embedding", 384, "none")
RERANKER = ModelRecord("c" * 64, "tiny-reranker", "cross-encoder", 1, "none")
COUNTS = {"embed": 2, "rerank": 1}


def settings(**flags: object):
    return load_settings(flags=flags)


@pytest.mark.parametrize(
    ("flags", "cross_encoders", "counts", "started"),
    [
        ({}, True, COUNTS, {"embed", "rerank"}),
        ({}, False, COUNTS, {"embed"}),
        ({}, True, {"embed": 1, "rerank": 0}, {"embed"}),
        ({"up": {"prewarm": False}}, True, COUNTS, set()),
        # A cold pool would keep the gateways unready: started whatever it serves.
        ({"gateway": {"cold_start_hold": False}}, False, COUNTS, {"embed", "rerank"}),
    ],
)
def test_the_pools_started_with_up(flags, cross_encoders, counts, started) -> None:
    assert prewarmed_pools(settings(**flags), counts, cross_encoders) == started


def test_a_cross_encoder_counts_only_under_an_alias() -> None:
    assert holds_cross_encoder(Snapshot(models={"rerank": RERANKER, RERANKER.version: RERANKER}))
    assert not holds_cross_encoder(Snapshot(models={"minilm": MINILM, MINILM.version: MINILM}))
    # A version no alias names is served by no worker of the pool's kind.
    assert not holds_cross_encoder(Snapshot(models={RERANKER.version: RERANKER}))

"""Which pool a request's checks go by before a replica is asked: a cross-encoder's is the
rerank pool, any other model's the embed pool, so rerank by cosine never waits for (nor
wakes) a rerank pool that serves no cross-encoder."""

import random

import pytest

from headway.gateway.admission.controller import AdmissionConfig
from headway.gateway.pool import ReplicaPool
from headway.gateway.pools import Pools
from headway.registry.model import ModelRecord, Snapshot
from headway.transport.base import Reply, UpstreamRequest
from headway.transport.mock import MockTransport
from tests.fakes import FakeClock

MINILM = ModelRecord("e" * 64, "all-MiniLM-L6-v2", "embedding", 384, "none")
RERANKER = ModelRecord("c" * 64, "tiny-reranker", "cross-encoder", 1, "none")


def never_asked(request: UpstreamRequest) -> Reply:
    raise AssertionError(f"a pool without replicas asked {request.base_url}")


def pool(name: str) -> ReplicaPool:
    return ReplicaPool(
        name,
        (),
        MockTransport(never_asked),
        health_interval_s=1,
        admission=AdmissionConfig(),
        clock=FakeClock(),
        rng=random.Random(0),
    )


def snapshot(**aliases: ModelRecord) -> Snapshot:
    models = {alias: record for alias, record in aliases.items()}
    models |= {record.version: record for record in aliases.values()}
    return Snapshot(models=models)


@pytest.fixture
def both() -> Pools:
    return Pools({"embed": pool("embed"), "rerank": pool("rerank")})


def test_rerank_goes_by_the_rerank_alias(both: Pools) -> None:
    assert both.for_route("rerank", snapshot(rerank=RERANKER)) is both["rerank"]
    # No rerank alias (it falls back to the embedding model), or one on an embedding model.
    assert both.for_route("rerank", snapshot(minilm=MINILM)) is both["embed"]
    assert both.for_route("rerank", snapshot(rerank=MINILM)) is both["embed"]
    assert both.for_route("embeddings", snapshot(rerank=RERANKER)) is both["embed"]


def test_an_alias_of_another_name_is_read_for_rerank() -> None:
    pools = Pools({"embed": pool("embed"), "rerank": pool("rerank")}, rerank_alias="ce")
    assert pools.for_route("rerank", snapshot(ce=RERANKER)) is pools["rerank"]
    assert pools.for_route("rerank", snapshot(rerank=RERANKER)) is pools["embed"]


def test_the_first_model_known_names_the_pool(both: Pools) -> None:
    known = snapshot(rerank=RERANKER, minilm=MINILM)
    assert both.for_models(["missing", "rerank", "minilm"], known) is both["rerank"]
    assert both.for_models(["minilm", "rerank"], known) is both["embed"]
    assert both.for_models([RERANKER.version], known) is both["rerank"]
    assert both.for_models(["missing"], known) is both["embed"]


def test_without_a_rerank_pool_everything_goes_to_embed() -> None:
    embed_only = Pools({"embed": pool("embed")})
    assert embed_only.for_record(RERANKER) is embed_only["embed"]
    assert embed_only.for_route("rerank", snapshot(rerank=RERANKER)) is embed_only["embed"]
    assert Pools({}).for_record(MINILM) is None

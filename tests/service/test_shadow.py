"""Shadow traffic on the request path: compared with the primary, never billed, never
charged to the tenant's quota, never waited for, only in spare room, and sampled for the
candidate's model quality."""

from __future__ import annotations

import re

from headway.catalog import synthetic_record
from headway.control.console import api
from headway.control.console.routes import parts_of
from headway.metering.sink import MemorySink
from headway.registry.model import Shadow, Split
from headway.settings import ObservabilitySettings, QualitySettings
from tests.fakes import until
from tests.service.conftest import SYNTHETIC, auth, make_stack

PRIMARY = synthetic_record(SYNTHETIC).version
CANDIDATE = synthetic_record(SYNTHETIC.model_copy(update={"seed": 1})).version
TWO_TEXTS = {"model": "synthetic", "input": ["alpha beta", "gamma delta"]}


def shadow_count(metrics: str, outcome: str) -> float:
    pattern = rf'^headway_shadow_requests_total\{{[^}}]*outcome="{outcome}"[^}}]*\}} (\S+)$'
    return sum(float(m[1]) for m in re.finditer(pattern, metrics, re.MULTILINE))


def agreement_mean(metrics: str) -> float:
    total = re.search(r"^headway_shadow_agreement_sum\{[^}]*\} (\S+)$", metrics, re.MULTILINE)
    count = re.search(r"^headway_shadow_agreement_count\{[^}]*\} (\S+)$", metrics, re.MULTILINE)
    assert total and count
    return float(total[1]) / float(count[1])


async def test_copies_are_compared_and_never_billed_or_charged(tmp_path):
    sink = MemorySink()
    stack = await make_stack(tmp_path, metering=sink, seeds=(0, 1))
    try:
        # Exactly 4 requests of 2 texts fit this bucket: a charged copy would make a 429.
        stack.registry.add_tenant(
            "tight", "interactive", rate_texts_per_s=0.001, burst_texts=8, key="tight-key"
        )
        stack.registry.set_split(
            Split("synthetic", ((PRIMARY, 1.0),), shadow=Shadow(CANDIDATE, 1.0))
        )
        await stack.gateway.snapshots.refresh()
        for sent in range(1, 5):
            reply = await stack.client.post(
                "/v1/embeddings", json=TWO_TEXTS, headers=auth("tight-key")
            )
            assert reply.status_code == 200, reply.text
            assert reply.headers["x-model-version"] == PRIMARY
            # One copy at a time: a worker still running the last copy refuses the next.
            await until(lambda n=sent: shadow_count(stack.metrics(), "compared") == n)
        assert [event.version for event in sink.events] == [PRIMARY] * 4
        # Another seed is another model: its vectors are independent of the primary's.
        assert abs(agreement_mean(stack.metrics())) < 0.5
        over = await stack.client.post("/v1/embeddings", json=TWO_TEXTS, headers=auth("tight-key"))
        assert over.status_code == 429  # the bucket held exactly the primaries' texts
    finally:
        await stack.close()


async def test_a_copy_larger_than_the_spare_room_is_skipped(tmp_path):
    # A limit of 8 texts and the default shadow share of 0.5: 4 texts of spare room.
    stack = await make_stack(tmp_path, seeds=(0, 1), admission={"static_limit_texts": 8})
    try:
        stack.registry.set_split(
            Split("synthetic", ((PRIMARY, 1.0),), shadow=Shadow(CANDIDATE, 1.0))
        )
        await stack.gateway.snapshots.refresh()
        six = {"model": "synthetic", "input": [f"text {i}" for i in range(6)]}
        assert (
            await stack.client.post("/v1/embeddings", json=six, headers=auth())
        ).status_code == 200
        assert (
            await stack.client.post("/v1/embeddings", json=TWO_TEXTS, headers=auth())
        ).status_code == 200
        await until(lambda: shadow_count(stack.metrics(), "compared") == 1)
        assert shadow_count(stack.metrics(), "skipped") == 1
    finally:
        await stack.close()


async def test_a_weighted_split_serves_each_version_whole_and_echoes_it(tmp_path):
    stack = await make_stack(tmp_path, seeds=(0, 1))
    try:
        stack.registry.set_split(
            Split("synthetic", ((PRIMARY, 1.0), (CANDIDATE, 1.0)), sticky="none")
        )
        await stack.gateway.snapshots.refresh()
        seen = set()
        for _ in range(40):
            reply = await stack.client.post("/v1/embeddings", json=TWO_TEXTS, headers=auth())
            assert reply.status_code == 200
            seen.add(reply.headers["x-model-version"])
        assert seen == {PRIMARY, CANDIDATE}
    finally:
        await stack.close()


async def test_the_candidates_copies_are_sampled_for_its_quality_as_shadow_traffic(tmp_path):
    every_row = QualitySettings(sample_share=1.0, reference_size=16, window_size=16)
    stack = await make_stack(
        tmp_path, seeds=(0, 1), observability=ObservabilitySettings(quality=every_row)
    )
    try:
        stack.registry.set_split(
            Split("synthetic", ((PRIMARY, 1.0),), shadow=Shadow(CANDIDATE, 1.0))
        )
        await stack.gateway.snapshots.refresh()
        for sent in range(1, 11):
            texts = {"model": "synthetic", "input": [f"text {sent} a", f"text {sent} b"]}
            reply = await stack.client.post("/v1/embeddings", json=texts, headers=auth())
            assert reply.status_code == 200, reply.text
            await until(lambda n=sent: shadow_count(stack.metrics(), "compared") == n)
        documents = ["pump vibration", "invoice overdue", "seal leaked"]
        reranked = await stack.client.post(
            "/v1/rerank",
            json={"model": "synthetic", "query": "pump", "documents": documents},
            headers=auth("demo-key-support-bot"),
        )
        assert reranked.status_code == 200, reranked.text
        await until(lambda: shadow_count(stack.metrics(), "compared") == 11)
        monitor = stack.gateway.quality
        await monitor.evaluate()
        seen = {(q.version, q.kind): q for q in monitor.summary()}
        assert set(seen) == {(v, k) for v in (PRIMARY, CANDIDATE) for k in ("embedding", "rerank")}
        candidate, primary = seen[CANDIDATE, "embedding"], seen[PRIMARY, "embedding"]
        assert (candidate.traffic, primary.traffic) == ("shadow", "served")
        # 20 rows each: the reference full (and stored), then the window.
        for quality in (candidate, primary):
            assert (quality.reference_rows, quality.window_rows) == (16, 4)
            assert quality.reference_taken_at is not None and quality.mean_norm is not None
        scores = seen[CANDIDATE, "rerank"]
        assert (scores.traffic, scores.reference_rows) == ("shadow", 3)
        labels = {"version": CANDIDATE[:12], "kind": "embedding"}
        registry = stack.gateway.metrics.registry
        assert registry.get_sample_value("headway_quality_reference_rows", labels) == 16
        shown = (await api.models_view(parts_of(stack.gateway, stack.usage_ledger)))["quality"]
        assert {(q["version"], q["kind"]): q["traffic"] for q in shown} == {
            (PRIMARY[:12], "embedding"): "served",
            (PRIMARY[:12], "rerank"): "served",
            (CANDIDATE[:12], "embedding"): "shadow",
            (CANDIDATE[:12], "rerank"): "shadow",
        }
    finally:
        await stack.close()

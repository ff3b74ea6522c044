"""RED per route, tenant and version; replica states and ejections; worker durations."""

import asyncio

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from headway.catalog import synthetic_record
from headway.gateway.metrics import GatewayMetrics
from headway.settings import AdmissionSettings
from tests.fakes import until
from tests.service.conftest import SYNTHETIC, WORKER_URLS, auth, make_stack
from tests.service.test_admission import Gate
from tests.service.test_routing import broken_worker

TINY = "tiny-key"


def samples(exposition: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    found = {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            if sample.name == name:
                found[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def labelled(**labels: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


async def embed(stack, key, texts=1):
    return await stack.client.post(
        "/v1/embeddings",
        headers=auth(key),
        json={"model": "synthetic", "input": [f"text {i}" for i in range(texts)]},
    )


async def test_each_model_request_is_counted_by_tenant_tier_version_and_outcome(tmp_path):
    gate = Gate()
    admission = AdmissionSettings(static_limit_texts=10, batch_share=0.5)
    stack = await make_stack(tmp_path, sleep=gate.sleep, admission=admission)
    stack.registry.add_tenant("tiny", "interactive", rate_texts_per_s=0.01, burst_texts=2, key=TINY)
    await stack.gateway.snapshots.refresh()
    version = synthetic_record(SYNTHETIC).version[:12]
    pool = stack.gateway.pools["embed"]
    try:
        held = asyncio.ensure_future(embed(stack, "demo-key-search-app", texts=5))
        await until(lambda: not (pool.admission.outstanding < 5))
        assert (await embed(stack, "demo-key-nightly-index")).status_code == 503  # batch share
        gate.open.set()
        assert (await held).status_code == 200
        assert (await embed(stack, TINY, texts=2)).status_code == 200
        assert (await embed(stack, TINY, texts=2)).status_code == 429
        assert (await embed(stack, "not-a-key")).status_code == 401
        exposition = stack.metrics()
    finally:
        gate.open.set()
        await stack.close()
    counted = samples(exposition, "headway_model_requests_total")
    route = {"route": "embeddings"}
    expected = {
        labelled(
            **route, tenant="search-app", tier="interactive", version=version, outcome="ok"
        ): 1,
        labelled(**route, tenant="tiny", tier="interactive", version=version, outcome="ok"): 1,
        labelled(
            **route, tenant="tiny", tier="interactive", version=version, outcome="quota_exceeded"
        ): 1,
        labelled(
            **route, tenant="nightly-index", tier="batch", version="none", outcome="overloaded"
        ): 1,
    }
    assert counted == expected  # a stranger is refused by the edge, before the model path
    refused = samples(exposition, "headway_requests_total")
    assert refused[labelled(code="401", route="embeddings")] == 1
    latency = samples(exposition, "headway_model_request_seconds_count")
    assert latency == {
        labelled(**route, tenant="search-app", version=version): 1,
        labelled(**route, tenant="tiny", version=version): 1,
    }  # answered ok only: a refusal's speed says nothing of the model
    assert samples(exposition, "headway_latency_budget_seconds") == {labelled(pool="embed"): 0.5}


def test_tenants_beyond_the_label_limit_share_other():
    metrics = GatewayMetrics(CollectorRegistry(), max_tenant_labels=2)
    for tenant in ("a", "b", "c", "d", "a"):
        metrics.model_answered("embeddings", tenant, "interactive", "v" * 64, "ok", 0.01)
        metrics.served("embeddings", tenant, 1)
    exposition = generate_latest(metrics.registry).decode()
    by_tenant = {
        dict(key)["tenant"]: value
        for key, value in samples(exposition, "headway_model_requests_total").items()
    }
    assert by_tenant == {"a": 2, "b": 1, "other": 2}
    texts = samples(exposition, "headway_texts_total")
    assert {dict(key)["tenant"] for key in texts} == {"a", "b", "other"}


async def test_replica_states_and_ejections_are_exported(tmp_path):
    stack = await make_stack(tmp_path)
    pool = stack.gateway.pools["embed"]
    stack.transport.apps[WORKER_URLS[0]] = broken_worker(stack.worker_apps[WORKER_URLS[1]])
    try:
        for _ in range(30):  # enough failures to eject it (see test_routing)
            await embed(stack, "demo-key-search-app")
        assert pool.state(pool.replicas[0]) == "ejected"
        exposition = stack.metrics()
    finally:
        await stack.close()
    states = {
        dict(key)["replica"]: dict(key)["state"]
        for key, value in samples(exposition, "headway_replica_state").items()
        if value == 1
    }
    assert states == {WORKER_URLS[0]: "ejected", WORKER_URLS[1]: "ready"}
    assert samples(exposition, "headway_replica_ejections_total") == {labelled(pool="embed"): 1}


async def test_workers_export_queue_tokenize_batch_token_and_padding_histograms(tmp_path):
    stack = await make_stack(tmp_path)
    try:
        for texts in (1, 3):
            assert (await embed(stack, "demo-key-search-app", texts)).status_code == 200
        expositions = [
            generate_latest(worker.metrics.registry).decode() for worker in stack.workers.values()
        ]
    finally:
        await stack.close()

    def total(name: str) -> float:
        return sum(sum(samples(each, name).values()) for each in expositions)

    for name in (
        "headway_worker_queue_seconds_count",
        "headway_worker_tokenize_seconds_count",
        "headway_worker_batch_tokens_count",
        "headway_worker_padding_ratio_count",
    ):
        assert total(name) >= 2, name
    assert 0 < total("headway_worker_tokens_total") <= total("headway_worker_padded_tokens_total")

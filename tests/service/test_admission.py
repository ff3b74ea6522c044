"""Admission control in the request path: refusals are fast 503s, admitted work succeeds."""

import asyncio
import threading

from headway.settings import AdmissionSettings
from headway.worker.batcher import BatchLimits
from tests.fakes import until
from tests.service.conftest import auth, make_stack


class Gate:
    """A model that blocks until the test opens the gate (the warm-up batch passes)."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.calls = 0

    def sleep(self, seconds: float) -> None:
        self.calls += 1
        if self.calls > 2:  # one warm-up per worker
            assert self.open.wait(10)


async def embed(stack, key, n_texts=4):
    return await stack.client.post(
        "/v1/embeddings",
        headers=auth(key),
        json={"model": "synthetic", "input": [f"text {i}" for i in range(n_texts)]},
    )


async def test_saturated_pool_sheds_with_retry_after_while_admitted_work_succeeds(tmp_path):
    gate = Gate()
    admission = AdmissionSettings(static_limit_texts=12)
    stack = await make_stack(tmp_path, sleep=gate.sleep, admission=admission)
    try:
        admitted = [asyncio.ensure_future(embed(stack, "demo-key-search-app")) for _ in range(3)]
        pool = stack.gateway.pools["embed"]
        await until(lambda: not (pool.admission.outstanding < 12))
        refused = await embed(stack, "demo-key-support-bot")
        assert refused.status_code == 503
        assert refused.json()["error"]["type"] == "overloaded"
        assert "pool_full" in refused.json()["error"]["message"]
        assert int(refused.headers["retry-after"]) >= 1
        gate.open.set()
        assert [r.status_code for r in await asyncio.gather(*admitted)] == [200, 200, 200]
        assert pool.admission.outstanding == 0
        assert (await embed(stack, "demo-key-support-bot")).status_code == 200
        metrics = (await stack.ops.get("/metrics")).text
        assert 'headway_shed_total{pool="embed",reason="pool_full"} 1.0' in metrics
        assert 'headway_admission_limit_texts{pool="embed"} 12.0' in metrics
    finally:
        gate.open.set()
        await stack.close()


async def test_batch_tenant_is_shed_before_interactive(tmp_path):
    gate = Gate()
    admission = AdmissionSettings(static_limit_texts=10, batch_share=0.5)
    stack = await make_stack(tmp_path, sleep=gate.sleep, admission=admission)
    try:
        held = asyncio.ensure_future(embed(stack, "demo-key-search-app", n_texts=5))
        pool = stack.gateway.pools["embed"]
        await until(lambda: not (pool.admission.outstanding < 5))
        batch = await embed(stack, "demo-key-nightly-index", n_texts=1)
        assert batch.status_code == 503
        assert "batch_share" in batch.json()["error"]["message"]
        interactive = asyncio.ensure_future(embed(stack, "demo-key-support-bot", n_texts=5))
        await until(lambda: not (pool.admission.outstanding < 10))
        gate.open.set()
        assert (await held).status_code == 200
        assert (await interactive).status_code == 200
    finally:
        gate.open.set()
        await stack.close()


async def test_with_admission_off_nothing_is_shed(tmp_path):
    gate = Gate()
    admission = AdmissionSettings(enabled=False, static_limit_texts=4)
    stack = await make_stack(tmp_path, sleep=gate.sleep, admission=admission)
    try:
        requests = [asyncio.ensure_future(embed(stack, "demo-key-search-app")) for _ in range(5)]
        pool = stack.gateway.pools["embed"]
        await until(lambda: not (pool.admission.outstanding < 20))
        gate.open.set()
        assert [r.status_code for r in await asyncio.gather(*requests)] == [200] * 5
    finally:
        gate.open.set()
        await stack.close()


async def test_a_passed_deadline_is_504_and_the_worker_drops_the_abandoned_chunk(tmp_path):
    gate = Gate()
    # One chunk per model call, so chunks that are not running wait in the queue.
    stack = await make_stack(tmp_path, sleep=gate.sleep, limits=BatchLimits(max_batch_size=4))
    try:
        holder = asyncio.ensure_future(embed(stack, "demo-key-search-app"))  # occupies a worker
        pool = stack.gateway.pools["embed"]
        await until(lambda: pool.admission.outstanding > 0)
        late = await stack.client.post(
            "/v1/embeddings",
            headers=auth("demo-key-support-bot") | {"x-timeout-ms": "50"},
            json={"model": "synthetic", "input": ["x"] * 40},  # three chunks, both workers
        )
        assert late.status_code == 504
        assert late.json()["error"]["type"] == "deadline_exceeded"
        assert pool.admission.outstanding == 4  # the 504's permit was released
        gate.open.set()
        assert (await holder).status_code == 200

        def dropped() -> float:
            return sum(
                w.metrics.registry.get_sample_value(
                    "headway_worker_dropped_texts_total", {"pool": "embed", "reason": "caller_left"}
                )
                or 0.0
                for w in stack.workers.values()
            )

        await until(lambda: dropped() > 0)
    finally:
        gate.open.set()
        await stack.close()

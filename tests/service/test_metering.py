"""One usage event per request that did work, written before the answer leaves."""

from __future__ import annotations

import asyncio

from headway.metering.event import UsageEvent
from headway.metering.sink import MemorySink
from headway.registry.keys import key_digest
from headway.settings import AdmissionSettings
from tests.fakes import until
from tests.service.conftest import auth, make_stack
from tests.service.test_admission import Gate

KEY = "demo-key-search-app"


async def embed(stack, texts, key=KEY, model="synthetic"):
    return await stack.client.post(
        "/v1/embeddings", headers=auth(key), json={"model": model, "input": texts}
    )


async def test_a_served_request_has_one_billable_event_with_real_tokens(tmp_path):
    sink = MemorySink()
    stack = await make_stack(tmp_path, metering=sink)
    try:
        texts = ["one two three", "four"]
        response = await embed(stack, texts)
        assert response.status_code == 200
        [event] = sink.events
        assert event.request_id == response.headers["x-request-id"]
        assert (event.tenant, event.tier, event.endpoint) == (
            "search-app",
            "interactive",
            "embeddings",
        )
        assert event.tenant_id == stack.registry.tenant("search-app").id
        assert event.key_id == key_digest(KEY)[:8].hex()
        assert KEY not in repr(event)
        assert event.alias == "synthetic"
        assert event.version == response.headers["x-model-version"]
        assert event.texts == 2
        assert event.tokens == response.json()["usage"]["total_tokens"] > 0
        assert event.billable and event.outcome == "served"
        assert event.gateway_id == "gw-test"
        assert event.total_s >= event.queue_s >= 0 and event.inference_s >= 0
    finally:
        await stack.close()


async def test_a_request_named_by_version_is_billed_under_its_models_name(tmp_path):
    sink = MemorySink()
    stack = await make_stack(tmp_path, metering=sink)
    try:
        version = (await embed(stack, ["a"])).headers["x-model-version"]
        assert (await embed(stack, ["b"], model=version)).status_code == 200
        assert [e.alias for e in sink.events] == ["synthetic", "synthetic"]
    finally:
        await stack.close()


async def test_the_answer_waits_until_the_event_is_durable(tmp_path):
    class SlowSink(MemorySink):
        def __init__(self) -> None:
            super().__init__()
            self.writing, self.durable = asyncio.Event(), asyncio.Event()

        async def record(self, event: UsageEvent) -> None:
            self.writing.set()
            await self.durable.wait()
            await super().record(event)

    sink = SlowSink()
    stack = await make_stack(tmp_path, metering=sink)
    try:
        answer = asyncio.ensure_future(embed(stack, ["a"]))
        await asyncio.wait_for(sink.writing.wait(), 5)
        await asyncio.sleep(0.05)  # give a premature answer every chance to come out
        assert not answer.done()
        sink.durable.set()
        assert (await answer).status_code == 200
        assert len(sink.events) == 1
    finally:
        sink.durable.set()
        await stack.close()


async def test_client_errors_and_shed_work_leave_no_event_and_our_failures_a_not_billable_one(
    tmp_path,
):
    gate = Gate()
    sink = MemorySink()
    stack = await make_stack(
        tmp_path, metering=sink, sleep=gate.sleep, admission=AdmissionSettings(static_limit_texts=4)
    )
    try:
        assert (await embed(stack, [""] * 0)).status_code == 422
        assert (await embed(stack, ["a"], model="no-such-model")).status_code == 404
        assert sink.events == []
        holder = asyncio.ensure_future(embed(stack, ["a"] * 3, key="demo-key-support-bot"))
        pool = stack.gateway.pools["embed"]
        await until(lambda: pool.admission.outstanding == 3)
        shed = await embed(stack, ["b"] * 2)  # past the precheck, charged, refused: refunded
        assert shed.status_code == 503
        assert sink.events == []  # nothing was sent to a worker: nothing to record
        late = await stack.client.post(
            "/v1/embeddings",
            headers={**auth(KEY), "X-Timeout-Ms": "50"},
            json={"model": "synthetic", "input": ["c"]},
        )
        assert late.status_code == 504  # sent, waited on, given up: our failure
        gate.open.set()
        assert (await holder).status_code == 200
        refunded = [e for e in sink.events if not e.billable]
        assert [(e.request_id, e.outcome, e.tokens) for e in refunded] == [
            (late.headers["x-request-id"], "deadline_exceeded", 0)
        ]
        assert [e.tenant for e in sink.events if e.billable] == ["support-bot"]
    finally:
        gate.open.set()
        await stack.close()


async def test_a_full_outbox_refuses_work_before_it_runs(tmp_path):
    sink = MemorySink()
    stack = await make_stack(tmp_path, metering=sink)
    try:
        sink.full = True
        refused = await embed(stack, ["a"])
        assert refused.status_code == 503
        assert refused.json()["error"]["type"] == "metering_unavailable"
        assert "retry-after" in refused.headers
        assert sink.events == []
        sink.full = False
        assert (await embed(stack, ["a"])).status_code == 200
    finally:
        await stack.close()


async def test_an_event_that_cannot_be_written_fails_the_request_with_503(tmp_path):
    class BrokenSink(MemorySink):
        async def record(self, event: UsageEvent) -> None:
            raise OSError("disk full")

    stack = await make_stack(tmp_path, metering=BrokenSink())
    try:
        response = await embed(stack, ["a"])
        assert response.status_code == 503
        assert response.json()["error"]["type"] == "metering_unavailable"
        assert "disk full" not in response.text
    finally:
        await stack.close()


async def test_served_requests_reach_the_ledger_through_the_outbox_once(tmp_path):
    """The embedded chain, in process: gateway → outbox → consumer → ledger → /v1/usage."""
    from headway.billing.consumer import Consumer
    from headway.billing.ledger.sqlite import SQLiteLedger
    from headway.billing.sources.outbox import OutboxSource
    from headway.metering.build import OutboxMetering
    from headway.metering.outbox import Outbox

    outbox_dir = tmp_path / "outbox"
    outbox_dir.mkdir()
    ledger = await SQLiteLedger.open(tmp_path / "ledger.sqlite3")
    metering = OutboxMetering(Outbox(outbox_dir / "gw-test.sqlite3"), relay=None)
    stack = await make_stack(tmp_path, metering=metering, ledger=ledger)
    source = OutboxSource(outbox_dir)
    try:
        answers = await asyncio.gather(*(embed(stack, [f"text {i}", "x"]) for i in range(20)))
        assert {a.status_code for a in answers} == {200}
        assert metering.outbox.depth == 20 and metering.outbox.commits < 20  # grouped fsyncs
        consumer = Consumer(source, ledger, batch_events=7)
        while await consumer.step() is not None:
            pass
        ids = await ledger.processed_ids()
        assert set(ids) == {a.headers["x-request-id"] for a in answers}
        usage = await stack.client.get("/v1/usage", params={"start": "2026-01-01"}, headers=auth())
        assert sum(row["requests"] for row in usage.json()["data"]) == 20
        tokens = sum(a.json()["usage"]["total_tokens"] for a in answers)
        assert sum(row["tokens"] for row in usage.json()["data"]) == tokens
    finally:
        await source.close()
        await stack.close()

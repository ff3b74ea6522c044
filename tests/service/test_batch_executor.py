"""Batches run end to end in this process: mover, work queue, executor, gateway app."""

from __future__ import annotations

import time

import pytest

from headway.batches import executor as executor_module
from headway.batches.model import line_request_id
from headway.metering.sink import MemorySink
from headway.registry.model import SYSTEM
from headway.settings import ExecutorSettings
from tests.fakes import until
from tests.registry.conftest import sqlite_sql
from tests.service.batch_helpers import (
    BATCHES,
    ClientSubmitter,
    create,
    embed_line,
    jsonl,
    lines_of,
    running,
    upload,
)
from tests.service.conftest import TEST_LIMITS, auth, make_stack


@pytest.fixture
async def sink():
    return MemorySink()


@pytest.fixture
async def stack(tmp_path, sink):
    built = await make_stack(tmp_path, batches=BATCHES, metering=sink)
    yield built
    await built.close()


async def _submit(stack, data: bytes, key=None) -> str:
    file = (await upload(stack.client, data, key or auth())).json()
    response = await create(stack.client, file["id"], key or auth())
    assert response.status_code == 200, response.text
    return response.json()["id"]


async def _content(stack, file_id: str | None) -> list[dict]:
    if file_id is None:
        return []
    response = await stack.client.get(f"/v1/files/{file_id}/content", headers=auth())
    assert response.status_code == 200
    return lines_of(response.content)


async def test_every_line_is_answered_once_as_the_synchronous_api_answers_it(stack, tmp_path, sink):
    good = [embed_line(f"req-{i}", f"text {i}", f"more {i}") for i in range(6)]
    bad_url = good[0] | {"custom_id": "bad-url", "url": "/v1/chat/completions"}
    bad_body = embed_line("bad-body", "x") | {"body": {"model": "synthetic", "input": []}}
    batch_id = await _submit(stack, jsonl(*good[:3], bad_url, *good[3:], bad_body))
    async with running(stack.batches, stack.client, tmp_path, limits=TEST_LIMITS) as runner:
        batch = await runner.until_final(batch_id, stack.batches)
    assert batch.status == "completed"
    answer = (await stack.client.get(f"/v1/batches/{batch_id}", headers=auth())).json()
    assert answer["request_counts"] == {"total": 8, "completed": 6, "failed": 2}
    assert {(e["line"], e["code"]) for e in answer["errors"]["data"]} == {
        (4, "invalid_url"),
        (8, "invalid_body"),
    }
    assert answer["completed_at"] and answer["in_progress_at"] and answer["finalizing_at"]

    output = await _content(stack, answer["output_file_id"])
    assert [line["custom_id"] for line in output] == [line["custom_id"] for line in good]
    for line, request in zip(output, good, strict=True):
        assert line["error"] is None and line["response"]["status_code"] == 200
        assert line["id"].startswith("batch_req_")
        direct = await stack.client.post("/v1/embeddings", headers=auth(), json=request["body"])
        assert line["response"]["body"]["data"] == direct.json()["data"]
    errors = await _content(stack, answer["error_file_id"])
    assert [(e["custom_id"], e["error"]["code"]) for e in errors] == [
        (None, "invalid_url"),
        (None, "invalid_body"),
    ]

    served = [
        e for e in sink.events if e.request_id in {line_request_id(batch_id, n) for n in range(9)}
    ]
    assert len(served) == 6 and all(e.tier == "batch" and e.billable for e in served)
    assert len({e.request_id for e in served}) == 6


async def test_a_line_answered_before_its_ack_was_lost_is_not_run_again(stack, tmp_path):
    """The record is kept, then the executor fails before the ack: the line comes back,
    and the next delivery only acks it (the SIGKILL itself: tests/e2e/test_batches.py)."""
    batch_id = await _submit(stack, jsonl(*[embed_line(f"r{i}", f"t{i}") for i in range(4)]))
    store = stack.batches.store
    real_record = store.record_many
    failed: list[int] = []

    def record_then_fail(batch, results):
        kept = real_record(batch, results)
        if results and not failed:
            failed.extend(result.line for result in results)
            raise RuntimeError("lost between the record and the ack")
        return kept

    store.record_many = record_then_fail  # type: ignore[method-assign]
    async with running(stack.batches, stack.client, tmp_path, limits=TEST_LIMITS) as runner:
        batch = await runner.until_final(batch_id, stack.batches)
        skipped = runner.metrics._lines["skipped"]  # type: ignore[attr-defined]
        # the lines of the failed commit come back, and are only acked
        await until(lambda: skipped._value.get() == len(failed), 10)
        assert await runner.queue.depth() == 0
        sent = runner.submitter.sent
    assert failed and batch.status == "completed" and batch.counts.completed == 4
    assert sorted(sent) == sorted(set(sent)), "a line with a result was sent again"
    output = await _content(stack, batch.output_file_id)
    assert sorted(line["custom_id"] for line in output) == ["r0", "r1", "r2", "r3"]


async def test_a_tenant_short_of_quota_waits_instead_of_failing_lines(tmp_path):
    stack = await make_stack(tmp_path, batches=BATCHES)
    try:
        _, secret = stack.registry.add_tenant(
            "tiny", "batch", actor=SYSTEM, rate_texts_per_s=40, burst_texts=4
        )
        key = auth(secret)
        await stack.gateway.snapshots.refresh()
        lines = [embed_line(f"r{i}", "a", "b", "c") for i in range(4)]
        batch_id = await _submit(stack, jsonl(*lines), key)
        async with running(stack.batches, stack.client, tmp_path, limits=TEST_LIMITS) as runner:
            batch = await runner.until_final(batch_id, stack.batches)
            waits = runner.metrics._waits["quota"]._value.get()  # type: ignore[attr-defined]
        assert batch.status == "completed"
        assert batch.counts.completed == 4 and batch.counts.failed == 0
        assert waits > 0
    finally:
        await stack.close()


async def test_a_cancelled_batch_keeps_what_ran_and_lists_the_rest_as_never_run(tmp_path):
    stack = await make_stack(tmp_path, batches=BATCHES)
    try:
        batch_id = await _submit(stack, jsonl(*[embed_line(f"r{i}", f"t{i}") for i in range(12)]))
        settings = ExecutorSettings(lines_in_flight=1, lease_s=5)
        async with running(
            stack.batches, stack.client, tmp_path, limits=TEST_LIMITS, settings=settings
        ) as runner:
            await runner.mover.tick()
            await until(lambda: stack.batches.store.batch_by_id(batch_id).counts.completed >= 3, 10)
            cancel = await stack.client.post(f"/v1/batches/{batch_id}/cancel", headers=auth())
            assert cancel.json()["status"] == "cancelling"
            batch = await runner.until_final(batch_id, stack.batches)
            assert await runner.queue.depth() == 0
        assert batch.status == "cancelled" and batch.cancelled_at
        output = await _content(stack, batch.output_file_id)
        errors = await _content(stack, batch.error_file_id)
        ran = {line["custom_id"] for line in output}
        never = {line["custom_id"] for line in errors}
        assert len(ran) >= 3 and not ran & never
        assert ran | never == {f"r{i}" for i in range(12)}
        assert {line["error"]["code"] for line in errors} == {"batch_cancelled"}
    finally:
        await stack.close()


async def test_a_batch_past_its_window_expires_with_its_partial_output(stack, tmp_path):
    batch_id = await _submit(stack, jsonl(*[embed_line(f"r{i}", f"t{i}") for i in range(3)]))
    later = [time.time()]
    async with running(
        stack.batches, stack.client, tmp_path, limits=TEST_LIMITS, clock=lambda: later[0]
    ) as runner:
        await runner.mover.tick()
        await until(lambda: stack.batches.store.batch_by_id(batch_id).counts.completed == 3, 10)
        stack.batches.store.record_many(batch_id, [])  # nothing new
    # A batch whose lines never ran: queued, then past its window before any ran.
    late_id = await _submit(stack, jsonl(embed_line("late", "x")))
    async with running(
        stack.batches,
        stack.client,
        tmp_path / "q2",
        limits=TEST_LIMITS,
        settings=ExecutorSettings(lines_in_flight=1, lease_s=5),
        clock=lambda: later[0],
    ) as runner:
        search_app = stack.registry.tenant("search-app").id
        runner.executor._quota_gates[search_app] = float("inf")  # hold its lines
        await runner.mover.validate(stack.batches.store.batch_by_id(late_id))
        later[0] += 86400 + 1
        batch = await runner.until_final(late_id, stack.batches)
    assert batch.status == "expired" and batch.expired_at
    errors = await _content(stack, batch.error_file_id)
    assert [(e["custom_id"], e["error"]["code"]) for e in errors] == [("late", "batch_expired")]
    assert batch.output_file_id is None


async def test_a_file_with_no_line_that_can_run_fails_the_batch(stack, tmp_path):
    bad = embed_line("a", "x") | {"url": "/v1/completions"}
    batch_id = await _submit(stack, jsonl(bad, bad | {"custom_id": "b"}))
    async with running(stack.batches, stack.client, tmp_path, limits=TEST_LIMITS) as runner:
        batch = await runner.until_final(batch_id, stack.batches)
    assert batch.status == "failed" and batch.failed_at
    answer = (await stack.client.get(f"/v1/batches/{batch_id}", headers=auth())).json()
    assert [(e["line"], e["code"]) for e in answer["errors"]["data"]] == [
        (1, "invalid_url"),
        (2, "invalid_url"),
    ]


async def test_deleting_a_tenant_deletes_its_files_and_batches(stack, tmp_path):
    key = auth("demo-key-nightly-index")
    nightly = stack.registry.tenant("nightly-index").id
    batch_id = await _submit(stack, jsonl(embed_line("a", "x")), key)
    file_ids = [f.id for f in stack.batches.store.files(nightly)]
    digests = {f.sha256 for f in stack.batches.store.files(nightly)}
    mine = await _submit(stack, jsonl(embed_line("a", "x")))  # the same bytes, another tenant
    response = await stack.client.delete(
        "/admin/tenants/nightly-index", headers=auth("demo-admin-key")
    )
    assert response.status_code == 200, response.text
    assert stack.batches.store.batch_by_id(batch_id) is None
    assert stack.batches.store.files(nightly) == [] and file_ids
    assert all(stack.batches.files.exists(d) for d in digests)  # search-app's upload names them
    assert stack.batches.store.batch_by_id(mine) is not None


async def test_a_batch_not_yet_adopted_by_its_tenant_runs_as_nobody_until_it_is(
    stack, tmp_path, monkeypatch, sink
):
    """A batch from before tenant ids (tenant id 0, its gateway not yet started) is nobody's:
    its queued lines go back to the queue rather than run as anyone, and the mover leaves
    it; once a gateway gives it to its tenant, it runs and completes, billed to that id."""
    monkeypatch.setattr(executor_module, "UNADOPTED_WAIT_S", 0.05)
    search_app = stack.registry.tenant("search-app").id
    batch_id = await _submit(stack, jsonl(embed_line("a", "x"), embed_line("b", "y")))
    async with running(stack.batches, stack.client, tmp_path, limits=TEST_LIMITS) as runner:
        runner.executor._quota_gates[search_app] = float("inf")  # queued, not yet pulled
        await runner.mover.tick()
        sqlite_sql(tmp_path / "batches.sqlite3", "UPDATE batches SET tenant_id = 0")
        runner.executor._batches.clear()  # its read of the batch, as after BATCH_FRESH_S
        del runner.executor._quota_gates[search_app]
        deferred = runner.metrics._lines["deferred"]  # type: ignore[attr-defined]
        await until(lambda: deferred._value.get() >= 4, 10)  # each line handed back twice
        for _ in range(3):
            await runner.mover.tick()
        assert runner.submitter.sent == []
        assert stack.batches.store.batch_by_id(batch_id).status == "in_progress"
        assert stack.batches.store.adopt("search-app", search_app) == 1
        batch = await runner.until_final(batch_id, stack.batches)
    assert batch.status == "completed" and batch.counts.completed == 2
    assert {e.tenant_id for e in sink.events if e.tier == "batch"} == {search_app}


class _CancelsFirst(ClientSubmitter):
    """Cancels ``batch_id`` in the store just before its first line is sent: the
    executor read it in progress, the gateway reads it fresh and finds it cancelling."""

    def __init__(self, client, store, batch_id: str) -> None:
        super().__init__(client)
        self._store, self._batch_id, self._done = store, batch_id, False

    async def submit(self, batch, line: int, body: bytes):
        if batch.id == self._batch_id and not self._done:
            self._done = True
            assert self._store.move(batch.id, ("in_progress",), "cancelling", int(time.time()))
        return await super().submit(batch, line, body)


async def test_a_line_whose_batch_ended_under_it_is_skipped_and_pauses_no_other_tenant(
    tmp_path, monkeypatch
):
    """The gateway refuses a line whose batch no longer runs with 409 line_not_live: the
    executor skips that line (its batch's mover lists it as never run). A 403 would say
    the executor's own token is wrong and pause every tenant's lines."""
    monkeypatch.setattr(executor_module, "BATCH_FRESH_S", 1e9)  # its first read stays
    stack = await make_stack(tmp_path, batches=BATCHES)
    try:
        _, secret = stack.registry.add_tenant("bystander", "batch", actor=SYSTEM)
        await stack.gateway.snapshots.refresh()
        doomed = await _submit(stack, jsonl(*[embed_line(f"d{i}", f"t{i}") for i in range(6)]))
        kept = await _submit(
            stack, jsonl(*[embed_line(f"k{i}", f"u{i}") for i in range(6)]), auth(secret)
        )
        submitter = _CancelsFirst(stack.client, stack.batches.store, doomed)
        async with running(
            stack.batches, stack.client, tmp_path, limits=TEST_LIMITS, submitter=submitter
        ) as runner:
            ended = await runner.until_final(doomed, stack.batches)
            done = await runner.until_final(kept, stack.batches)
            paused = runner.metrics._waits["unauthorized"]._value.get()  # type: ignore[attr-defined]
        assert ended.status == "cancelled" and ended.counts.completed == 0
        assert done.status == "completed" and done.counts.completed == 6
        assert paused == 0
    finally:
        await stack.close()

"""A hostile tenant against the batch executor, and the victim beside it: one tenant's
batches never stall, starve or hold up another's (mover, work queue, executor, gateway)."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from headway.batches.bursts import RegistryBursts
from headway.batches.jetstream_queue import JetStreamWorkQueue
from headway.batches.model import FileObject
from headway.batches.mover import MAX_FAILURES
from headway.batches.queue import WorkItem, WorkQueue, WorkQueueUnavailable
from headway.batches.sqlite_queue import SqliteWorkQueue
from headway.registry.model import SYSTEM
from headway.settings import ExecutorSettings
from tests.batches_queue.conftest import work_stream
from tests.fakes import until
from tests.metering.conftest import nats_server
from tests.service.batch_helpers import (
    BATCHES,
    create,
    embed_line,
    jsonl,
    lines_of,
    running,
    upload,
)
from tests.service.conftest import TEST_LIMITS, auth, make_stack

__all__ = ["nats_server"]  # the metering tests' fixture: one server per test

VICTIM = auth()  # search-app
ATTACKER = auth("demo-key-support-bot")
SMALL = ExecutorSettings(lines_in_flight=2, max_lines_in_flight_per_tenant=2, lease_s=5)


@pytest.fixture
async def stack(tmp_path):
    built = await make_stack(tmp_path, batches=BATCHES)
    yield built
    await built.close()


async def _submit(stack, data: bytes, key, endpoint: str = "/v1/embeddings") -> str:
    file = await upload(stack.client, data, key)
    assert file.status_code == 200, file.text
    return await _create(stack, file.json()["id"], key, endpoint)


async def _create(stack, file_id: str, key, endpoint: str = "/v1/embeddings") -> str:
    response = await create(stack.client, file_id, key, endpoint=endpoint)
    assert response.status_code == 200, response.text
    return response.json()["id"]


def _stored(stack, tenant: str, data: bytes) -> str:
    """A file put straight into the stores, past the upload's own check (another layer)."""
    parts = stack.batches
    digest = parts.files.put(data)
    now = int(time.time())
    tenant_id = stack.registry.tenant(tenant).id
    record = FileObject(
        f"file-{digest[:24]}", tenant_id, tenant, "batch", "in.jsonl", len(data), digest, now, None
    )
    parts.store.add_file(record)
    return record.id


def _queue(request, kind: str) -> WorkQueue | None:
    """The executor's queue: JetStream on the test's own nats-server, or None (SQLite)."""
    if kind == "sqlite":
        return None
    return JetStreamWorkQueue(work_stream(request.getfixturevalue("nats_server"), 5.0))


async def _errors(stack, batch, key) -> list[dict]:
    response = await stack.client.get(f"/v1/files/{batch.error_file_id}/content", headers=key)
    assert response.status_code == 200, response.text
    return lines_of(response.content)


async def _tenant(stack, name: str, **quota: float):
    _, secret = stack.registry.add_tenant(name, "interactive", actor=SYSTEM, **quota)
    await stack.gateway.snapshots.refresh()
    return auth(secret)


async def test_a_line_nested_too_deeply_fails_alone_and_no_other_batch_waits(stack, tmp_path):
    """The attack: a rerank line whose document's extra field is nested thousands deep made
    the executor's parser raise RecursionError, which stopped every tenant's batches."""
    deep = b"[" * 5_000 + b"]" * 5_000
    hostile = (
        b'{"custom_id": "deep", "method": "POST", "url": "/v1/rerank", "body": {"model":'
        b' "synthetic", "query": "q", "documents": [{"text": "a", "x": %s}]}}' % deep
    )
    fine = jsonl(
        {
            "custom_id": "ok",
            "method": "POST",
            "url": "/v1/rerank",
            "body": {"model": "synthetic", "query": "q", "documents": ["a", "b"]},
        }
    )
    attacker = await _create(
        stack, _stored(stack, "support-bot", hostile + b"\n" + fine), ATTACKER, "/v1/rerank"
    )
    victim = await _submit(stack, jsonl(embed_line("v", "text")), VICTIM)
    async with running(stack.batches, stack.client, tmp_path, limits=TEST_LIMITS) as runner:
        victims = await runner.until_final(victim, stack.batches)
        attackers = await runner.until_final(attacker, stack.batches)
    assert victims.status == "completed" and victims.counts.completed == 1
    assert attackers.status == "completed"
    assert (attackers.counts.completed, attackers.counts.failed) == (1, 1)
    (error,) = await _errors(stack, attackers, ATTACKER)
    assert error["error"]["code"] == "invalid_json_line"
    assert "nested too deeply" in error["error"]["message"]


async def test_a_batch_that_keeps_failing_is_failed_and_the_others_move_on(stack, tmp_path):
    broken = await _submit(stack, jsonl(embed_line("b", "gone")), ATTACKER)
    ok = await _submit(stack, jsonl(embed_line("o", "here")), VICTIM)
    store = stack.batches.store
    batch = store.batch_by_id(broken)
    record = store.file(batch.tenant_id, batch.input_file_id)
    stack.batches.files.delete(record.sha256)  # every read of its input now raises
    async with running(stack.batches, stack.client, tmp_path, limits=TEST_LIMITS) as runner:
        done = await runner.until_final(ok, stack.batches)
        failed = await runner.until_final(broken, stack.batches)
        moves = runner.metrics._moves  # type: ignore[attr-defined]
    assert done.status == "completed"
    assert failed.status == "failed" and failed.failed_at
    assert failed.errors[0].code == "batch_failed"
    assert "could not validate" in failed.errors[0].message
    assert moves[("validate", "error")]._value.get() == MAX_FAILURES
    assert moves[("validate", "given_up")]._value.get() == 1


class _AwayFor(SqliteWorkQueue):
    """A queue whose first ``n`` puts find it away (NATS down, say)."""

    def __init__(self, *args, away: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.away = away

    async def put(self, items: list[WorkItem]) -> None:  # type: ignore[override]
        if self.away > 0:
            self.away -= 1
            raise WorkQueueUnavailable("away, as NATS in an outage")
        await super().put(items)


async def test_a_queue_away_is_waited_out_and_never_fails_a_batch(stack, tmp_path):
    batch_id = await _submit(stack, jsonl(embed_line("a", "x")), VICTIM)
    queue = _AwayFor(tmp_path / "queue.sqlite3", lease_s=5, away=3 * MAX_FAILURES)
    async with running(
        stack.batches, stack.client, tmp_path, limits=TEST_LIMITS, queue=queue
    ) as runner:
        batch = await runner.until_final(batch_id, stack.batches)
        moves = runner.metrics._moves  # type: ignore[attr-defined]
    assert batch.status == "completed" and queue.away == 0
    assert moves[("validate", "unavailable")]._value.get() == 3 * MAX_FAILURES
    assert moves[("validate", "given_up")]._value.get() == 0


async def test_a_batch_still_validating_at_its_deadline_expires(stack, tmp_path):
    batch_id = await _submit(stack, jsonl(embed_line("a", "x"), embed_line("b", "y")), VICTIM)
    later = time.time() + 86400 + 1
    async with running(
        stack.batches, stack.client, tmp_path, limits=TEST_LIMITS, clock=lambda: later
    ) as runner:
        batch = await runner.until_final(batch_id, stack.batches)
    assert batch.status == "expired" and batch.in_progress_at is None
    errors = await _errors(stack, batch, VICTIM)
    assert [(e["custom_id"], e["error"]["code"]) for e in errors] == [
        ("a", "batch_expired"),
        ("b", "batch_expired"),
    ]


async def test_lines_over_the_tenants_burst_are_refused_at_validation(stack, tmp_path):
    tiny = await _tenant(stack, "tiny", rate_texts_per_s=100, burst_texts=4)
    big = [embed_line(f"big{i}", *"abcde") for i in range(3)]
    batch_id = await _submit(stack, jsonl(*big, embed_line("fits", "a", "b", "c")), tiny)
    bursts = RegistryBursts(stack.registry)
    async with running(
        stack.batches, stack.client, tmp_path, limits=TEST_LIMITS, bursts=bursts
    ) as runner:
        batch = await runner.until_final(batch_id, stack.batches)
        sent = runner.submitter.sent
    assert batch.status == "completed"
    assert (batch.counts.completed, batch.counts.failed) == (1, 3)
    assert sent == [(batch_id, 4)]  # the three could never pass: never sent
    assert [(e.line, e.code) for e in batch.errors] == [
        (n, "line_exceeds_burst") for n in (1, 2, 3)
    ]
    assert "burst of 4 texts" in batch.errors[0].message


async def test_lines_that_can_never_pass_the_quota_end_and_hold_no_slot(stack, tmp_path):
    """The attack: lines of more texts than the tenant's burst got a 429 without
    Retry-After and waited for ever, each holding a slot. Here the burst is lowered after
    they were validated; every slot of the executor is theirs to take."""
    shrinks = await _tenant(stack, "shrinks", rate_texts_per_s=100, burst_texts=10)
    attacker = await _submit(
        stack, jsonl(*[embed_line(f"a{i}", *"abcdefgh") for i in range(6)]), shrinks
    )
    async with running(
        stack.batches, stack.client, tmp_path, limits=TEST_LIMITS, settings=SMALL
    ) as runner:
        shrinking = stack.registry.tenant("shrinks").id
        runner.executor._quota_gates[shrinking] = float("inf")  # queued, not yet run
        await runner.mover.tick()
        stack.registry.update_tenant("shrinks", actor=SYSTEM, burst_texts=4)
        await stack.gateway.snapshots.refresh()
        victim = await _submit(stack, jsonl(*[embed_line(f"v{i}", "x") for i in range(5)]), VICTIM)
        del runner.executor._quota_gates[shrinking]
        attackers = await runner.until_final(attacker, stack.batches)
        victims = await runner.until_final(victim, stack.batches)
        await until(lambda: not runner.executor._held, 5)  # no slot kept
    assert victims.status == "completed" and victims.counts.completed == 5
    assert attackers.status == "completed" and attackers.counts.failed == 6
    errors = await _errors(stack, attackers, shrinks)
    assert {e["response"]["status_code"] for e in errors} == {429}
    assert all("burst" in e["response"]["body"]["error"]["message"] for e in errors)


@pytest.mark.parametrize("queue_kind", ["sqlite", "jetstream"])
async def test_a_tenant_waiting_for_its_quota_holds_no_slot(stack, tmp_path, request, queue_kind):
    """A tenant short of quota (429 with Retry-After): its lines go back to the queue for
    that long, so its slots are free and another tenant's batch runs meanwhile."""
    slow = await _tenant(stack, "slow", rate_texts_per_s=4, burst_texts=2)
    lines = jsonl(*[embed_line(f"s{i}", "a", "b") for i in range(4)])
    throttled = await _submit(stack, lines, slow)
    async with running(
        stack.batches,
        stack.client,
        tmp_path,
        limits=TEST_LIMITS,
        settings=SMALL,
        queue=_queue(request, queue_kind),
    ) as runner:
        await runner.mover.tick()
        deferred = runner.metrics._lines["deferred"]  # type: ignore[attr-defined]
        # Deferred, and none of its lines in a slot while its quota refills.
        await until(lambda: deferred._value.get() > 0 and "slow" not in runner.executor._held, 10)
        victim = await _submit(stack, jsonl(*[embed_line(f"v{i}", "x") for i in range(6)]), VICTIM)
        victims = await runner.until_final(victim, stack.batches)
        assert victims.status == "completed" and victims.counts.completed == 6
        assert stack.batches.store.batch_by_id(throttled).status == "in_progress"
        slows = await runner.until_final(throttled, stack.batches)  # deferred, never lost
    assert (slows.counts.completed, slows.counts.failed) == (4, 0)


@pytest.mark.parametrize("queue_kind", ["sqlite", "jetstream"])
async def test_a_one_line_batch_runs_beside_a_big_one_not_after_it(
    stack, tmp_path, request, queue_kind
):
    nightly = auth("demo-key-nightly-index")
    big = await _submit(stack, jsonl(*[embed_line(f"n{i}", f"t{i}") for i in range(300)]), nightly)
    async with running(
        stack.batches,
        stack.client,
        tmp_path,
        limits=TEST_LIMITS,
        settings=SMALL,
        queue=_queue(request, queue_kind),
    ) as runner:
        await runner.mover.tick()
        store = stack.batches.store
        await until(lambda: store.batch_by_id(big).counts.completed >= 10, 10)
        small = await _submit(stack, jsonl(embed_line("one", "x")), VICTIM)
        done = await runner.until_final(small, stack.batches)
        behind = store.batch_by_id(big).counts.completed
    assert done.status == "completed"
    assert behind < 150, f"the one line waited for {behind} of the big batch's 300"


async def test_a_batch_behind_pages_of_anothers_open_batches_still_moves(stack, tmp_path):
    """A tenant keeps more batches open than a tick looks at: the pages go round, so a later
    tenant's batch is validated, run and finalized all the same."""
    held = [await _submit(stack, jsonl(embed_line(f"a{i}", "x")), ATTACKER) for i in range(5)]
    victim = await _submit(stack, jsonl(embed_line("v", "y")), VICTIM)
    async with running(stack.batches, stack.client, tmp_path, limits=TEST_LIMITS) as runner:
        runner.mover._page_size = 2  # five open batches ahead: more than two pages
        attacker = stack.registry.tenant("support-bot").id
        runner.executor._quota_gates[attacker] = float("inf")  # its lines never run
        done = await runner.until_final(victim, stack.batches)
    assert done.status == "completed"
    assert {stack.batches.store.batch_by_id(b).status for b in held} == {"in_progress"}


async def test_lines_of_many_batches_side_by_side_read_each_file_at_most_twice(stack, tmp_path):
    """Round robin interleaves the lines of every tenant's batches: each runs from its
    batch's line index and a short read, never a parse of the whole file again (with more
    batches at once than the parsed files kept, that parse was every line's)."""
    keys = [
        await _tenant(stack, f"tenant-{t}", rate_texts_per_s=1000, burst_texts=100)
        for t in range(6)
    ]
    batches = [
        await _submit(stack, jsonl(*[embed_line(f"{t}-{i}", f"{t} {i}") for i in range(12)]), key)
        for t, key in enumerate(keys)
    ]
    files = stack.batches.files
    real_read, reads = files.read, []
    files.read = lambda digest: reads.append(digest) or real_read(digest)  # type: ignore[method-assign]
    async with running(stack.batches, stack.client, tmp_path, limits=TEST_LIMITS) as runner:
        done = [await runner.until_final(b, stack.batches) for b in batches]
    assert [(d.status, d.counts.completed) for d in done] == [("completed", 12)] * 6
    assert max(Counter(reads).values()) <= 2, Counter(reads)
    for t, (batch, key) in enumerate(zip(done, keys, strict=True)):
        response = await stack.client.get(f"/v1/files/{batch.output_file_id}/content", headers=key)
        ids = sorted(line["custom_id"] for line in lines_of(response.content))
        assert ids == sorted(f"{t}-{i}" for i in range(12))

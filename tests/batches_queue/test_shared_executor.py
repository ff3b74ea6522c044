"""Shared mode end to end in this process: lines on a JetStream work queue, the batch
store on Postgres, two executors at once, one of them stopped mid-batch."""

from __future__ import annotations

from headway.batches.jetstream_queue import JetStreamWorkQueue
from headway.batches.open import postgres_batch_store
from headway.settings import ExecutorSettings
from headway_tools.testing.nats_server import NatsServer
from tests.batches_queue.conftest import work_stream
from tests.fakes import until
from tests.hangs import dumped_on_timeout
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

LINES = 60
HANG_S = 90.0
"""Far more than a run takes: past it the test fails with every task's stack."""


async def test_two_executors_on_jetstream_and_postgres_answer_every_line_once(
    tmp_path, nats_server: NatsServer, libpq_url: str
) -> None:
    store = postgres_batch_store(libpq_url)
    stack = await make_stack(tmp_path, batches=BATCHES, batch_store=store)
    try:
        async with dumped_on_timeout(HANG_S):
            data = jsonl(*[embed_line(f"r{i}", f"text {i}") for i in range(LINES)])
            file = (await upload(stack.client, data, auth())).json()
            batch_id = (await create(stack.client, file["id"], auth())).json()["id"]
            settings = ExecutorSettings(lines_in_flight=4, lease_s=2)
            queues = [JetStreamWorkQueue(work_stream(nats_server, lease_s=2)) for _ in range(2)]
            async with running(
                stack.batches,
                stack.client,
                tmp_path,
                limits=TEST_LIMITS,
                settings=settings,
                queue=queues[0],
            ) as first:
                await first.mover.tick()  # validated: the lines are on the stream
                async with running(
                    stack.batches,
                    stack.client,
                    tmp_path,
                    limits=TEST_LIMITS,
                    settings=settings,
                    queue=queues[1],
                ) as second:
                    await until(
                        lambda: store.batch_by_id(batch_id).counts.completed >= LINES // 3, 20
                    )
                # the second executor is gone (its unacked lines come back after the lease)
                batch = await first.until_final(batch_id, stack.batches, timeout_s=60)
                sent = first.submitter.sent + second.submitter.sent
        assert batch.status == "completed" and batch.counts.completed == LINES
        output = lines_of(
            stack.batches.files.read(store.file(batch.tenant_id, batch.output_file_id).sha256)
        )
        assert sorted(line["custom_id"] for line in output) == sorted(f"r{i}" for i in range(LINES))
        assert first.submitter.sent and second.submitter.sent  # both took lines
        assert len(sent) >= LINES
    finally:
        await stack.close()
        store.close()

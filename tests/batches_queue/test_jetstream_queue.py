"""The JetStream work queue's own guarantees: the stream and consumers it makes, a
clear error for a stream of that name made otherwise, an outage of NATS as a wait, a
message that is not a work item dropped rather than delivered forever, the upgrade from
one shared consumer, and a tenant's consumer made again after the server removed it."""

from __future__ import annotations

import time

import msgspec
import pytest
from nats.js import api
from nats.js.errors import BadRequestError

from headway.batches.jetstream_queue import (
    INACTIVE_S,
    JetStreamWorkQueue,
    ensure_work_stream,
    name_token,
    tenant_token,
)
from headway.batches.queue import (
    WorkItem,
    WorkQueueConfigError,
    WorkQueueError,
    WorkQueueUnavailable,
)
from headway.metering.stream import connect
from headway_tools.testing.nats_server import NatsServer
from tests.batches_queue.conftest import work_stream


async def test_the_stream_is_a_work_queue_and_the_consumer_never_gives_up(
    nats_server: NatsServer,
) -> None:
    config = work_stream(nats_server, lease_s=7.0)
    queue = JetStreamWorkQueue(config)
    nc, js = await connect(config)
    try:
        await queue.put([WorkItem("batch_a", 1, 1, "acme")])
        stream = await js.stream_info("BATCH_WORK")
        assert stream.config.retention == api.RetentionPolicy.WORK_QUEUE
        assert stream.config.storage == api.StorageType.FILE
        assert stream.config.subjects == ["batches.work.>"]
        assert (stream.config.duplicate_window or 0) > 0
        (delivery,) = await queue.pull(1, 5.0)  # the first pull makes acme's consumer
        token = tenant_token(1)
        consumer = await js.consumer_info("BATCH_WORK", f"executors_{token}")
        assert consumer.config.filter_subject == f"batches.work.{token}.>"
        assert consumer.config.ack_policy == api.AckPolicy.EXPLICIT
        assert consumer.config.ack_wait == 7.0
        assert consumer.config.max_deliver == -1
        assert (consumer.config.max_ack_pending or 0) >= 16
        assert consumer.config.inactive_threshold == INACTIVE_S  # idle: the server removes it
        assert consumer.num_ack_pending == 1
        shared = await js.consumer_info("BATCH_WORK", "executors")  # the old layout's only
        assert shared.config.filter_subject == "batches.work.*"
        await delivery.ack()
        assert (await js.stream_info("BATCH_WORK")).state.messages == 0  # acked: gone
        await queue.put([WorkItem("batch_a", 2, 1, "acme")])
        message = await js.get_last_msg("BATCH_WORK", f"batches.work.{token}.batch_a")
        assert message.headers is not None
        assert message.headers[api.Header.MSG_ID] == "batch_a:2"
    finally:
        await nc.close()
        await queue.close()


async def test_a_stream_of_that_name_made_otherwise_is_a_clear_error(
    nats_server: NatsServer,
) -> None:
    config = work_stream(nats_server)
    nc, js = await connect(config)
    try:
        await js.add_stream(name="BATCH_WORK", subjects=["batches.work.>"])  # limits retention
        queue = JetStreamWorkQueue(config)
        try:
            with pytest.raises(WorkQueueConfigError, match=r"'BATCH_WORK' exists.*limits"):
                await queue.put([WorkItem("batch_a", 1, 1, "acme")])
            with pytest.raises(WorkQueueConfigError, match="HEADWAY_BATCHES__STREAM"):
                await queue.pull(1, 1.0)
        finally:
            await queue.close()
        stream = await js.stream_info("BATCH_WORK")
        assert stream.config.retention == api.RetentionPolicy.LIMITS  # left as it was
        assert stream.state.messages == 0
    finally:
        await nc.close()


async def test_a_batch_id_must_be_one_subject_token(nats_server: NatsServer) -> None:
    queue = JetStreamWorkQueue(work_stream(nats_server))
    try:
        with pytest.raises(WorkQueueError, match="subject token"):
            await queue.put([WorkItem("batch.a", 1, 1, "acme")])
        with pytest.raises(WorkQueueError, match="subject token"):
            await queue.drop("batch_*")
    finally:
        await queue.close()


async def test_nats_away_is_a_wait_and_what_was_stored_is_kept(nats_server: NatsServer) -> None:
    queue = JetStreamWorkQueue(work_stream(nats_server))
    try:
        await queue.put([WorkItem("batch_a", line, 1, "acme") for line in (1, 2)])
        nats_server.stop()
        started = time.monotonic()
        assert await queue.pull(5, 0.5) == []  # no error: as if the queue were empty
        assert 0.4 <= time.monotonic() - started < 3.0
        with pytest.raises(WorkQueueUnavailable):
            await queue.put([WorkItem("batch_a", 3, 1, "acme")])
        nats_server.start()
        deadline = time.monotonic() + 15.0
        got: list[int] = []
        while not {1, 2} <= set(got):
            assert time.monotonic() < deadline, f"{got} after NATS came back"
            for delivery in await queue.pull(5, 0.5):
                got.append(delivery.item.line)
                await delivery.ack()
        # Line 3 was not confirmed, so its put must be retried; it may have been stored
        # (nats-py sends what it buffered once reconnected), and then it is delivered once.
        assert sorted(got) in ([1, 2], [1, 2, 3])
    finally:
        await queue.close()


async def test_a_message_that_is_not_a_work_item_is_dropped(nats_server: NatsServer) -> None:
    config = work_stream(nats_server)
    queue = JetStreamWorkQueue(config)
    nc, js = await connect(config)
    try:
        assert await queue.pull(1, 0.2) == []  # sets up the stream
        token = tenant_token(1)
        for subject in ("batches.work.batch_a", f"batches.work.{token}.batch_a"):
            await js.publish(subject, b"not a work item")  # on the old layout and the new
        await queue.put([WorkItem("batch_a", 1, 1, "acme")])
        deadline = time.monotonic() + 10.0
        lines: list[int] = []
        while not lines or await queue.depth():  # the strays terminated: gone for good
            assert time.monotonic() < deadline, f"{lines}, {await queue.depth()} left"
            for delivery in await queue.pull(5, 0.5):
                lines.append(delivery.item.line)
                await delivery.ack()
        assert lines == [1]
    finally:
        await nc.close()
        await queue.close()


async def test_a_big_put_is_stored_once_and_put_again_is_not(nats_server: NatsServer) -> None:
    queue = JetStreamWorkQueue(work_stream(nats_server))
    items = [WorkItem("batch_a", line, 1, "acme") for line in range(1, 5_001)]
    try:
        await queue.put(items)
        assert await queue.depth() == 5_000
        await queue.put(items)  # a retried put within the duplicate window
        assert await queue.depth() == 5_000
        assert queue.duplicates_total == 5_000
    finally:
        await queue.close()


async def test_items_of_the_old_shared_layout_are_still_served_after_an_upgrade(
    nats_server: NatsServer,
) -> None:
    """A running system upgrades: lines queued by the old executors (one consumer for all,
    subjects without a tenant), one of them leased by an old executor that then died, are
    all served, beside new lines, and an old executor cannot widen its consumer back."""
    config = work_stream(nats_server, lease_s=1.0)
    nc, js = await connect(config)
    queue = JetStreamWorkQueue(config)
    try:
        await ensure_work_stream(js, config)
        old = api.ConsumerConfig(
            name="executors",
            durable_name="executors",
            filter_subject="batches.work.>",
            ack_policy=api.AckPolicy.EXPLICIT,
            ack_wait=1.0,
            max_deliver=-1,
        )
        await js.add_consumer("BATCH_WORK", old)
        for line in (1, 2, 3):
            item = msgspec.json.encode({"batch_id": "batch_old", "line": line, "tenant": "acme"})
            await js.publish("batches.work.batch_old", item)
        leased = await (await js.pull_subscribe_bind("executors", "BATCH_WORK")).fetch(1)
        assert len(leased) == 1  # and never acked: its executor is gone

        await queue.put([WorkItem("batch_new", line, 1, "acme") for line in (1, 2)])
        got: set[tuple[str, int]] = set()
        deadline = time.monotonic() + 15.0
        while len(got) < 5:
            assert time.monotonic() < deadline, sorted(got)
            for delivery in await queue.pull(5, 0.5):
                got.add((delivery.item.batch_id, delivery.item.line))
                await delivery.ack()
        assert got == {("batch_old", n) for n in (1, 2, 3)} | {("batch_new", 1), ("batch_new", 2)}
        assert await queue.depth() == 0
        narrowed = await js.consumer_info("BATCH_WORK", "executors")
        assert narrowed.config.filter_subject == "batches.work.*"
        with pytest.raises(BadRequestError) as refused:  # an old executor's set-up
            await js.add_consumer("BATCH_WORK", old)
        assert refused.value.err_code == 10100
    finally:
        await nc.close()
        await queue.close()


async def test_items_on_tokens_by_name_are_still_served_after_an_upgrade(
    nats_server: NatsServer,
) -> None:
    """Lines queued by executors of the previous version, on a token of the tenant's name
    (its consumer there already, one line leased by an executor that died), are served
    beside lines by id, without a tenant id, and their turns are their own."""
    config = work_stream(nats_server, lease_s=1.0)
    nc, js = await connect(config)
    queue = JetStreamWorkQueue(config)
    try:
        await ensure_work_stream(js, config)
        token = name_token("acme")
        old = api.ConsumerConfig(
            name=f"executors_{token}",
            durable_name=f"executors_{token}",
            filter_subject=f"batches.work.{token}.>",
            ack_policy=api.AckPolicy.EXPLICIT,
            ack_wait=1.0,
            max_deliver=-1,
        )
        await js.add_consumer("BATCH_WORK", old)
        for line in (1, 2, 3):
            item = {"batch_id": "batch_old", "line": line, "tenant": "acme"}
            await js.publish(f"batches.work.{token}.batch_old", msgspec.json.encode(item))
        leased = await (await js.pull_subscribe_bind(old.name, "BATCH_WORK")).fetch(1)
        assert len(leased) == 1  # and never acked: its executor is gone

        await queue.put([WorkItem("batch_new", line, 7, "acme") for line in (1, 2)])
        first = await queue.pull(2, 5.0)
        assert sorted(d.item.tenant_id for d in first) == [0, 7]  # a turn each
        got = {(d.item.batch_id, d.item.line, d.item.tenant_id) for d in first}
        for delivery in first:
            await delivery.ack()
        deadline = time.monotonic() + 15.0
        while len(got) < 5:
            assert time.monotonic() < deadline, sorted(got)
            for delivery in await queue.pull(5, 0.5):
                got.add((delivery.item.batch_id, delivery.item.line, delivery.item.tenant_id))
                await delivery.ack()
        assert got == {("batch_old", n, 0) for n in (1, 2, 3)} | {
            ("batch_new", 1, 7),
            ("batch_new", 2, 7),
        }
        assert await queue.depth() == 0
        new = await js.consumer_info("BATCH_WORK", f"executors_{tenant_token(7)}")
        assert new.config.filter_subject == "batches.work.id7.>"
    finally:
        await nc.close()
        await queue.close()


async def test_a_tenant_consumer_removed_while_its_items_wait_is_made_again(
    nats_server: NatsServer,
) -> None:
    """The server removes a consumer idle for INACTIVE_S, its messages stay: the next pull
    that finds them makes the consumer again, and they are delivered."""
    config = work_stream(nats_server)
    nc, js = await connect(config)
    queue = JetStreamWorkQueue(config)
    try:
        await queue.put([WorkItem("batch_a", line, 1, "acme") for line in (1, 2)])
        (first,) = await queue.pull(1, 5.0)
        await first.ack()
        await js.delete_consumer("BATCH_WORK", f"executors_{tenant_token(1)}")
        deadline = time.monotonic() + 10.0
        again: list[int] = []
        while not again:
            assert time.monotonic() < deadline
            again = [d.item.line for d in await queue.pull(5, 0.5)]
        assert again == [2]
    finally:
        await nc.close()
        await queue.close()

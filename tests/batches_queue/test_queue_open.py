"""Which work queue settings open: JetStream with nats_url, else the batch store's file."""

from __future__ import annotations

from pathlib import Path

from nats.js import api

from headway.batches.jetstream_queue import JetStreamWorkQueue
from headway.batches.queue import WorkItem
from headway.batches.queue_open import open_work_queue, work_stream_config
from headway.batches.sqlite_queue import SqliteWorkQueue
from headway.settings import BatchSettings, ExecutorSettings, Settings, StreamsSettings
from headway_tools.testing.nats_server import NatsServer


def settings(
    tmp_path: Path, nats_url: str | None = None, monitor_url: str | None = None
) -> Settings:
    batches = BatchSettings(
        stream="WORK_T",
        subject="work.t",
        consumer="exec_t",
        executor=ExecutorSettings(lease_s=12.0, lines_in_flight=8),
    )
    streams = StreamsSettings(monitor_urls=monitor_url)
    return Settings(data_dir=tmp_path, nats_url=nats_url, batches=batches, streams=streams)


async def test_without_nats_the_queue_is_the_batch_store_file(tmp_path: Path) -> None:
    queue = open_work_queue(settings(tmp_path))
    try:
        assert isinstance(queue, SqliteWorkQueue)
        assert queue.path == tmp_path / "batches.sqlite3" and queue.lease_s == 12.0
        await queue.put([WorkItem("batch_a", 1, 1, "acme")])
        assert (tmp_path / "batches.sqlite3").is_file()
    finally:
        await queue.close()


def test_the_stream_comes_from_the_batch_settings(tmp_path: Path) -> None:
    config = work_stream_config(settings(tmp_path, "nats://a:4222, nats://b:4222"))
    assert config.servers == ("nats://a:4222", "nats://b:4222")
    assert (config.stream, config.subject, config.durable) == ("WORK_T", "work.t", "exec_t")
    assert config.ack_wait_s == 12.0
    assert config.max_ack_pending >= 8 * 100  # room for many executors' lines in flight
    limits = StreamsSettings().batch_work
    assert (config.max_age_s, config.max_bytes) == (limits.max_age_s, limits.max_bytes)
    assert config.discard == api.DiscardPolicy.NEW and config.replicas == 1
    assert config.settings == "streams.batch_work" and config.name_setting == "batches.stream"


async def test_with_nats_the_queue_is_the_shared_stream(
    tmp_path: Path, nats_server: NatsServer
) -> None:
    queue = open_work_queue(settings(tmp_path, nats_server.url, nats_server.monitor_url))
    try:
        assert isinstance(queue, JetStreamWorkQueue) and queue.lease_s == 12.0
        await queue.put([WorkItem("batch_a", 1, 1, "acme")])
        (delivery,) = await queue.pull(1, 5.0)
        assert delivery.item == WorkItem("batch_a", 1, 1, "acme")
        await delivery.ack()
    finally:
        await queue.close()
    assert not (tmp_path / "batches.sqlite3").exists()

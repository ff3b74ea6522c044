"""The work queue a process uses, from settings: JetStream in shared mode, else SQLite.

With ``nats_url`` set every executor and gateway shares the JetStream work-queue stream
``batches.stream``; without it the queue is the ``work_items`` table of the embedded
batch store's file (``settings.batches_path``), which the batch store's own tables share.
Either way the lease is ``batches.executor.lease_s``.
"""

from __future__ import annotations

from headway.batches.jetstream_queue import JetStreamWorkQueue
from headway.batches.queue import WorkQueue
from headway.batches.sqlite_queue import SqliteWorkQueue
from headway.metering.build import with_limits
from headway.metering.stream import StreamConfig
from headway.settings import Settings

EXECUTORS_ROOM = 1_000
"""Executors the shared consumer has room for, each with ``lines_in_flight`` leased."""


def work_stream_config(settings: Settings) -> StreamConfig:
    batches = settings.batches
    servers = tuple(url.strip() for url in (settings.nats_url or "").split(",") if url.strip())
    config = StreamConfig(
        servers=servers,
        stream=batches.stream,
        subject=batches.subject,
        duplicate_window_s=600.0,  # a put retried by a restarted executor, minutes later
        durable=batches.consumer,
        ack_wait_s=batches.executor.lease_s,
        max_ack_pending=batches.executor.lines_in_flight * EXECUTORS_ROOM,
        client_name="headway-batches",
        name_setting="batches.stream",
        subject_setting="batches.subject",
        duplicate_window_setting="the work queue's duplicate window (600 s, fixed)",
    )
    return with_limits(config, settings, settings.streams.batch_work, "streams.batch_work")


def open_work_queue(settings: Settings) -> WorkQueue:
    """Opens nothing yet: the queue connects (or opens its file) on first use."""
    if settings.nats_url:
        return JetStreamWorkQueue(work_stream_config(settings))
    return SqliteWorkQueue(settings.batches_path, lease_s=settings.batches.executor.lease_s)

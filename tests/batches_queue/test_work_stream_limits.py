"""The BATCH_WORK stream's limits from settings: applied on create, a hand-changed limit
refused until the update flag is given, and a full stream refusing a put (nothing queued
dropped) rather than discarding lines."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from nats.js import api

from headway.batches.jetstream_queue import JetStreamWorkQueue
from headway.batches.queue import WorkItem, WorkQueueConfigError, WorkQueueUnavailable
from headway.batches.queue_open import work_stream_config
from headway.metering.stream import StreamConfig, connect
from headway.settings import Settings, StreamsSettings, WorkStreamSettings
from headway_tools.testing.nats_server import NatsServer


def work_config(server: NatsServer, tmp_path: Path, **streams: object) -> StreamConfig:
    settings = Settings(
        data_dir=tmp_path,
        nats_url=server.url,
        streams=StreamsSettings.model_validate({"monitor_urls": server.monitor_url, **streams}),
    )
    return dataclasses.replace(work_stream_config(settings), reconnect_wait_s=0.1)


async def test_the_limits_apply_on_create_and_a_changed_one_needs_the_flag(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    config = work_config(nats_server, tmp_path)
    defaults = WorkStreamSettings()
    nc, js = await connect(config)
    queue = JetStreamWorkQueue(config)
    try:
        await queue.put([WorkItem("batch_a", 1, 1, "acme")])
        found = (await js.stream_info("BATCH_WORK")).config
        assert (found.max_age, found.max_bytes) == (defaults.max_age_s, defaults.max_bytes)
        assert found.discard == api.DiscardPolicy.NEW
        assert found.retention == api.RetentionPolicy.WORK_QUEUE
        await js.update_stream(dataclasses.replace(found, max_age=86400.0))  # by hand
        again = JetStreamWorkQueue(config)
        try:
            with pytest.raises(WorkQueueConfigError) as refused:
                await again.put([WorkItem("batch_a", 2, 1, "acme")])
            assert "max_age: the stream has 86400.0, streams.batch_work.max_age_s" in str(
                refused.value
            )
            assert "HEADWAY_STREAMS__BATCH_WORK__MAX_AGE_S) says 604800.0" in str(refused.value)
        finally:
            await again.close()
        assert (await js.stream_info("BATCH_WORK")).config.max_age == 86400.0
        updating = JetStreamWorkQueue(dataclasses.replace(config, update_existing=True))
        try:
            await updating.put([WorkItem("batch_a", 2, 1, "acme")])
        finally:
            await updating.close()
        state = await js.stream_info("BATCH_WORK")
        assert state.config.max_age == defaults.max_age_s
        assert state.state.messages == 2  # the update kept what was queued
    finally:
        await queue.close()
        await nc.close()


async def test_a_full_work_stream_refuses_the_put_and_keeps_what_it_holds(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    config = work_config(nats_server, tmp_path, batch_work={"max_bytes": 4 << 10})
    nc, js = await connect(config)
    queue = JetStreamWorkQueue(dataclasses.replace(config, request_timeout_s=1.0))
    try:
        await queue.put([WorkItem("batch_a", line, 1, "acme") for line in range(5)])
        with pytest.raises(WorkQueueUnavailable, match="put them again"):
            await queue.put([WorkItem("batch_b", line, 1, "acme") for line in range(200)])
        held = await js.stream_info("BATCH_WORK")
        assert held.state.first_seq == 1  # nothing queued was dropped to make room
        assert 5 <= held.state.messages < 205 and held.state.bytes <= 4 << 10
    finally:
        await queue.close()
        await nc.close()

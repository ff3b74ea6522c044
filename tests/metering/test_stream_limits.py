"""Bounded streams against a real nats-server: the settings' limits applied on create, a
hand-changed limit refused (naming the setting and both values) and changed only when
asked, a server that does not fsync every write refused, and a full USAGE stream that
refuses publishes, so the events stay in the outbox and the gateway answers
``metering_unavailable`` rather than losing them."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from nats.js import api
from prometheus_client import CollectorRegistry

from headway.background import Background
from headway.batches.jetstream_queue import JetStreamWorkQueue
from headway.batches.model import new_batch_id
from headway.batches.queue import WorkItem
from headway.billing.sources.jetstream import JetStreamSource
from headway.errors import MeteringUnavailable
from headway.gateway.stages.meter import check_meter
from headway.metering.build import OutboxMetering, stream_config
from headway.metering.outbox import Outbox
from headway.metering.relay import Relay
from headway.metering.stream import StreamConfig, connect, ensure_stream
from headway.metering.stream_guard import StreamConfigError, StreamDurabilityError
from headway.metering.stream_metrics import StreamMetrics
from headway.settings import Settings, StreamsSettings, UsageStreamSettings
from headway_tools.testing.nats_server import NatsServer
from tests.batches_queue.test_work_stream_limits import work_config
from tests.builders import usage_event


def usage_config(server: NatsServer, **streams: object) -> StreamConfig:
    """The USAGE stream as the settings make it (production limits unless overridden)."""
    settings = Settings(
        nats_url=server.url,
        streams=StreamsSettings.model_validate({"monitor_urls": server.monitor_url, **streams}),
    )
    return dataclasses.replace(stream_config(settings), reconnect_wait_s=0.1)


async def eventually(condition: Callable[[], Awaitable[bool]], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not await condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.01)


@pytest.fixture
def unsynced_server() -> Iterator[NatsServer]:
    """JetStream with NATS's default fsync (every two minutes), not ``always``."""
    server = NatsServer(sync_always=False)
    try:
        server.start()
        yield server
    finally:
        server.close()


async def test_the_settings_limits_are_applied_when_the_stream_is_created(
    nats_server: NatsServer,
) -> None:
    config = usage_config(nats_server)
    defaults = UsageStreamSettings()
    nc, js = await connect(config)
    try:
        await ensure_stream(js, config)
        found = (await js.stream_info("USAGE")).config
        assert found.max_age == defaults.max_age_s == 72 * 3600
        assert found.max_bytes == defaults.max_bytes == 24 << 30
        assert found.max_msg_size == defaults.max_msg_size
        assert found.discard == api.DiscardPolicy.NEW
        assert found.num_replicas == 1 and found.storage == api.StorageType.FILE
        assert found.retention == api.RetentionPolicy.LIMITS
        again = await ensure_stream(js, config)  # the same stream again: nothing to do
        assert again.config.max_bytes == found.max_bytes
    finally:
        await nc.close()


async def test_a_hand_changed_limit_is_refused_then_updated_when_asked(
    nats_server: NatsServer, caplog: pytest.LogCaptureFixture
) -> None:
    config = usage_config(nats_server)
    nc, js = await connect(config)
    try:
        await ensure_stream(js, config)
        by_hand = dataclasses.replace(
            (await js.stream_info("USAGE")).config, max_bytes=1 << 30, max_msgs=5_000_000
        )
        await js.update_stream(by_hand)  # an operator, with `nats stream edit`
        with pytest.raises(StreamConfigError) as refused:
            await ensure_stream(js, config)
        message = str(refused.value)
        assert "'USAGE'" in message and "left as it is" in message
        assert f"max_bytes: the stream has {1 << 30}, streams.usage.max_bytes" in message
        assert f"HEADWAY_STREAMS__USAGE__MAX_BYTES) says {24 << 30}" in message
        assert "HEADWAY_STREAMS__UPDATE=true" in message
        assert "max_msgs" not in message  # not the settings' to own
        assert "streams.usage.max_bytes says" in caplog.text  # each difference logged
        assert (await js.stream_info("USAGE")).config.max_bytes == 1 << 30  # untouched

        updated = await ensure_stream(js, dataclasses.replace(config, update_existing=True))
        assert updated.config.max_bytes == 24 << 30
        found = (await js.stream_info("USAGE")).config
        assert found.max_bytes == 24 << 30
        assert found.max_msgs == 5_000_000  # what the settings do not own is kept
        await ensure_stream(js, config)  # and now it matches: accepted without the flag
    finally:
        await nc.close()


async def test_a_relay_facing_a_refused_stream_stops_its_process(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    config = usage_config(nats_server)
    nc, js = await connect(config)
    outbox = Outbox(tmp_path / "gw-1.sqlite3")
    await outbox.start()
    fatal: list[str] = []
    background = Background(on_fatal=fatal.append)
    try:
        await js.add_stream(
            name="USAGE", subjects=["usage.events"], max_age=3600.0, duplicate_window=120.0
        )
        await outbox.record(usage_event("r1"))
        background.essential("usage-relay", Relay(outbox, config).run)

        async def stopped() -> bool:
            return fatal == ["usage-relay"]

        await eventually(stopped, 10)
        assert outbox.depth == 1  # nothing published into the stream it refused
        source = JetStreamSource(config)
        try:
            with pytest.raises(StreamConfigError, match="max_age: the stream has 3600"):
                await source.fetch(10, 5.0)
        finally:
            await source.close()
    finally:
        await background.stop()
        await outbox.close()
        await nc.close()


async def test_a_storage_change_is_refused_even_with_the_update_flag(
    nats_server: NatsServer,
) -> None:
    config = usage_config(nats_server, update=True, allow_volatile=True)
    nc, js = await connect(config)
    try:
        await js.add_stream(name="USAGE", subjects=["usage.events"], storage=api.StorageType.MEMORY)
        with pytest.raises(StreamConfigError, match="cannot change on an existing stream"):
            await ensure_stream(js, config)
        assert (await js.stream_info("USAGE")).config.storage == api.StorageType.MEMORY
    finally:
        await nc.close()


async def test_a_server_that_does_not_fsync_every_write_is_refused(
    unsynced_server: NatsServer,
) -> None:
    config = usage_config(unsynced_server)
    nc, js = await connect(config)
    try:
        with pytest.raises(StreamDurabilityError) as refused:
            await ensure_stream(js, config)
        assert "does not fsync every write" in str(refused.value)
        assert unsynced_server.monitor_url in str(refused.value)
        assert "HEADWAY_STREAMS__ALLOW_VOLATILE" in str(refused.value)
        assert [info.config.name for info in await js.streams_info()] == []  # nothing made
        allowed = usage_config(unsynced_server, allow_volatile=True)
        await ensure_stream(js, allowed)  # a dev server, by choice
    finally:
        await nc.close()


async def test_a_memory_stream_and_an_unreadable_fsync_setting_are_refused(
    nats_server: NatsServer,
) -> None:
    config = usage_config(nats_server, usage={"storage": "memory"})
    nc, js = await connect(config)
    try:
        with pytest.raises(StreamDurabilityError, match="kept in memory"):
            await ensure_stream(js, config)
        blind = dataclasses.replace(usage_config(nats_server), monitor_urls=("http://127.0.0.1:9",))
        with pytest.raises(StreamDurabilityError, match="fsync setting could be read"):
            await ensure_stream(js, blind)
    finally:
        await nc.close()


async def test_a_max_bytes_the_store_cannot_reserve_is_a_clear_error(
    nats_server: NatsServer,
) -> None:
    config = usage_config(nats_server, usage={"max_bytes": 1 << 50})  # 1 PiB > 1 TB store
    nc, js = await connect(config)
    try:
        with pytest.raises(StreamConfigError, match=r"no room.*streams\.usage\.max_bytes"):
            await ensure_stream(js, config)
    finally:
        await nc.close()


async def test_three_replicas_on_one_server_is_a_clear_error(nats_server: NatsServer) -> None:
    config = usage_config(nats_server, usage={"replicas": 3})
    nc, js = await connect(config)
    try:
        with pytest.raises(StreamConfigError, match=r"streams\.usage\.replicas.*no cluster"):
            await ensure_stream(js, config)
    finally:
        await nc.close()


async def test_a_full_usage_stream_refuses_so_the_outbox_keeps_events_and_fills(
    nats_server: NatsServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """discard=new: at max_bytes the stream refuses publishes; nothing it holds is dropped,
    the refused events stay in the outbox, and a full outbox refuses billable work."""
    config = usage_config(nats_server, usage={"max_bytes": 8 << 10})
    outbox = Outbox(tmp_path / "gw-1.sqlite3", max_events=60)
    await outbox.start()
    metering = OutboxMetering(outbox, None)
    relay = Relay(
        outbox, config, batch=10, publish_timeout_s=0.5, backoff_s=0.01, max_backoff_s=0.05
    )
    nc, js = await connect(config)
    task = asyncio.create_task(relay.run())
    try:
        recorded = 0

        async def record(count: int) -> None:
            nonlocal recorded
            for _ in range(count):
                await outbox.record(usage_event(f"r{recorded:04d}"))
                recorded += 1

        async def refused() -> bool:  # nats-py leaves a refused PubAck to time out
            return relay.publish_failures_total > 0 and "at its max_bytes" in caplog.text

        await record(40)  # ~25 KiB of events: more than the 8 KiB stream holds
        await eventually(refused, 20)  # the stream is full now: nothing leaves the outbox
        assert "unreachable" not in caplog.text  # the server refusing is no outage
        while not metering.full:
            await record(1)
            assert recorded < 1_000, "the outbox never filled: the stream dropped events"
        with pytest.raises(MeteringUnavailable):
            check_meter(metering)  # the gateway's answer: 503 metering_unavailable
        held = (await js.stream_info("USAGE")).state
        assert 0 < held.bytes <= 8 << 10
        assert held.first_seq == 1  # nothing old was dropped to make room
        assert held.messages + outbox.depth == recorded  # every event is somewhere
        assert held.messages == relay.published_total
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await nc.close()
        await outbox.close()


async def test_the_stream_fill_and_limits_are_exported(nats_server: NatsServer) -> None:
    config = usage_config(nats_server, usage={"max_bytes": 1 << 20})
    registry = CollectorRegistry()
    metrics = StreamMetrics(registry)
    source = JetStreamSource(config)
    nc, js = await connect(config)
    try:
        assert await source.stream_info() is None  # not set up yet: nothing to read
        assert await source.fetch(1, 2.0) == []  # sets up the stream and the consumer
        for request_id in ("r1", "r2", "r3"):
            await js.publish("usage.events", b"{}", headers={api.Header.MSG_ID: request_id})
        info = await source.stream_info()
        assert info is not None
        metrics.observe(info)
    finally:
        await source.close()
        await nc.close()

    def value(name: str) -> float | None:
        return registry.get_sample_value(name, {"stream": "USAGE"})

    assert value("headway_stream_messages") == 3
    assert value("headway_stream_bytes") == info.state.bytes and info.state.bytes > 0
    assert value("headway_stream_max_bytes") == 1 << 20
    assert value("headway_stream_max_age_seconds") == 72 * 3600
    assert value("headway_stream_max_msg_size_bytes") == 64 << 10
    assert value("headway_stream_replicas") == 1


async def test_a_message_takes_what_the_sizing_assumes(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """The settings size max_bytes at ~620 B per usage event and ~290 B per work line
    (docs/DESIGN.md): realistic ones, relayed and put as in production, stay under
    1 KiB and 512 B, so the documented hours of traffic fit."""
    config = usage_config(nats_server)
    outbox = Outbox(tmp_path / "gw-1.sqlite3")
    await outbox.start()
    events = 2_000
    await asyncio.gather(
        *(
            outbox.record(
                usage_event(
                    f"{i:08d}-7c1e-4b5e-9a3f-2d8e6f1b0c4a",
                    tenant="tenant-" + "x" * 24,
                    gateway_id="headway-gateway-7d9f8c6b5-x2x9z",
                )
            )
            for i in range(events)
        )
    )
    relay = Relay(outbox, config)
    task = asyncio.create_task(relay.run())
    work = JetStreamWorkQueue(work_config(nats_server, tmp_path))
    nc, js = await connect(config)
    try:

        async def drained() -> bool:
            return outbox.depth == 0

        await eventually(drained, 30)
        usage = (await js.stream_info("USAGE")).state
        await work.put(
            [WorkItem(new_batch_id(), line, 42, "tenant-" + "x" * 24) for line in range(events)]
        )
        lines = (await js.stream_info("BATCH_WORK")).state
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await work.close()
        await nc.close()
        await outbox.close()
    per_event, per_line = usage.bytes / usage.messages, lines.bytes / lines.messages
    print(f"stored: {per_event:.0f} B per usage event, {per_line:.0f} B per work line")
    assert usage.messages == lines.messages == events
    assert per_event < 1024 and per_line < 512

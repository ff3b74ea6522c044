"""The relay against a real nats-server: once per request id, through SIGKILL and restart
of NATS mid-drain, and with NATS away when it starts."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api

from headway.background import Background
from headway.metering.event import decode
from headway.metering.outbox import Outbox
from headway.metering.relay import Relay
from headway.metering.stream import StreamConfig, connect, ensure_stream
from headway_tools.testing.nats_server import NatsServer
from tests.builders import usage_event


def stream_config(server: NatsServer) -> StreamConfig:
    return StreamConfig(
        servers=(server.url,), reconnect_wait_s=0.1, monitor_urls=(server.monitor_url,)
    )


async def eventually(condition: Callable[[], Awaitable[bool]], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not await condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.01)


async def stream_messages(js: JetStreamContext, config: StreamConfig) -> list[Msg]:
    """Every message in the stream, in order, through an ephemeral consumer."""
    total = (await js.stream_info(config.stream)).state.messages
    subscription = await js.pull_subscribe(
        config.subject,
        stream=config.stream,
        config=api.ConsumerConfig(ack_policy=api.AckPolicy.NONE),
    )
    messages: list[Msg] = []
    while len(messages) < total:
        messages += await subscription.fetch(min(1000, total - len(messages)), timeout=5)
    await subscription.unsubscribe()
    return messages


def msg_id(message: Msg) -> str:
    assert message.headers is not None
    return message.headers[api.Header.MSG_ID.value]


async def drained(outbox: Outbox) -> bool:
    return await outbox.read(0, 1) == []


async def outbox_with(path: Path, request_ids: list[str]) -> Outbox:
    outbox = Outbox(path)
    await outbox.start()
    for start in range(0, len(request_ids), 1000):
        chunk = request_ids[start : start + 1000]
        await asyncio.gather(*(outbox.record(usage_event(rid)) for rid in chunk))
    return outbox


async def test_each_request_id_is_stored_once_and_the_outbox_empties(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    config = stream_config(nats_server)
    # r1 twice: a row published again (its PubAck was lost) must not be stored twice.
    outbox = await outbox_with(tmp_path / "gw-1.sqlite3", ["r0", "r1", "r1", "r2"])
    relay = Relay(outbox, config)
    fatal: list[str] = []
    background = Background(on_fatal=fatal.append)
    nc, js = await connect(config)
    try:
        background.essential("usage-relay", relay.run)
        await eventually(lambda: drained(outbox), 10)
        messages = await stream_messages(js, config)
        assert [msg_id(message) for message in messages] == ["r0", "r1", "r2"]
        assert decode(messages[1].data) == usage_event("r1")
        assert relay.published_total == 4 and relay.duplicates_total == 1
        assert relay.connected and relay.publish_failures_total == 0
        assert outbox.depth == 0
    finally:
        await background.stop()
        await nc.close()
        await outbox.close()
    assert fatal == [], "the relay ended by itself"
    assert not relay.connected


async def test_every_row_reaches_the_stream_through_a_nats_kill_9_mid_drain(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    config = stream_config(nats_server)
    request_ids = [f"r{i:05d}" for i in range(3_000)]
    outbox = await outbox_with(tmp_path / "gw-1.sqlite3", request_ids)
    relay = Relay(outbox, config, batch=500, publish_timeout_s=1.0)
    task = asyncio.create_task(relay.run())
    try:
        await eventually(lambda: ready(relay.published_total >= 1_000), 20)
        nats_server.kill()
        assert relay.published_total < len(request_ids), "drained before the kill"
        nats_server.start()
        await eventually(lambda: drained(outbox), 60)
        nc, js = await connect(config)
        try:
            stored = {msg_id(message) for message in await stream_messages(js, config)}
        finally:
            await nc.close()
        assert stored == set(request_ids)
        assert outbox.depth == 0
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await outbox.close()


async def test_nats_away_at_start_then_up(
    nats_server: NatsServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="headway.metering")
    nats_server.stop()
    config = stream_config(nats_server)
    outbox = await outbox_with(tmp_path / "gw-1.sqlite3", ["r0", "r1", "r2"])
    relay = Relay(outbox, config)
    task = asyncio.create_task(relay.run())
    try:
        await asyncio.sleep(1.0)  # the outage itself: ten reconnect attempts
        assert not relay.connected and outbox.depth == 3 and not task.done()
        nats_server.start()
        await eventually(lambda: drained(outbox), 20)
        assert relay.connected and relay.published_total == 3
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await outbox.close()
    lines = [record.getMessage() for record in caplog.records]
    assert len([line for line in lines if "unreachable" in line]) == 1, lines
    assert len([line for line in lines if "reachable again" in line]) == 1, lines


async def test_ensure_stream_is_idempotent(nats_server: NatsServer) -> None:
    config = stream_config(nats_server)
    nc, js = await connect(config)
    try:
        first = await ensure_stream(js, config)
        again = await ensure_stream(js, config)
        assert first.config.duplicate_window == again.config.duplicate_window == 120
        assert again.config.storage == api.StorageType.FILE
    finally:
        await nc.close()


async def ready(value: bool) -> bool:
    return value


async def test_stopping_while_nats_is_away_ends_the_relay_at_once(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    nats_server.stop()
    outbox = await outbox_with(tmp_path / "gw-1.sqlite3", ["r0"])
    relay = Relay(outbox, stream_config(nats_server))
    fatal: list[str] = []
    background = Background(on_fatal=fatal.append)
    try:
        background.essential("usage-relay", relay.run)
        await asyncio.sleep(0.3)  # a few reconnect attempts
        await asyncio.wait_for(background.stop(), 2)
    finally:
        await outbox.close()
    assert fatal == [] and not relay.connected
    assert outbox.depth == 1

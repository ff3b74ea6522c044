"""The relay's last flush on stop, against a real nats-server: it empties the outbox, it is
bounded when the stream never acknowledges, and what it leaves is relayed by the next run
of the same gateway id and billed once.

Also ``OutboxMetering.close``, the gateway's stop, which runs the flush and logs what went
and what stayed; and the left-behind count a restarted gateway reports."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from headway.background import Background
from headway.billing.consumer import Consumer
from headway.billing.ledger.sqlite import SQLiteLedger
from headway.billing.sources.jetstream import JetStreamSource
from headway.metering.build import OutboxMetering
from headway.metering.event import decode, encode
from headway.metering.outbox import Outbox
from headway.metering.relay import Relay
from headway.metering.stream import StreamConfig, connect, ensure_stream
from headway_tools.testing.nats_server import NatsServer
from tests.builders import usage_event
from tests.metering.test_relay import (
    drained,
    eventually,
    outbox_with,
    ready,
    stream_config,
    stream_messages,
)

HANG_GUARD_S = 30.0
"""Only so that a flush that never returns fails the test instead of hanging the run."""


async def stored_ids(config: StreamConfig) -> list[str]:
    """The request id of every message in the stream, in order (from the event itself:
    a copy published without a Nats-Msg-Id has none in its headers)."""
    nc, js = await connect(config)
    try:
        await ensure_stream(js, config)
        return [decode(message.data).request_id for message in await stream_messages(js, config)]
    finally:
        await nc.close()


@pytest.fixture
def frozen(nats_server: NatsServer) -> Iterator[NatsServer]:
    """The server, to be frozen with SIGSTOP (its sockets stay open and nothing answers:
    a stream that never acknowledges); always thawed before it is stopped."""
    yield nats_server
    assert nats_server.pid is not None
    os.kill(nats_server.pid, signal.SIGCONT)


def freeze(server: NatsServer) -> None:
    assert server.pid is not None
    os.kill(server.pid, signal.SIGSTOP)


def thaw(server: NatsServer) -> None:
    assert server.pid is not None
    os.kill(server.pid, signal.SIGCONT)


async def test_flush_relays_every_pending_row_and_closes(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    config = stream_config(nats_server)
    ids = [f"r{i:04d}" for i in range(1_500)]
    outbox = await outbox_with(tmp_path / "gateway-0.sqlite3", ids)
    relay = Relay(outbox, config, batch=500)  # three batches: the flush loops
    try:
        flushed = await asyncio.wait_for(relay.flush(10.0), HANG_GUARD_S)
        assert flushed.emptied and flushed.relayed == len(ids)
        assert not relay.connected
        assert await drained(outbox)
    finally:
        await outbox.close()
    assert outbox.depth == 0
    assert await stored_ids(config) == ids


async def test_flush_after_the_loop_was_cancelled_mid_stream_stores_each_event_once(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """The gateway's stop: the relay's loop is cancelled wherever it is (mid-publish, a
    removal queued), then the flush carries on from the oldest row still there."""
    config = stream_config(nats_server)
    ids = [f"r{i:05d}" for i in range(5_000)]
    outbox = await outbox_with(tmp_path / "gateway-0.sqlite3", ids)
    relay = Relay(outbox, config, batch=200)
    fatal: list[str] = []
    background = Background(on_fatal=fatal.append)
    try:
        background.essential("usage_relay", relay.run)
        await eventually(lambda: ready(relay.published_total >= 400), 20)
        await background.stop()
        assert relay.published_total < len(ids), "drained before the stop"
        flushed = await asyncio.wait_for(relay.flush(30.0), HANG_GUARD_S)
        assert flushed.emptied
    finally:
        await outbox.close()
    assert fatal == []
    assert outbox.depth == 0
    assert await stored_ids(config) == ids  # each once, in order


async def test_a_stream_that_never_acknowledges_holds_the_flush_no_longer_than_its_bound(
    frozen: NatsServer, tmp_path: Path
) -> None:
    config = stream_config(frozen)
    # The relay connects first (the gateway's did long before its stop), then NATS freezes.
    outbox = await outbox_with(tmp_path / "gateway-0.sqlite3", [f"r{i}" for i in range(50)])
    # A PubAck is waited for far longer than the hang guard: only the flush's own bound
    # can end it in time.
    relay = Relay(outbox, config, publish_timeout_s=4 * HANG_GUARD_S)
    fatal: list[str] = []
    background = Background(on_fatal=fatal.append)
    try:
        background.essential("usage_relay", relay.run)
        await eventually(lambda: drained(outbox), 10)
        freeze(frozen)
        for i in range(5):  # nothing of these can be acknowledged now
            await outbox.record(usage_event(f"late{i}"))
        await asyncio.wait_for(background.stop(), HANG_GUARD_S)
        flushed = await asyncio.wait_for(relay.flush(0.5), HANG_GUARD_S)
    finally:
        thaw(frozen)
        await outbox.close()
    assert not flushed.emptied and flushed.relayed == 0 and not relay.connected
    assert outbox.depth == 5  # on disk, for the next run of this gateway id
    assert fatal == []


async def test_a_flush_with_nats_away_is_bounded_too(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    nats_server.stop()
    outbox = await outbox_with(tmp_path / "gateway-0.sqlite3", ["r0", "r1"])
    relay = Relay(outbox, stream_config(nats_server))
    try:
        flushed = await asyncio.wait_for(relay.flush(0.3), HANG_GUARD_S)
    finally:
        await outbox.close()
    assert not flushed.emptied and flushed.relayed == 0
    assert outbox.depth == 2


async def test_an_empty_outbox_is_flushed_at_once_even_with_nats_away(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """The usual stop has nothing left to relay: it must not wait out the bound for a
    connection it does not need."""
    nats_server.stop()
    outbox = await outbox_with(tmp_path / "gateway-0.sqlite3", [])
    relay = Relay(outbox, stream_config(nats_server))
    try:
        # A bound far above the hang guard: only an early return ends it in time.
        flushed = await asyncio.wait_for(relay.flush(4 * HANG_GUARD_S), HANG_GUARD_S)
    finally:
        await outbox.close()
    assert flushed.emptied and flushed.relayed == 0


async def test_rows_left_behind_are_relayed_by_the_same_id_after_restart_and_billed_once(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """A stop whose flush ran out of time: the next gateway of that id (the same file on
    the same volume) relays what is left. Half of what was left had reached the stream
    already (its PubAck was lost), published without a Nats-Msg-Id so that the stream
    keeps both copies, as it does beyond its duplicate window: the ledger bills once."""
    config = stream_config(nats_server)
    path = tmp_path / "outbox" / "gateway-0.sqlite3"
    ids = [f"r{i:03d}" for i in range(200)]
    first = await outbox_with(path, ids)
    await first.close()  # the first run of gateway-0 stopped with all 200 on disk
    nc, js = await connect(config)
    try:
        await ensure_stream(js, config)
        for request_id in ids[:100]:  # stored, acknowledgement lost, row still there
            await js.publish(config.subject, encode(usage_event(request_id)))
    finally:
        await nc.close()

    restarted = Outbox(path)
    metering = OutboxMetering(restarted, Relay(restarted, config), flush_s=10.0)
    background = Background(on_fatal=lambda name: None)
    try:
        await metering.start(background)
        assert metering.left_at_start == len(ids)
        await eventually(lambda: drained(restarted), 20)
        await background.stop()
    finally:
        await metering.close()
    assert sorted(await stored_ids(config)) == sorted(ids[:100] + ids)

    ledger = await SQLiteLedger.open(tmp_path / "ledger.sqlite3")
    source = JetStreamSource(config)
    consumer = Consumer(source, ledger, batch_events=100, fetch_wait_s=0.2)
    try:
        applied = [await consumer.step() for _ in range(6)]
        assert await ledger.processed_ids() == dict.fromkeys(ids, 1)
        new = sum(step.new for step in applied if step is not None)
        duplicates = sum(step.duplicates for step in applied if step is not None)
        assert (new, duplicates) == (len(ids), 100)
    finally:
        await source.close()
        await ledger.close()


async def test_the_gateways_stop_flushes_and_logs_what_went_and_what_stayed(
    frozen: NatsServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="headway.metering")
    config = stream_config(frozen)
    path = tmp_path / "gateway-0.sqlite3"

    # A stop with NATS answering: everything goes, logged as such.
    outbox = Outbox(path)
    metering = OutboxMetering(outbox, Relay(outbox, config), flush_s=10.0)
    background = Background(on_fatal=lambda name: None)
    await metering.start(background)
    await background.stop()  # as GatewayService.stop: the loop first, then the metering
    for i in range(30):
        await metering.record(usage_event(f"a{i}"))
    await metering.close()
    assert outbox.depth == 0
    assert "30 events relayed" in caplog.text and ", 0 left" in caplog.text

    # A stop with NATS frozen: the flush gives up at its bound, the rest stays, and says so.
    caplog.clear()
    outbox = Outbox(path)
    metering = OutboxMetering(outbox, Relay(outbox, config), flush_s=0.3)
    background = Background(on_fatal=lambda name: None)
    await metering.start(background)
    await background.stop()
    for i in range(7):
        await metering.record(usage_event(f"b{i}"))
    freeze(frozen)
    try:
        await asyncio.wait_for(metering.close(), HANG_GUARD_S)
    finally:
        thaw(frozen)
    assert outbox.depth == 7
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("0 events relayed" in line and "7 left" in line for line in warnings), warnings

    # The next run of the same id finds them, reports them, and relays them.
    outbox = Outbox(path)
    metering = OutboxMetering(outbox, Relay(outbox, config), flush_s=10.0)
    background = Background(on_fatal=lambda name: None)
    try:
        await metering.start(background)
        assert metering.left_at_start == 7
        await eventually(lambda: drained(outbox), 20)
        await background.stop()
    finally:
        await metering.close()
    stored = await stored_ids(config)
    assert sorted(stored) == sorted([f"a{i}" for i in range(30)] + [f"b{i}" for i in range(7)])

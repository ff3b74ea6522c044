"""The embedded source over the gateways' outbox files: every file read, acks deleting
rows (and the gateway's depth following), redelivery after a crash or an ack wait, and
new files found on a rescan."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from headway.billing.sources.base import Delivery
from headway.billing.sources.outbox import OutboxSource
from headway.metering.event import decode
from headway.metering.outbox import Outbox
from tests.builders import usage_event
from tests.fakes import FakeClock, until


async def outbox_with(path: Path, request_ids: list[str]) -> Outbox:
    outbox = Outbox(path, refresh_s=0.05)
    await outbox.start()
    await asyncio.gather(*(outbox.record(usage_event(rid)) for rid in request_ids))
    return outbox


def request_ids(deliveries: Sequence[Delivery]) -> list[str]:
    return [decode(delivery.data).request_id for delivery in deliveries]


async def test_reads_every_outbox_and_acks_delete_the_rows(tmp_path: Path) -> None:
    gw_a = await outbox_with(tmp_path / "gw-a.sqlite3", ["a0", "a1", "a2"])
    gw_b = await outbox_with(tmp_path / "gw-b.sqlite3", ["b0", "b1", "b2", "b3"])
    (tmp_path / "notes.txt").write_text("not an outbox")
    source = OutboxSource(tmp_path)
    try:
        assert await source.pending() == 7
        deliveries = await source.fetch(100, 1.0)
        assert sorted(request_ids(deliveries)) == ["a0", "a1", "a2", "b0", "b1", "b2", "b3"]
        assert {d.source for d in deliveries} >= {"outbox gw-a #1", "outbox gw-b #4"}
        assert all(d.published_at is not None for d in deliveries)
        assert await source.pending() == 7
        assert await source.fetch(100, 0.1) == []  # the cursors moved past them
        await source.ack([d for d in deliveries if d.source.startswith("outbox gw-b")])
        assert await source.pending() == 3
        await until(lambda: gw_b.depth == 0 and gw_a.depth == 3)
        await gw_a.record(usage_event("a3"))
        assert request_ids(await source.fetch(100, 1.0)) == ["a3"]
    finally:
        await source.close()
        await gw_a.close()
        await gw_b.close()


async def test_rows_not_acknowledged_before_a_crash_come_again(tmp_path: Path) -> None:
    gateway = await outbox_with(tmp_path / "gw-a.sqlite3", [f"r{i}" for i in range(8)])
    crashed = OutboxSource(tmp_path)
    try:
        first = await crashed.fetch(5, 1.0)
        assert request_ids(first) == ["r0", "r1", "r2", "r3", "r4"]
        await crashed.ack(first[:2])  # the rest: fetched, never acknowledged
    finally:
        await crashed.close()
    restarted = OutboxSource(tmp_path)
    try:
        again = await restarted.fetch(100, 1.0)
        assert request_ids(again) == ["r2", "r3", "r4", "r5", "r6", "r7"]
        await restarted.ack(again)
        assert await restarted.pending() == 0
    finally:
        await restarted.close()
        await gateway.close()


async def test_rows_unacknowledged_past_the_ack_wait_are_fetched_again(tmp_path: Path) -> None:
    gateway = await outbox_with(tmp_path / "gw-a.sqlite3", ["r0", "r1", "r2"])
    clock = FakeClock()
    source = OutboxSource(tmp_path, ack_wait_s=30, clock=clock)
    try:
        first = await source.fetch(100, 1.0)
        await source.ack(first[:1])
        clock.advance(29)
        assert await source.fetch(100, 0.05) == []
        clock.advance(1)
        assert request_ids(await source.fetch(100, 1.0)) == ["r1", "r2"]
    finally:
        await source.close()
        await gateway.close()


async def test_a_gateway_appearing_later_is_found_on_the_next_rescan(tmp_path: Path) -> None:
    clock = FakeClock()
    source = OutboxSource(tmp_path, rescan_s=2.0, clock=clock)
    gateway: Outbox | None = None
    try:
        assert await source.fetch(100, 0.05) == []
        gateway = await outbox_with(tmp_path / "gw-new.sqlite3", ["n0"])
        assert await source.fetch(100, 0.05) == []  # not rescanned yet
        clock.advance(2.0)
        assert request_ids(await source.fetch(100, 1.0)) == ["n0"]
    finally:
        await source.close()
        if gateway is not None:
            await gateway.close()

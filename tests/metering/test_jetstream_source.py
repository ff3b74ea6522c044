"""The JetStream source against a real nats-server: deliveries, redelivery of what is not
acknowledged, acks recorded when ``ack`` returns (even if the consumer dies at once), and
a NATS restart under a running source."""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from pathlib import Path

from headway.billing.sources.base import Delivery
from headway.billing.sources.jetstream import JetStreamSource
from headway.metering.event import decode, encode
from headway.metering.stream import StreamConfig, connect, ensure_stream
from headway_tools.testing.nats_server import NatsServer
from tests.builders import usage_event


def stream_config(server: NatsServer, ack_wait_s: float = 30.0) -> StreamConfig:
    return StreamConfig(
        servers=(server.url,),
        ack_wait_s=ack_wait_s,
        reconnect_wait_s=0.1,
        monitor_urls=(server.monitor_url,),
    )


async def publish(config: StreamConfig, request_ids: list[str]) -> None:
    nc, js = await connect(config)
    try:
        await ensure_stream(js, config)
        for request_id in request_ids:
            await js.publish(
                config.subject,
                encode(usage_event(request_id)),
                headers={"Nats-Msg-Id": request_id},
            )
    finally:
        await nc.close()


async def fetch_at_least(
    source: JetStreamSource, count: int, timeout_s: float = 10.0
) -> list[Delivery]:
    deadline = time.monotonic() + timeout_s
    deliveries: list[Delivery] = []
    while len(deliveries) < count:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"{len(deliveries)} of {count} deliveries in {timeout_s} s"
        deliveries += await source.fetch(count - len(deliveries), min(remaining, 1.0))
    return deliveries


def request_ids(deliveries: list[Delivery]) -> list[str]:
    return [decode(delivery.data).request_id for delivery in deliveries]


async def test_deliveries_then_redelivery_of_what_was_not_acknowledged(
    nats_server: NatsServer,
) -> None:
    config = stream_config(nats_server, ack_wait_s=1.0)
    source = JetStreamSource(config)
    try:
        assert await source.fetch(10, 0.5) == []  # creates stream and consumer, none yet
        published = time.time()
        await publish(config, [f"r{i}" for i in range(10)])
        first = await fetch_at_least(source, 10)
        assert request_ids(first) == [f"r{i}" for i in range(10)]
        assert [d.source for d in first[:2]] == ["USAGE #1", "USAGE #2"]
        assert all(abs((d.published_at or 0) - published) < 5 for d in first)
        await source.ack(first[:6])
        assert await source.pending() == 4  # delivered, not acknowledged
        again = await fetch_at_least(source, 4)  # after ack_wait
        # each message's ack timer runs out on its own: redelivery order is not promised
        assert sorted(request_ids(again)) == ["r6", "r7", "r8", "r9"]
        await source.ack(again)
        assert await source.pending() == 0
        assert await source.fetch(10, 1.5) == []  # nothing comes back after the ack wait
    finally:
        await source.close()


ACK_AND_DIE = """
import asyncio, os, signal, sys
from headway.billing.sources.jetstream import JetStreamSource
from headway.metering.stream import StreamConfig

async def main():
    config = StreamConfig(servers=(sys.argv[1],), ack_wait_s=1.0, monitor_urls=(sys.argv[2],))
    source = JetStreamSource(config)
    deliveries = []
    while len(deliveries) < 500:
        deliveries += await source.fetch(500 - len(deliveries), 1.0)
    await source.ack(deliveries)
    os.kill(os.getpid(), signal.SIGKILL)  # nothing flushed after ack returned

asyncio.run(main())
"""


async def test_acks_are_recorded_when_ack_returns_even_if_the_consumer_dies_at_once(
    nats_server: NatsServer,
) -> None:
    config = stream_config(nats_server, ack_wait_s=1.0)
    await publish(config, [f"r{i}" for i in range(500)])
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        ACK_AND_DIE,
        nats_server.url,
        nats_server.monitor_url,
        cwd=Path(__file__).parents[2],
    )
    assert await asyncio.wait_for(child.wait(), 30) == -signal.SIGKILL
    nc, js = await connect(config)
    try:
        info = await js.consumer_info(config.stream, config.durable)
    finally:
        await nc.close()
    assert info.num_ack_pending == 0 and info.ack_floor is not None
    assert info.ack_floor.stream_seq == 500
    source = JetStreamSource(config)
    try:
        assert await source.fetch(500, 2.5) == []  # well past the ack wait
    finally:
        await source.close()


async def test_fetch_returns_nothing_while_nats_restarts_then_carries_on(
    nats_server: NatsServer,
) -> None:
    """The ack of ``before`` may die with the server: nats-server writes a consumer's
    acks to disk lazily, even with ``sync_interval: always``. Then ``before`` comes
    again after the ack wait, which the ledger drops as a duplicate."""
    config = stream_config(nats_server, ack_wait_s=1.0)
    source = JetStreamSource(config)
    try:
        await publish(config, ["before"])
        before = await fetch_at_least(source, 1)
        await source.ack(before)
        nats_server.kill()
        assert await source.fetch(10, 0.3) == []
        assert await source.pending() is None
        nats_server.start()
        await publish(config, ["after"])
        seen: list[str] = []
        deadline = time.monotonic() + 10
        while "after" not in seen or await source.pending() != 0:
            assert time.monotonic() < deadline, f"still pending; seen {seen}"
            deliveries = await source.fetch(10, 0.5)
            seen += request_ids(list(deliveries))
            await source.ack(deliveries)
        assert set(seen) <= {"before", "after"}
    finally:
        await source.close()

"""The streams on a three-server JetStream cluster, as the prod overlay runs it: three
replicas from settings, each server's fsync setting read, and one server that does not
fsync every write refusing the stream."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest
from nats.js import api

from headway.metering.build import stream_config
from headway.metering.stream import StreamConfig, connect, ensure_stream
from headway.metering.stream_guard import StreamDurabilityError
from headway.settings import Settings, StreamsSettings
from headway_tools.testing.nats_server import NatsServer, wait_for_cluster
from headway_tools.testing.server import free_port


@contextmanager
def cluster(sync_always: Sequence[bool]) -> Iterator[list[NatsServer]]:
    ports = [free_port() for _ in sync_always]
    servers = [
        NatsServer(
            sync_always=syncs,
            cluster_port=port,
            routes=[other for other in ports if other != port],
        )
        for syncs, port in zip(sync_always, ports, strict=True)
    ]
    try:
        with ThreadPoolExecutor(len(servers)) as pool:  # a majority must meet to be healthy
            list(pool.map(NatsServer.start, servers))
        wait_for_cluster(servers)
        yield servers
    finally:
        for server in servers:
            server.close()


def usage_on(servers: list[NatsServer]) -> StreamConfig:
    """The prod overlay's settings: every server a seed and a monitoring URL, 3 replicas."""
    settings = Settings(
        nats_url=",".join(server.url for server in servers),
        streams=StreamsSettings.model_validate(
            {
                "monitor_urls": ",".join(server.monitor_url for server in servers),
                "usage": {"replicas": 3},
            }
        ),
    )
    return dataclasses.replace(stream_config(settings), reconnect_wait_s=0.1)


async def test_the_usage_stream_gets_three_replicas_on_a_synced_cluster() -> None:
    with cluster([True, True, True]) as servers:
        config = usage_on(servers)
        nc, js = await connect(config)
        try:
            info = await ensure_stream(js, config)
            assert info.config.num_replicas == 3
            assert info.config.storage == api.StorageType.FILE
            ack = await js.publish("usage.events", b"{}", headers={api.Header.MSG_ID: "r1"})
            assert ack.stream == "USAGE"  # a PubAck: a majority has stored it
            found = await js.stream_info("USAGE")
            assert found.cluster is not None and len(found.cluster.replicas or []) == 2
        finally:
            await nc.close()


async def test_one_server_that_does_not_fsync_refuses_the_stream() -> None:
    with cluster([True, False, True]) as servers:
        config = usage_on(servers)
        nc, js = await connect(config)
        try:
            with pytest.raises(StreamDurabilityError) as refused:
                await ensure_stream(js, config)
            assert servers[1].monitor_url in str(refused.value)
            for synced in (servers[0], servers[2]):
                assert synced.monitor_url not in str(refused.value)
        finally:
            await nc.close()

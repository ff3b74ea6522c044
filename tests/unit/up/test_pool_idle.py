"""When `headway up` stops an idle pool: the gateways' readings, and the quiet clock."""

import random

from prometheus_client import generate_latest

from headway.gateway.admission.controller import AdmissionConfig
from headway.gateway.coldstart import ColdStarts, HoldPolicy
from headway.gateway.coldstart_metrics import ColdStartMetrics
from headway.gateway.metrics import GatewayMetrics
from headway.gateway.pool import ReplicaPool
from headway.gateway.pools import Pools
from headway.transport.base import Reply
from headway.transport.mock import MockTransport
from headway.up.pool_idle import IdleWatch, PoolTraffic, pool_traffic


def exposition(chunks: int, ready: int, held: int) -> str:
    """What a gateway's /metrics says of its embed pool, from the gateway's own metrics."""
    pool = ReplicaPool(
        "embed",
        (),
        MockTransport(lambda request: Reply(503, b"{}", {})),
        health_interval_s=1,
        admission=AdmissionConfig(),
        rng=random.Random(1),
    )
    pool.counts.chunks = chunks
    pool.ready_count = ready
    metrics = GatewayMetrics()
    metrics.watch_pool(pool)
    cold_starts = ColdStarts(Pools({"embed": pool}), HoldPolicy())
    cold_starts["embed"].held_requests = held
    ColdStartMetrics(metrics.registry).watch(cold_starts)
    return generate_latest(metrics.registry).decode()


def test_the_readings_of_several_gateways_add_up():
    traffic = pool_traffic([exposition(5, 1, 0), exposition(7, 2, 3)])
    assert traffic == {"embed": PoolTraffic(chunks=12, ready=2, waiting=3)}


def test_a_pool_is_idle_after_the_interval_without_chunks():
    watch = IdleWatch(2.0)
    quiet = PoolTraffic(chunks=10, ready=1, waiting=0)
    assert not watch.observe("embed", quiet, 100.0)  # the first reading only starts the clock
    assert not watch.observe("embed", quiet, 101.0)
    assert watch.observe("embed", quiet, 102.0)


def test_chunks_held_requests_a_pool_not_ready_and_no_reading_are_all_traffic():
    watch = IdleWatch(2.0)
    watch.observe("embed", PoolTraffic(10, 1, 0), 100.0)
    for now, traffic in (
        (102.0, PoolTraffic(11, 1, 0)),  # a chunk was sent
        (104.0, PoolTraffic(11, 1, 2)),  # requests wait for it
        (106.0, PoolTraffic(11, 0, 0)),  # starting (loading its model): never stopped
        (108.0, None),  # the gateways could not be read
    ):
        assert not watch.observe("embed", traffic, now)
    assert not watch.observe("embed", PoolTraffic(11, 1, 0), 109.0)
    assert watch.observe("embed", PoolTraffic(11, 1, 0), 110.0)


def test_a_stopped_pool_starts_a_fresh_watch():
    watch = IdleWatch(2.0)
    watch.observe("embed", PoolTraffic(3, 1, 0), 100.0)
    assert watch.observe("embed", PoolTraffic(3, 1, 0), 103.0)
    watch.forget("embed")
    assert not watch.observe("embed", PoolTraffic(3, 1, 0), 200.0)
    assert not watch.observe("rerank", PoolTraffic(0, 1, 0), 200.0)  # pools apart

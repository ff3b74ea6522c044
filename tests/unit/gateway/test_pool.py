import random
from collections import Counter

import msgspec
import pytest

from headway.gateway.admission.controller import AdmissionConfig
from headway.gateway.discovery.dns_name import parse_target
from headway.gateway.pool import ReplicaPool, Spread, expected_wait
from headway.transport.base import ConnectFailed, Reply, UpstreamRequest
from headway.transport.mock import MockTransport


class ReadinessTransport(MockTransport):
    """Answers /readyz from a table: url -> (ready, version); a missing url is unreachable."""

    def __init__(self, states: dict[str, tuple[bool, str]]) -> None:
        super().__init__(self._readyz)
        self.states = states

    def _readyz(self, request: UpstreamRequest) -> Reply:
        assert (request.method, request.path) == ("GET", "/readyz")
        if request.base_url not in self.states:
            raise ConnectFailed("connection refused")
        ready, version = self.states[request.base_url]
        body = msgspec.json.encode({"ready": ready, "model_version": version, "kind": "embedding"})
        return Reply(200 if ready else 503, body, {})


def pool_of(transport: ReadinessTransport) -> ReplicaPool:
    return ReplicaPool(
        "embed",
        tuple(transport.states),
        transport,
        health_interval_s=1,
        admission=AdmissionConfig(),
        rng=random.Random(7),
    )


async def test_only_ready_replicas_of_the_requested_version_are_picked():
    transport = ReadinessTransport(
        {"http://a": (True, "v1"), "http://b": (True, "v2"), "http://c": (False, "v1")}
    )
    pool = pool_of(transport)
    await pool.poll_once()
    assert pool.ready_count == 2
    assert pool.versions == {"v1", "v2"}
    assert {pool.pick("v1").url for _ in range(10)} == {"http://a"}
    assert pool.pick("v3") is None


async def test_power_of_two_choices_prefers_the_less_loaded_and_spreads_ties():
    transport = ReadinessTransport({"http://a": (True, "v"), "http://b": (True, "v")})
    pool = pool_of(transport)
    await pool.poll_once()
    assert {pool.pick("v").url for _ in range(50)} == {"http://a", "http://b"}
    pool.replicas[0].outstanding_texts = 5
    assert {pool.pick("v").url for _ in range(50)} == {"http://b"}
    assert pool.pick("v", exclude=pool.replicas[1]).url == "http://a"


async def test_a_slow_replica_counts_as_more_loaded_and_an_unknown_one_as_typical():
    transport = ReadinessTransport({f"http://{n}": (True, "v") for n in "abc"})
    pool = pool_of(transport)
    await pool.poll_once()
    a, b, c = pool.replicas
    a.latency_s, b.latency_s = 0.1, 1.0  # c has answered nothing yet
    wait = expected_wait(pool.replicas)
    assert wait(a) < wait(c) < wait(b)  # c counts as the mean of a and b, not as free
    a.outstanding_texts = 20  # 21 x 0.1 s queued behind a: now b's 1 x 1.0 s is shorter
    assert wait(b) < wait(a)
    picks = Counter(pool.pick("v").url for _ in range(300))
    assert picks["http://b"] < picks["http://c"]


async def test_a_requests_chunks_go_to_different_replicas_round_by_round():
    transport = ReadinessTransport({f"http://{n}": (True, "v") for n in "abcd"})
    pool = pool_of(transport)
    await pool.poll_once()
    for _ in range(20):
        spread = Spread()
        picks = [pool.pick("v", spread=spread).url for _ in range(8)]
        assert sorted(Counter(picks).values()) == [2, 2, 2, 2]
        assert len(set(picks[:4])) == 4


async def test_unreachable_replicas_drop_out_and_come_back_with_the_next_poll():
    transport = ReadinessTransport({"http://a": (True, "v")})
    pool = pool_of(transport)
    await pool.poll_once()
    pool.mark_unreachable(pool.replicas[0])
    assert pool.ready_count == 0
    assert pool.versions == frozenset()
    await pool.poll_once()
    assert pool.ready_count == 1


async def test_a_ready_replica_that_goes_silent_is_ejected_until_it_answers_again():
    transport = ReadinessTransport({"http://a": (True, "v"), "http://b": (True, "v")})
    pool = pool_of(transport)
    await pool.poll_once()
    a, b = pool.replicas
    pool.mark_unreachable(a)  # a call was refused: it crashed
    pool.mark_unreachable(a)  # another call, the same crash
    assert (pool.state(a), pool.ejection_reason(a)) == ("ejected", "unreachable")
    assert pool.counts.ejections == 1
    del transport.states["http://b"]
    await pool.poll_once()  # b stopped answering /readyz while ready: crashed too
    assert (pool.state(b), pool.ejection_reason(b)) == ("ejected", "unreachable")
    assert pool.counts.ejections == 2
    transport.states["http://a"] = (False, "v")  # restarted: answers, not ready yet
    await pool.poll_once()
    assert (pool.state(a), pool.ejection_reason(a)) == ("unready", "")
    transport.states["http://a"] = (True, "v")
    await pool.poll_once()
    assert pool.state(a) == "ready" and pool.counts.ejections == 2


async def test_a_replica_that_says_it_is_not_ready_first_is_unready_not_ejected():
    transport = ReadinessTransport({"http://a": (True, "v")})
    pool = pool_of(transport)
    await pool.poll_once()
    transport.states["http://a"] = (False, "v")  # draining: /readyz 503
    await pool.poll_once()
    del transport.states["http://a"]  # then gone
    await pool.poll_once()
    (a,) = pool.replicas
    assert (pool.state(a), pool.ejection_reason(a), pool.counts.ejections) == ("unready", "", 0)
    assert pool.cold


async def test_a_replica_whose_calls_keep_failing_is_ejected_as_failing():
    transport = ReadinessTransport({"http://a": (True, "v"), "http://b": (True, "v")})
    pool = pool_of(transport)
    await pool.poll_once()
    a = pool.replicas[0]
    for _ in range(pool.routing.ejection.threshold):
        pool.record(a, ok=False)
    assert (pool.state(a), pool.ejection_reason(a), pool.counts.ejections) == (
        "ejected",
        "failing",
        1,
    )


async def test_discovery_adds_replicas_unready_until_polled_and_drops_vanished_ones():
    transport = ReadinessTransport({"http://a": (True, "v"), "http://b": (True, "v")})
    pool = ReplicaPool(
        "embed", ("http://a",), transport, health_interval_s=1, admission=AdmissionConfig()
    )
    await pool.poll_once()
    kept = pool.replicas[0]
    kept.outstanding_texts = 3
    await pool.set_addresses(["http://a", "http://b"])
    assert [r.url for r in pool.replicas] == ["http://a", "http://b"]
    assert pool.replicas[0] is kept  # its state survives
    assert pool.ready_count == 2  # the new one was polled before it counts
    await pool.set_addresses(["http://b"])
    assert [r.url for r in pool.replicas] == ["http://b"]
    assert pool.ready_count == 1
    assert pool.pick("v").url == "http://b"


def test_dns_targets_parse_strictly():
    assert parse_target("embed.ns.svc:9100") == ("embed.ns.svc", 9100)
    for bad in ("embed", "embed:", ":9100", "embed:http"):
        with pytest.raises(ValueError, match="NAME:PORT"):
            parse_target(bad)


async def test_a_replica_serving_several_versions_takes_chunks_of_each():
    def readyz(request: UpstreamRequest) -> Reply:
        served = [{"version": v, "kind": "embedding", "dimensions": 4} for v in ("v1", "v2")]
        body = {"ready": True, "model_version": "v1", "versions": served}
        return Reply(200, msgspec.json.encode(body), {})

    pool = ReplicaPool(
        "embed",
        ("http://multi",),
        MockTransport(readyz),
        health_interval_s=1,
        admission=AdmissionConfig(),
        rng=random.Random(7),
    )
    await pool.poll_once()
    assert pool.versions == {"v1", "v2"}
    assert pool.pick("v2").url == "http://multi"
    assert pool.pick("v3") is None


async def test_a_version_served_on_demand_takes_chunks_before_it_is_loaded():
    def readyz(request: UpstreamRequest) -> Reply:
        served = [
            {"version": "v1", "kind": "embedding", "dimensions": 4, "loaded": True},
            {"version": "v2", "kind": "embedding", "dimensions": 4, "loaded": False},
        ]
        body = {"ready": True, "model_version": "v1", "versions": served}
        return Reply(200, msgspec.json.encode(body), {})

    pool = ReplicaPool(
        "embed",
        ("http://lazy",),
        MockTransport(readyz),
        health_interval_s=1,
        admission=AdmissionConfig(),
        rng=random.Random(7),
    )
    await pool.poll_once()
    (replica,) = pool.replicas
    assert (replica.versions, replica.loaded) == ({"v1", "v2"}, {"v1"})
    assert pool.pick("v2").url == "http://lazy"

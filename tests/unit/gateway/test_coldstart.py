"""Holding requests for a cold pool: cold vs failing, the wait, its bounds, its metrics."""

import asyncio
import random

import msgspec
import pytest
from prometheus_client import CollectorRegistry

from headway.gateway.admission.controller import AdmissionConfig, AdmissionController, Permit
from headway.gateway.coldstart import ColdStart, ColdStarts, HoldPolicy
from headway.gateway.coldstart_metrics import ColdStartMetrics
from headway.gateway.context import Deadline
from headway.gateway.pool import ReplicaPool
from headway.gateway.pools import Pools
from headway.transport.base import ConnectFailed, Reply, UpstreamRequest
from headway.transport.mock import MockTransport
from tests.fakes import FakeClock, until

A, B = "http://a", "http://b"


class Replicas(MockTransport):
    """/readyz by url: "ready" (200), "starting" (503) or "down" (connection refused)."""

    def __init__(self, **states: str) -> None:
        super().__init__(self._readyz)
        self.states = {f"http://{name}": state for name, state in states.items()}

    def _readyz(self, request: UpstreamRequest) -> Reply:
        state = self.states[request.base_url]
        if state == "down":
            raise ConnectFailed("connection refused")
        ready = state == "ready"
        body = msgspec.json.encode({"ready": ready, "model_version": "v", "kind": "embedding"})
        return Reply(200 if ready else 503, body, {})


def pool_of(transport: Replicas, clock: FakeClock | None = None) -> ReplicaPool:
    return ReplicaPool(
        "embed",
        tuple(transport.states),
        transport,
        health_interval_s=1,
        admission=AdmissionConfig(),
        clock=clock or FakeClock(),
        rng=random.Random(3),
    )


def far_deadline() -> Deadline:
    clock = FakeClock()
    return Deadline(clock.now + 60, clock)


async def test_a_pool_never_ready_or_drained_is_cold_and_a_crashed_one_is_failing():
    transport = Replicas(a="down", b="starting")
    pool = pool_of(transport)
    await pool.poll_once()
    assert pool.ready_count == 0 and pool.cold  # nothing ready since start: starting

    transport.states.update({A: "ready", B: "ready"})
    await pool.poll_once()
    assert not pool.cold
    transport.states.update({A: "starting", B: "starting"})  # SIGTERM: unready first (drain)
    await pool.poll_once()
    transport.states.update({A: "down", B: "down"})  # then gone
    await pool.poll_once()
    assert pool.ready_count == 0 and pool.cold  # stopped on purpose: cold, not failing

    transport.states.update({A: "ready", B: "ready"})
    await pool.poll_once()
    transport.states.update({A: "down", B: "down"})  # gone without a word: crashed
    await pool.poll_once()
    assert pool.ready_count == 0 and not pool.cold
    transport.states.update({A: "starting"})  # restarted, loading: it answers again
    await pool.poll_once()
    assert not pool.cold  # b is still lost
    transport.states.update({B: "starting"})
    await pool.poll_once()
    assert pool.cold


async def test_a_refused_call_to_a_ready_replica_makes_the_pool_failing():
    pool = pool_of(Replicas(a="ready"))
    await pool.poll_once()
    pool.mark_unreachable(pool.replicas[0])
    assert pool.ready_count == 0 and not pool.cold


async def test_a_pool_whose_replica_was_ejected_is_failing_not_cold():
    clock = FakeClock()
    transport = Replicas(a="ready", b="ready")
    pool = pool_of(transport, clock)
    await pool.poll_once()
    for _ in range(pool.routing.ejection.threshold):
        pool.record(pool.replicas[0], ok=False)
    assert pool.state(pool.replicas[0]) == "ejected"
    transport.states.update({A: "starting", B: "starting"})
    await pool.poll_once()
    assert pool.ready_count == 0 and not pool.cold


async def test_a_failing_pool_does_not_hold_but_is_wanted():
    pool = pool_of(Replicas(a="ready"))
    await pool.poll_once()
    pool.mark_unreachable(pool.replicas[0])
    cold = ColdStart(pool, HoldPolicy())
    assert await cold.hold(1, far_deadline()) is None  # at once: the path fails it as before
    assert cold.held_requests == 0 and cold.wanted


async def test_holding_off_does_not_hold():
    pool = pool_of(Replicas(a="down"))
    await pool.poll_once()
    cold = ColdStart(pool, HoldPolicy(enabled=False))
    assert await cold.hold(1, far_deadline()) is None
    assert cold.held_requests == 0 and cold.wanted


async def test_a_held_request_goes_on_once_a_replica_is_ready():
    transport = Replicas(a="down")
    pool = pool_of(transport)
    await pool.poll_once()
    waits: list[float] = []
    cold = ColdStart(pool, HoldPolicy(), observe_wait=waits.append)
    held = asyncio.create_task(cold.hold(3, far_deadline()))
    await until(lambda: cold.held_requests == 1)
    assert (cold.held_texts, cold.wanted) == (3, True)
    await cold.poll_step()  # still down: the fast poll changes nothing
    assert not held.done()
    transport.states[A] = "ready"
    await cold.poll_step()
    assert await held is None
    assert (cold.held_requests, cold.held_texts, len(waits)) == (0, 0, 1)


async def test_the_fast_poll_polls_only_while_requests_are_held():
    transport = Replicas(a="down")
    pool = pool_of(transport)
    cold = ColdStart(pool, HoldPolicy())
    await cold.poll_step()
    assert transport.requests == []


async def test_a_deadline_within_the_reserve_fails_at_once():
    pool = pool_of(Replicas(a="down"))
    await pool.poll_once()
    waits: list[float] = []
    cold = ColdStart(pool, HoldPolicy(reserve_s=0.5), observe_wait=waits.append)
    clock = FakeClock()
    refused = await cold.hold(1, Deadline(clock.now + 0.5, clock))
    assert refused is not None and refused.reason == "still_cold"
    assert refused.retry_after_s > 0
    assert waits == []  # never held: it could not have been served in time


async def test_a_pool_still_cold_before_the_deadline_refuses_before_it():
    loop = asyncio.get_running_loop()
    transport = Replicas(a="down")
    pool = pool_of(transport)
    await pool.poll_once()
    cold = ColdStart(pool, HoldPolicy(reserve_s=1.0), clock=loop.time)
    deadline = Deadline(loop.time() + 1.02, loop.time)
    refused = await cold.hold(1, deadline)
    assert refused is not None and refused.reason == "still_cold"
    assert loop.time() < deadline.at  # the reserve is left: refused before, not at or after
    transport.states[A] = "ready"  # the replica turns ready only after the refusal
    await pool.poll_once()
    assert cold.held_requests == 0 and pool.ready_count == 1


async def test_the_held_texts_are_bounded_and_an_empty_hold_takes_any_request():
    pool = pool_of(Replicas(a="down"))
    await pool.poll_once()
    cold = ColdStart(pool, HoldPolicy(max_held_texts=4))
    big = asyncio.create_task(cold.hold(9, far_deadline()))  # alone: held
    await until(lambda: cold.held_requests == 1)
    refused = await cold.hold(1, far_deadline())
    assert refused is not None and refused.reason == "held_full"
    big.cancel()
    with pytest.raises(asyncio.CancelledError):
        await big
    first = asyncio.create_task(cold.hold(3, far_deadline()))
    fits = asyncio.create_task(cold.hold(1, far_deadline()))
    await until(lambda: cold.held_texts == 4)
    over = await cold.hold(1, far_deadline())
    assert over is not None and over.reason == "held_full"
    for task in (first, fits):
        task.cancel()
    await asyncio.gather(first, fits, return_exceptions=True)
    assert (cold.held_requests, cold.held_texts) == (0, 0)


async def test_a_cancelled_request_gives_its_place_back():
    pool = pool_of(Replicas(a="down"))
    await pool.poll_once()
    cold = ColdStart(pool, HoldPolicy())
    held = asyncio.create_task(cold.hold(2, far_deadline()))
    await until(lambda: cold.held_requests == 1)
    held.cancel()  # the client went away
    with pytest.raises(asyncio.CancelledError):
        await held
    assert (cold.held_requests, cold.held_texts) == (0, 0)


async def test_the_gauge_counts_held_requests_and_the_histogram_their_waits():
    transport = Replicas(a="down")
    pool = pool_of(transport)
    await pool.poll_once()
    registry = CollectorRegistry()
    metrics = ColdStartMetrics(registry)
    cold_starts = ColdStarts(Pools({"embed": pool}), HoldPolicy(), observe_wait=metrics.waited)
    metrics.watch(cold_starts)

    def waiting() -> float | None:
        return registry.get_sample_value("headway_pool_waiting_requests", {"pool": "embed"})

    def waits() -> float | None:
        return registry.get_sample_value("headway_cold_start_wait_seconds_count", {"pool": "embed"})

    assert (waiting(), waits()) == (0, 0)
    cold = cold_starts.of(cold_starts["embed"].pool)
    assert cold is cold_starts["embed"] and cold_starts.of(None) is None
    held = [asyncio.create_task(cold.hold(1, far_deadline())) for _ in range(2)]
    await until(lambda: waiting() == 2)
    transport.states[A] = "ready"
    await cold.poll_step()
    assert await asyncio.gather(*held) == [None, None]
    assert (waiting(), waits()) == (0, 2)


def test_admission_does_not_shed_a_pool_at_zero_replicas():
    """A cold pool's first requests: zero ready replicas is no reason to refuse them."""
    controller = AdmissionController(AdmissionConfig(), lambda: 0, clock=FakeClock())
    assert controller.precheck("interactive") is None
    assert isinstance(controller.try_admit("t", "interactive", 20), Permit)
    assert isinstance(controller.try_admit("t", "interactive", 10), Permit)


async def test_while_requests_are_held_discovery_is_asked_again_twice_a_second():
    """A headless service names only ready pods: the first replica is a new address."""
    clock = FakeClock()
    transport = Replicas(a="ready")
    pool = ReplicaPool(
        "embed", (), transport, health_interval_s=1, admission=AdmissionConfig(), clock=clock
    )
    asked: list[float] = []
    addresses: list[str] = []

    async def rediscover() -> None:
        asked.append(clock.now)
        await pool.set_addresses(addresses)

    cold = ColdStart(pool, HoldPolicy(), clock, rediscover=rediscover)
    await cold.poll_step()
    assert asked == []  # nothing held: nothing asked
    held = asyncio.create_task(cold.hold(1, far_deadline()))
    await until(lambda: cold.held_requests == 1)
    await cold.poll_step()
    clock.advance(0.2)
    await cold.poll_step()
    assert asked == [1000.0] and not held.done()  # once per half second, still none there
    addresses.append(A)  # the pod KEDA started is ready: the service names it
    clock.advance(0.3)
    await cold.poll_step()
    assert asked == [1000.0, 1000.5]
    assert await held is None and pool.ready_count == 1

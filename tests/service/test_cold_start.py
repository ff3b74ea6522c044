"""A pool at zero: the gateway is ready, holds a request until a replica is, within its
deadline, and tells the wake hook; a failing pool still fails at once."""

import asyncio
import json

import pytest

from tests.fakes import until
from tests.service.conftest import WORKER_URLS, auth, make_stack


class Scaled:
    """A discovery source whose addresses the test sets: a pool scaled to zero and back."""

    def __init__(self) -> None:
        self.urls: list[str] = []

    async def addresses(self) -> list[str]:
        return list(self.urls)


@pytest.fixture
async def cold(tmp_path):
    """The embed pool at zero replicas; health_interval_s=60 (the fixture's), so only the
    fast poll of a held request can see a replica turn ready."""
    scaled = Scaled()
    built = await make_stack(
        tmp_path, discovery=scaled, dns_interval_s=0.02, cold_start_poll_s=0.02
    )
    built.scaled = scaled
    yield built
    await built.close()


def embed(stack, timeout_ms: int = 10_000, texts: int = 1):
    return stack.client.post(
        "/v1/embeddings",
        headers=auth() | {"x-timeout-ms": str(timeout_ms)},
        json={"model": "synthetic", "input": [f"cold text {i}" for i in range(texts)]},
    )


def waiting(stack) -> float:
    value = stack.gateway.metrics.registry.get_sample_value(
        "headway_pool_waiting_requests", {"pool": "embed"}
    )
    assert value is not None
    return value


def cold_gauge(stack) -> float:
    value = stack.gateway.metrics.registry.get_sample_value("headway_pool_cold", {"pool": "embed"})
    assert value is not None
    return value


def waits(stack) -> float:
    value = stack.gateway.metrics.registry.get_sample_value(
        "headway_cold_start_wait_seconds_count", {"pool": "embed"}
    )
    assert value is not None
    return value


async def test_a_cold_gateway_is_ready_and_holds_the_request_until_a_replica_is(cold):
    ready = await cold.client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["pools"]["embed"]["ready"] == 0
    assert cold_gauge(cold) == 1
    request = asyncio.create_task(embed(cold))
    await until(lambda: waiting(cold) == 1)
    cold.transport.down.update(WORKER_URLS)  # replicas appear, starting (not answering)
    cold.scaled.urls = list(WORKER_URLS)
    pool = cold.gateway.pools["embed"]
    await until(lambda: len(pool.replicas) == 2)
    assert pool.ready_count == 0 and not request.done()
    cold.transport.down.clear()  # they answer ready: the fast poll sees it, not the 60 s one
    response = await request
    assert response.status_code == 200
    assert len(response.json()["data"]) == 1
    assert (waiting(cold), waits(cold), cold_gauge(cold)) == (0, 1, 0)


async def test_a_replica_too_late_for_the_deadline_fails_with_retry_after(cold):
    # 300 ms, of which the 200 ms reserve is kept for the work: refused after ~100 ms
    response = await embed(cold, timeout_ms=300)
    assert response.status_code == 503
    assert response.json()["error"]["type"] == "no_ready_replicas"
    assert int(response.headers["retry-after"]) >= 1
    assert cold.gateway.pools["embed"].ready_count == 0  # no replica came, before or since
    assert (waiting(cold), waits(cold)) == (0, 1)
    cold.scaled.urls = list(WORKER_URLS)  # the same request, once a replica is up, succeeds
    await until(lambda: cold.gateway.pools["embed"].ready_count == 2)
    assert (await embed(cold, timeout_ms=300)).status_code == 200


async def test_a_client_that_leaves_gives_its_place_back(cold):
    request = asyncio.create_task(embed(cold))
    await until(lambda: waiting(cold) == 1)
    request.cancel()
    with pytest.raises(asyncio.CancelledError):
        await request
    assert waiting(cold) == 0


async def test_held_texts_beyond_the_bound_are_shed(tmp_path):
    stack = await make_stack(
        tmp_path, discovery=Scaled(), cold_start_max_held_texts=4, cold_start_poll_s=0.02
    )
    try:
        first = asyncio.create_task(embed(stack, texts=3))
        await until(lambda: waiting(stack) == 1)
        over = await embed(stack, texts=2)
        assert over.status_code == 503 and over.json()["error"]["type"] == "overloaded"
        assert "retry-after" in over.headers
        shed = stack.gateway.metrics.registry.get_sample_value(
            "headway_shed_total", {"pool": "embed", "reason": "cold_start_full"}
        )
        assert shed == 1
        first.cancel()
        await asyncio.gather(first, return_exceptions=True)
    finally:
        await stack.close()


async def test_the_wake_hook_hears_of_a_held_request(tmp_path):
    """Through the gateway's own transport, as ``headway up``'s supervisor hears of it."""
    woken: list[object] = []

    async def supervisor(scope, receive, send) -> None:
        assert (scope["method"], scope["path"]) == ("POST", "/wake")
        woken.append(json.loads((await receive())["body"]))
        await send({"type": "http.response.start", "status": 202, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    stack = await make_stack(
        tmp_path,
        discovery=Scaled(),
        cold_start_poll_s=0.02,
        wake_url="http://supervisor/wake",
    )
    stack.transport.apps["http://supervisor"] = supervisor

    def wakes() -> float | None:
        return stack.gateway.metrics.registry.get_sample_value(
            "headway_pool_wakes_total", {"pool": "embed", "outcome": "ok"}
        )

    try:
        request = asyncio.create_task(embed(stack))
        await until(lambda: wakes() == 1)
        assert woken == [{"pool": "embed"}]
        request.cancel()
        await asyncio.gather(request, return_exceptions=True)
    finally:
        await stack.close()


async def test_a_pool_whose_replicas_crashed_fails_fast_and_is_unready(stack):
    assert cold_gauge(stack) == 0  # ready
    stack.transport.down.update(WORKER_URLS)  # ready replicas gone without a word
    await stack.gateway.pools["embed"].poll_once()
    assert cold_gauge(stack) == 0  # failing, not cold
    response = await embed(stack, timeout_ms=60_000)
    assert response.status_code == 503
    assert response.json()["error"]["type"] == "no_ready_replicas"
    assert waits(stack) == 0  # never held
    assert (await stack.client.get("/readyz")).status_code == 503


async def test_with_the_hold_off_a_cold_pool_fails_fast_and_is_unready(tmp_path):
    stack = await make_stack(tmp_path, discovery=Scaled(), cold_start_hold=False)
    try:
        response = await embed(stack, timeout_ms=60_000)
        assert response.status_code == 503
        assert response.json()["error"]["type"] == "no_ready_replicas"
        assert waits(stack) == 0
        assert (await stack.client.get("/readyz")).status_code == 503
    finally:
        await stack.close()


async def test_only_a_caller_with_a_key_and_a_valid_body_is_held_or_wakes_the_pool(cold):
    """A pool at zero is a shared resource: a stranger, a made-up key and a
    malformed body are answered at once, never held and never counted as demand."""
    body = {"model": "synthetic", "input": ["cold text"]}
    anonymous = await cold.client.post("/v1/embeddings", json=body)
    made_up = await cold.client.post("/v1/embeddings", headers=auth("made-up-key"), json=body)
    malformed = await cold.client.post(
        "/v1/embeddings", headers=auth(), json={"model": "synthetic", "input": 7}
    )
    assert [r.status_code for r in (anonymous, made_up, malformed)] == [401, 401, 422]
    assert (waiting(cold), waits(cold)) == (0, 0)
    # The same pool holds a tenant's request: the refusals above were not luck.
    request = asyncio.create_task(embed(cold))
    await until(lambda: waiting(cold) == 1)
    request.cancel()
    await asyncio.gather(request, return_exceptions=True)

"""Closed-loop runs against the in-test servers on 127.0.0.1."""

import math
import socket

import pytest

from headway_tools.loadgen.closed import Body, ClosedLoopResult, post, run_closed_loop
from headway_tools.loadgen.errors import InvalidSpec, RequestFailed
from tests.loadgen.servers import ScriptedServer, wait_until

BODIES = [Body(b'{"input": ["a"]}', 1), Body(b'{"input": ["b", "c"]}', 2), Body(b"\x93\x01", 3)]


def as_tenant(key: str) -> list[tuple[str, str]]:
    return [("Authorization", f"Bearer {key}"), ("Content-Type", "application/json")]


async def run_as(
    server: ScriptedServer, key: str, client_timeout_s: float = 5, **limits: int | float
) -> ClosedLoopResult:
    """``BODIES`` to ``server`` as the tenant whose key scripts its answers."""
    return await run_closed_loop(
        server.url + "/v1/embeddings",
        BODIES,
        headers=as_tenant(key),
        client_timeout_s=client_timeout_s,
        **limits,
    )


async def test_a_run_by_count_sends_exactly_that_many_round_robin(scripted: ScriptedServer):
    result = await run_as(scripted, "ok", concurrency=3, requests=7)
    assert scripted.received == ["ok"] * 7
    assert result.requests == len(result.latencies_s) == 7
    assert result.texts == sum(BODIES[i % 3].texts for i in range(7))
    assert not result.errors
    assert 0 < max(result.latencies_s) <= result.elapsed_s
    await wait_until(lambda: not scripted.transports, 2.0, "the client's connections to close")


async def test_exactly_concurrency_requests_are_outstanding(scripted: ScriptedServer):
    scripted.slow_s = 0.05
    result = await run_as(scripted, "slow", concurrency=4, requests=20)
    assert result.requests == 20
    # The four users start together and the server holds each answer for 50 ms.
    assert scripted.peak_in_flight == 4
    # Each user's requests follow one another: five rounds of 50 ms at least.
    assert result.elapsed_s >= 5 * scripted.slow_s
    assert min(result.latencies_s) >= scripted.slow_s


async def test_a_run_by_duration_starts_requests_until_it_passes(scripted: ScriptedServer):
    scripted.slow_s = 0.1
    duration_s = 0.25
    result = await run_as(scripted, "slow", concurrency=2, duration_s=duration_s)
    # Each request takes 100 ms: a user starts at most 3 within 250 ms, and the run
    # waits for the last of them, which started before 250 ms.
    assert 2 <= result.requests <= 2 * math.ceil(duration_s / scripted.slow_s)
    assert len(scripted.received) == result.requests
    assert duration_s <= result.elapsed_s < duration_s + scripted.slow_s + 0.5


async def test_whichever_limit_comes_first_ends_the_run(scripted: ScriptedServer):
    result = await run_as(scripted, "ok", concurrency=2, duration_s=30, requests=5)
    assert result.requests == 5 and result.elapsed_s < 30


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("shed", "status 503"),
        ("quota", "status 429"),
        ("boom", "status 500 internal_error"),
        ("teapot", "status 418"),
        ("hang", "timeout"),
        ("drop", "connection lost: closed by peer"),
    ],
)
async def test_failures_are_counted_by_reason_and_the_users_carry_on(
    scripted: ScriptedServer, key: str, reason: str
):
    result = await run_as(scripted, key, concurrency=2, requests=4, client_timeout_s=0.2)
    assert result.errors == {reason: 4}
    assert (result.requests, result.texts, result.latencies_s) == (0, 0, [])
    assert scripted.received == [key] * 4


async def test_a_run_against_nothing_counts_connect_errors_and_ends():
    with socket.socket() as sock:  # a port that nothing listens on
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1/embeddings"
        result = await run_closed_loop(url, BODIES, concurrency=2, requests=6, client_timeout_s=5)
    assert result.requests == 0
    ((reason, count),) = result.errors.items()
    assert reason.startswith("connect: ConnectionRefusedError") and count == 6


@pytest.mark.parametrize(
    ("url", "bodies", "limits", "problem"),
    [
        ("http://127.0.0.1:1/x", BODIES, {"concurrency": 0, "requests": 1}, "concurrency"),
        ("http://127.0.0.1:1/x", BODIES, {"concurrency": 1}, "duration_s, requests"),
        ("http://127.0.0.1:1/x", [], {"concurrency": 1, "requests": 1}, "one body"),
        ("http://127.0.0.1:1", BODIES, {"concurrency": 1, "requests": 1}, "endpoint"),
    ],
)
async def test_a_run_that_cannot_mean_anything_is_refused(url, bodies, limits, problem):
    with pytest.raises(InvalidSpec, match=problem):
        await run_closed_loop(url, bodies, client_timeout_s=1, **limits)


async def test_post_returns_any_answer_and_raises_on_none(scripted: ScriptedServer):
    response = await post(
        scripted.url + "/v1/embeddings", b"{}", headers=as_tenant("ok"), client_timeout_s=5
    )
    assert (response.status, response.body) == (200, b'{"data": []}')
    shed = await post(
        scripted.url + "/v1/embeddings", b"{}", headers=as_tenant("shed"), client_timeout_s=5
    )
    assert shed.status == 503
    with pytest.raises(RequestFailed, match="timeout"):
        await post(scripted.url + "/x", b"{}", headers=as_tenant("hang"), client_timeout_s=0.1)

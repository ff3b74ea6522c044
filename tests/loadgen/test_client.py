import asyncio
import socket

import pytest

from headway.transport.connection import Failure, Response, Result
from headway_tools.loadgen.client import (
    MAX_CONNECTING,
    ConnectionPool,
    Target,
    encode_request,
    parse_base_url,
    request_head,
)
from headway_tools.loadgen.errors import InvalidSpec, RequestFailed
from tests.loadgen.servers import ScriptedServer, wait_until

# -- the URL and the request bytes ---------------------------------------------------


def test_base_urls():
    assert parse_base_url("http://127.0.0.1:8080") == Target("127.0.0.1", 8080, "")
    assert parse_base_url("http://localhost/api/") == Target("localhost", 80, "/api")
    assert parse_base_url("http://[::1]:9000").authority == "[::1]:9000"
    for bad in ("https://127.0.0.1", "127.0.0.1:8080", "http://h:99999", "http://h/?q=1"):
        with pytest.raises(InvalidSpec):
            parse_base_url(bad)


def test_request_bytes():
    head = request_head(
        "POST", Target("127.0.0.1", 8080, "/api"), "/v1/embeddings", [("X-Timeout-Ms", "100")]
    )
    assert encode_request(head, b'{"a":1}') == (
        b"POST /api/v1/embeddings HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n"
        b"X-Timeout-Ms: 100\r\nContent-Length: 7\r\n\r\n" + b'{"a":1}'
    )


# -- the pool, against a real server ----------------------------------------------


def request(key: str) -> bytes:
    head = request_head(
        "POST", Target("127.0.0.1", 0, ""), "/", [("Authorization", f"Bearer {key}")]
    )
    return encode_request(head, b"{}")


async def test_sequential_requests_reuse_one_connection(scripted: ScriptedServer):
    pool = ConnectionPool("127.0.0.1", scripted.port, timeout_s=5)
    for _ in range(5):
        response = await pool.request(request("ok"))
        assert response.status == 200
    shed = await pool.request(request("shed"))
    assert (shed.status, shed.retry_after_s) == (503, 2.0)
    assert pool.opened == 1
    await pool.close()
    assert pool.connections == 0


async def test_the_pool_grows_on_demand_and_respects_its_limit(scripted: ScriptedServer):
    scripted.slow_s = 0.05
    grown = ConnectionPool("127.0.0.1", scripted.port, timeout_s=5)
    results = await asyncio.gather(*(grown.request(request("slow")) for _ in range(8)))
    assert [r.status for r in results] == [200] * 8
    assert grown.opened == 8 and grown.peak_connections == 8
    await grown.close()

    capped = ConnectionPool("127.0.0.1", scripted.port, timeout_s=5, max_connections=2)
    results = await asyncio.gather(*(capped.request(request("slow")) for _ in range(8)))
    assert [r.status for r in results] == [200] * 8
    assert capped.opened == 2 and capped.waited_at_limit == 6
    await capped.close()


async def test_no_answer_times_out_and_the_connection_is_not_reused(scripted: ScriptedServer):
    pool = ConnectionPool("127.0.0.1", scripted.port, timeout_s=0.2)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(RequestFailed) as failed:
        await pool.request(request("hang"))
    assert failed.value.reason == "timeout"
    assert 0.19 <= loop.time() - started < 1.0
    assert (await pool.request(request("ok"))).status == 200
    assert pool.opened == 2
    await pool.close()


async def test_a_dropped_connection_is_an_error_and_the_pool_recovers(scripted: ScriptedServer):
    pool = ConnectionPool("127.0.0.1", scripted.port, timeout_s=5)
    with pytest.raises(RequestFailed, match="connection lost") as failed:
        await pool.request(request("drop"))
    assert failed.value.reason == "error"
    assert (await pool.request(request("ok"))).status == 200
    await pool.close()


async def test_at_its_limit_the_pool_replaces_a_lost_connection_for_a_waiting_request(
    scripted: ScriptedServer,
):
    pool = ConnectionPool("127.0.0.1", scripted.port, timeout_s=5, max_connections=1)
    answered: asyncio.Future[Result] = asyncio.get_running_loop().create_future()

    def send_the_next(token: int, result: Result) -> None:
        # The failure's own callback: the broken connection still holds the one place.
        assert isinstance(result, Failure)
        pool.submit(request("ok"), lambda token, result: answered.set_result(result), 1)

    pool.submit(request("drop"), send_the_next, 0)
    result = await asyncio.wait_for(answered, 2)  # not at the request's 5 s timeout
    assert isinstance(result, Response) and result.status == 200
    assert pool.opened == 2
    await pool.close()


async def test_a_refused_connection_is_an_error():
    with socket.socket() as sock:  # a port that nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        pool = ConnectionPool("127.0.0.1", port, timeout_s=5)
        with pytest.raises(RequestFailed, match="connect: ConnectionRefusedError"):
            await pool.request(request("ok"))
    assert pool.connect_failures == 1
    await pool.close()


async def test_closing_fails_what_is_in_flight(scripted: ScriptedServer):
    arrived = asyncio.Event()
    scripted.on_request.append(lambda key: arrived.set())
    pool = ConnectionPool("127.0.0.1", scripted.port, timeout_s=5)
    results: list[Result] = []
    pool.submit(request("hang"), lambda token, result: results.append(result), 0)
    await asyncio.wait_for(arrived.wait(), 5)
    await pool.close()
    assert results == [Failure("error", "pool closed")]
    pool.submit(request("ok"), lambda token, result: results.append(result), 1)
    assert results[-1] == Failure("error", "pool closed")


async def test_warm_connections_are_reused(scripted: ScriptedServer):
    pool = ConnectionPool("127.0.0.1", scripted.port, timeout_s=5, max_connections=4)
    await pool.warm(6)  # capped by max_connections
    assert pool.opened == pool.connections == 4
    results = await asyncio.gather(*(pool.request(request("ok")) for _ in range(4)))
    assert [r.status for r in results] == [200] * 4 and pool.opened == 4
    await pool.close()


async def test_connections_open_a_few_at_a_time_until_every_request_has_one(
    scripted: ScriptedServer,
):
    pool = ConnectionPool("127.0.0.1", scripted.port, timeout_s=5)
    results: list[Result] = []
    for i in range(20):
        pool.submit(request("hang"), lambda token, result: results.append(result), i)
    assert len(pool._connect_tasks) == MAX_CONNECTING < 20
    await wait_until(lambda: len(scripted.received) == 20, 5, "every request to arrive")
    assert pool.opened == 20 and results == []
    await pool.close()
    assert len(results) == 20

"""Closed-loop load: ``concurrency`` users, each sending its next request the moment
the previous one returns.

Offered load therefore adapts to the server: throughput measured this way is
what the server sustains with exactly ``concurrency`` requests outstanding, and
latency is not inflated by a queue that an open-loop client would build (nor
does it show the queue real traffic would meet; ``run_load`` does). The bodies
are any pre-encoded bytes POSTed to one URL with the same headers (the
gateway's JSON ``/v1/embeddings``, a worker's msgpack ``/internal/embed``),
taken round-robin, each request's bytes built before the clock starts.

It runs on the open loop's client (``client.ConnectionPool``), with at most
``concurrency`` connections, opened before the clock starts, and no task or
coroutine per request: the callback that reports a user's answer sends that
user's next request. An answer other than 200, or none by the client timeout,
is counted by reason with the open loop's names (``status 503 overloaded``,
``timeout``, ``connection lost: closed by peer``) and the user carries on.

A run starts no request once ``duration_s`` has passed or ``requests`` have
been started, whichever comes first; the requests in flight then are awaited
and counted, and ``elapsed_s`` runs until the last of them returns.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from headway.transport.connection import Response, Result
from headway_tools.loadgen.client import (
    ConnectionPool,
    Target,
    encode_request,
    parse_base_url,
    request_head,
)
from headway_tools.loadgen.errors import InvalidSpec
from headway_tools.loadgen.recorder import error_reason

Clock = Callable[[], float]
Headers = Sequence[tuple[str, str]]


@dataclass(frozen=True, slots=True)
class Body:
    """A ready-to-send request body and how many texts it carries (what a 200 serves)."""

    content: bytes
    texts: int


@dataclass(slots=True)
class ClosedLoopResult:
    """What a run got: ``requests`` and ``texts`` answered 200, with their latencies, and the
    requests that were not, by reason."""

    requests: int = 0
    texts: int = 0
    elapsed_s: float = 0.0
    latencies_s: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)


def _endpoint(url: str) -> tuple[Target, str]:
    """Where to connect, and the path to POST to, from ``http://host:port/path``."""
    parsed = parse_base_url(url)
    if not parsed.path_prefix:
        raise InvalidSpec(f"expected the URL of an endpoint, http://host[:port]/path, not {url!r}")
    return Target(parsed.host, parsed.port, ""), parsed.path_prefix


def _reason(result: Result) -> str:
    if isinstance(result, Response):
        return error_reason(result)
    return result.reason if result.reason == "timeout" else result.detail


class _Users:
    """The run's state; only the pool's callbacks advance it."""

    def __init__(
        self,
        pool: ConnectionPool,
        requests: Sequence[bytes],
        bodies: Sequence[Body],
        concurrency: int,
        stop_at: float,
        limit: float,
    ) -> None:
        self.pool = pool
        self.requests = requests
        self.bodies = bodies
        self.stop_at = stop_at
        self.limit = limit
        self.clock = pool.clock
        self.result = ClosedLoopResult()
        self.started = 0
        self.outstanding = 0
        self.sent_s = [0.0] * concurrency
        self.texts = [0] * concurrency
        self.finished: asyncio.Future[float] = asyncio.get_running_loop().create_future()

    def send(self, user: int) -> None:
        """User ``user``'s next request, unless the run is over; the last one out ends it."""
        now = self.clock()
        if now >= self.stop_at or self.started >= self.limit:
            if not self.outstanding and not self.finished.done():
                self.finished.set_result(now)
            return
        index = self.started % len(self.requests)
        self.started += 1
        self.outstanding += 1
        self.sent_s[user] = now
        self.texts[user] = self.bodies[index].texts
        self.pool.submit(self.requests[index], self.on_done, user)

    def on_done(self, user: int, result: Result) -> None:
        now = self.clock()
        self.outstanding -= 1
        if isinstance(result, Response) and result.status == 200:
            self.result.requests += 1
            self.result.texts += self.texts[user]
            self.result.latencies_s.append(now - self.sent_s[user])
        else:
            self.result.errors[_reason(result)] += 1
        self.send(user)


async def run_closed_loop(
    url: str,
    bodies: Sequence[Body],
    *,
    headers: Headers = (),
    concurrency: int,
    duration_s: float | None = None,
    requests: int | None = None,
    client_timeout_s: float,
    clock: Clock = time.perf_counter,
) -> ClosedLoopResult:
    """POST ``bodies`` round-robin to ``url`` with ``concurrency`` requests outstanding, until
    ``duration_s`` has passed or ``requests`` have been started; see the module docstring."""
    if concurrency < 1:
        raise InvalidSpec(f"concurrency must be at least 1, not {concurrency}")
    if duration_s is None and requests is None:
        raise InvalidSpec("a closed-loop run needs duration_s, requests, or both")
    if not bodies:
        raise InvalidSpec("a closed-loop run needs at least one body")
    target, path = _endpoint(url)
    head = request_head("POST", target, path, headers)
    encoded = [encode_request(head, body.content) for body in bodies]
    pool = ConnectionPool(
        target.host,
        target.port,
        timeout_s=client_timeout_s,
        max_connections=concurrency,
        clock=clock,
    )
    try:
        await pool.warm(concurrency)
        started = clock()
        stop_at = started + duration_s if duration_s is not None else math.inf
        limit = requests if requests is not None else math.inf
        users = _Users(pool, encoded, bodies, concurrency, stop_at, limit)
        for user in range(concurrency):
            users.send(user)
        ended = await users.finished
    finally:
        await pool.close()
    users.result.elapsed_s = ended - started
    return users.result


async def post(
    url: str, content: bytes, *, headers: Headers = (), client_timeout_s: float
) -> Response:
    """One POST and its response, whatever its status; no response raises ``RequestFailed``."""
    target, path = _endpoint(url)
    pool = ConnectionPool(target.host, target.port, timeout_s=client_timeout_s, max_connections=1)
    try:
        return await pool.request(
            encode_request(request_head("POST", target, path, headers), content)
        )
    finally:
        await pool.close()

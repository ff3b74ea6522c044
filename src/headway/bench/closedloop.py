"""A closed-loop load generator: ``concurrency`` users, each sending its next
request the moment the previous one returns.

Offered load therefore adapts to the server: throughput measured this way is
what the server sustains with exactly ``concurrency`` requests outstanding,
and latency is not inflated by a queue that an open-loop client would build.
Request bodies are encoded before the clock starts, and responses are read
but not parsed, so the client spends as little of the machine's CPU as it can.
A failed request is counted by reason and the user carries on.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

import aiohttp
import msgspec

from headway.worker import protocol

Clock = Callable[[], float]


class RequestFailed(Exception):
    """One benchmark request got an error status or no answer."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Request:
    """A ready-to-send body and how many texts it carries."""

    body: bytes
    texts: int


@dataclass(slots=True)
class LoadResult:
    requests: int = 0
    texts: int = 0
    elapsed_s: float = 0.0
    latencies_s: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)


Send = Callable[[int], Awaitable[int]]


async def closed_loop(
    send: Send,
    *,
    concurrency: int,
    duration_s: float | None = None,
    requests: int | None = None,
    clock: Clock = time.perf_counter,
) -> LoadResult:
    """Run until ``duration_s`` has passed or ``requests`` have been started.

    ``send(i)`` performs request number ``i`` and returns the texts served, or
    raises ``RequestFailed``. Requests in flight at the end are awaited and
    counted; ``elapsed_s`` runs until the last of them returns.
    """
    if duration_s is None and requests is None:
        raise ValueError("give duration_s, requests, or both")
    result = LoadResult()
    numbers = itertools.count()
    started = clock()
    stop_at = started + duration_s if duration_s is not None else float("inf")

    async def user() -> None:
        while clock() < stop_at:
            number = next(numbers)
            if requests is not None and number >= requests:
                return
            sent = clock()
            try:
                texts = await send(number)
            except RequestFailed as exc:
                result.errors[exc.reason] += 1
                continue
            result.latencies_s.append(clock() - sent)
            result.requests += 1
            result.texts += texts

    await asyncio.gather(*(user() for _ in range(concurrency)))
    result.elapsed_s = clock() - started
    return result


class Poster:
    """``send`` for ``closed_loop``: POSTs ``requests`` round-robin to one URL."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        url: str,
        requests: Sequence[Request],
        headers: Mapping[str, str],
    ) -> None:
        if not requests:
            raise ValueError("a poster needs at least one request")
        self._session = session
        self._url = url
        self._requests = list(requests)
        self._headers = dict(headers)

    async def __call__(self, number: int) -> int:
        request = self._requests[number % len(self._requests)]
        await self.fetch(request)
        return request.texts

    async def fetch(self, request: Request) -> bytes:
        """One POST; the response body on 200, else ``RequestFailed``."""
        try:
            async with self._session.post(
                self._url, data=request.body, headers=self._headers
            ) as response:
                payload = await response.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise RequestFailed(type(exc).__name__) from exc
        if response.status != 200:
            raise RequestFailed(f"http {response.status}")
        return payload


def worker_requests(
    batches: Sequence[Sequence[str]], model_version: str, timeout_ms: float = 60_000
) -> list[Request]:
    """Chunks for a worker's ``/internal/embed``, as the gateway would send them."""
    return [
        Request(
            protocol.encode(
                protocol.EmbedChunk(
                    f"bench-{i}",
                    list(texts),
                    timeout_ms,
                    protocol.PRIORITY_INTERACTIVE,
                    model_version,
                )
            ),
            len(texts),
        )
        for i, texts in enumerate(batches)
    ]


def gateway_requests(batches: Sequence[Sequence[str]], model: str) -> list[Request]:
    """OpenAI-style ``/v1/embeddings`` bodies (float encoding, the API's default)."""
    encode = msgspec.json.Encoder().encode
    return [
        Request(encode({"model": model, "input": list(texts)}), len(texts)) for texts in batches
    ]


def worker_poster(
    session: aiohttp.ClientSession, base_url: str, requests: Sequence[Request]
) -> Poster:
    return Poster(
        session,
        base_url + "/internal/embed",
        requests,
        {"content-type": protocol.CONTENT_TYPE},
    )


def gateway_poster(
    session: aiohttp.ClientSession, base_url: str, requests: Sequence[Request], api_key: str
) -> Poster:
    return Poster(
        session,
        base_url + "/v1/embeddings",
        requests,
        {"content-type": "application/json", "authorization": f"Bearer {api_key}"},
    )

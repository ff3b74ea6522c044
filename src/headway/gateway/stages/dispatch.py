"""Sending a request's chunks to its pool within the deadline: route, retry, hedge.

The chunks run in parallel; the first failure cancels the others. Each chunk
goes to a replica serving the request's version, chosen by power of two choices
on expected wait and spread over replicas the request has not used yet, and gets
at most one extra attempt, a retry or a hedge (see ``send_chunk``): computing an
embedding twice has no side effect, and the copy carries the same request id.

A worker's answer maps onto the error tree: its 503 (queue full) is our
``Overloaded`` with its ``Retry-After``; its 504 is ``DeadlineExceeded``; its 422 (a text
over the limit with truncation off) is the request's own ``ValidationFailed``, not
retried and nothing against the replica; any other status, and a 200 whose body does not
decode, is ``UpstreamFailed``. A
replica that refuses connections is marked unready; a connection that breaks
mid-call (a reused keep-alive connection the server closed, say) says nothing
about the replica. A shadow copy of the request (to a candidate version) goes out
through ``send_once`` (``stages/shadow.py``): one attempt, no retry, no hedge, and
nothing it sees feeds the pool's latency or ejection records.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec

from headway import wire
from headway.errors import (
    DeadlineExceeded,
    HeadwayError,
    NoReplicas,
    Overloaded,
    UpstreamFailed,
    ValidationFailed,
)
from headway.gateway.context import Deadline
from headway.gateway.pool import Replica, ReplicaPool, Spread
from headway.gateway.stages.plan import Chunk
from headway.tracing.spans import (
    Attributes,
    SpanKind,
    current,
    current_traceparent,
    span,
    traceparent_of,
)
from headway.transport.base import (
    ConnectFailed,
    Reply,
    TransportError,
    TransportTimeout,
    UpstreamRequest,
)

T = TypeVar("T")


async def dispatch(
    chunks: Sequence[Chunk], pool: ReplicaPool, deadline: Deadline
) -> list[wire.ChunkResult]:
    """Every chunk's result, in order."""
    spread = Spread()
    return await gather_or_cancel([send_chunk(chunk, pool, deadline, spread) for chunk in chunks])


async def send_chunk(
    chunk: Chunk, pool: ReplicaPool, deadline: Deadline, spread: Spread
) -> wire.ChunkResult:
    """One chunk to a replica serving its version, with at most one extra attempt elsewhere.

    The extra attempt is a retry or a hedge, never both, and either is paid from the
    pool's retry budget. Retried: connection failures, broken connections, 5xx, a
    worker's 503 (its queue is full; another may not be) and an answer that does not
    decode, within the deadline. The retry goes to another replica; only a broken
    connection may be retried on the same one (a reused keep-alive connection the
    server closed). Hedged, where the pool hedges: a chunk not answered by the pool's
    recent latency quantile is sent to another replica too, to one whose recent latency
    is below the time the chunk has waited (not another slow one; looked for again each
    quantile later, so a chunk stuck past several of them takes any replica faster than
    its wait); the first answer wins and the other call is cancelled (the worker drops
    work whose caller left). Only answers feed the quantile, not the calls given up on.
    Failures other than a full queue count toward ejection. ``spread``: the request's
    chunks go to different replicas.
    """
    version = chunk.message.model_version
    pool.chunk_sent()
    first = pool.pick(version, spread=spread)
    if first is None:
        raise NoReplicas(f"pool {pool.name} has no ready replica for this model")
    send = _Attempt(pool, chunk, deadline)
    hedge_after_s = pool.hedge_after_s()
    if hedge_after_s is None:
        return await _without_hedge(send, first)
    loop = asyncio.get_running_loop()
    running = {send.start(first, "first"): first}
    started = loop.time()
    hedge_at: float | None = started + hedge_after_s
    spare = True  # the one extra attempt, not yet spent
    hedge: asyncio.Task[wire.ChunkResult] | None = None
    try:
        while True:
            timeout = None if hedge_at is None else max(0.0, hedge_at - loop.time())
            done, _ = await asyncio.wait(
                running, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if not done:  # the hedge is due
                waited_s = loop.time() - started
                other = pool.pick(version, exclude=first, max_latency_s=waited_s)
                if other is not None and pool.extra_attempt("hedge"):
                    hedge_at = None
                    spare = False
                    hedge = send.start(other, "hedge")
                    running[hedge] = other
                else:  # none fit (or no budget) now: look again one threshold later
                    hedge_at = loop.time() + hedge_after_s
                continue
            task = done.pop()
            replica = running.pop(task)
            try:
                result = task.result()
            except _Retryable as failed:
                if running:
                    continue  # the other attempt may still answer
                retry = _retry_target(pool, version, replica, failed) if spare else None
                if retry is None or not pool.extra_attempt("retry"):
                    raise failed.error from None
                spare, hedge_at = False, None
                running[send.start(retry, "retry")] = retry
                continue
            if task is hedge:
                pool.hedge_won()
            return result
    finally:
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)


async def _without_hedge(send: _Attempt, first: Replica) -> wire.ChunkResult:
    """``send_chunk`` where nothing is hedged: each attempt runs in the caller's task, one
    after the other (no task, no wait per chunk), with at most one retry."""
    pool, version = send.pool, send.chunk.message.model_version
    replica, kind = first, "first"
    while True:
        try:
            return await send.run(replica, kind)
        except _Retryable as failed:
            retry = _retry_target(pool, version, replica, failed) if kind == "first" else None
            if retry is None or not pool.extra_attempt("retry"):
                raise failed.error from None
            replica, kind = retry, "retry"


async def send_once(chunk: Chunk, pool: ReplicaPool, deadline: Deadline) -> wire.ChunkResult:
    """One attempt on a replica serving the chunk's version, unobserved (see module doc)."""
    replica = pool.pick(chunk.message.model_version)
    if replica is None:
        raise NoReplicas(f"pool {pool.name} has no ready replica for this model")
    try:
        return await _Attempt(pool, chunk, deadline, observe=False).run(replica, "shadow")
    except _Retryable as failed:
        raise failed.error from None


class _Retryable(Exception):
    """An attempt that failed in a way another replica, or a fresh connection, may not."""

    def __init__(self, error: HeadwayError, *, same_replica_ok: bool) -> None:
        super().__init__(error.message)
        self.error = error
        self.type = error.type
        """The error type (what the attempt's span records)."""
        self.same_replica_ok = same_replica_ok


def _retry_target(
    pool: ReplicaPool, version: str, failed_on: Replica, failure: _Retryable
) -> Replica | None:
    if not pool.routing.retries:
        return None
    other = pool.pick(version, exclude=failed_on)
    if other is None and failure.same_replica_ok and failed_on.ready:
        return failed_on
    return other


@dataclass(slots=True)
class _Attempt:
    """One chunk, ready to be sent to any replica of its pool."""

    pool: ReplicaPool
    chunk: Chunk
    deadline: Deadline
    observe: bool = True
    """Feed the pool's latency and ejection records (not for a shadow copy)."""

    def start(self, replica: Replica, kind: str) -> asyncio.Task[wire.ChunkResult]:
        """The attempt as a task of its own, counted as the replica's outstanding work at
        once, so that the next pick (the request's next chunk, say) sees it, and until the
        call ends, however it ends. ``kind``: first, retry, hedge or shadow (the attempt's
        span says which)."""
        pool, texts = self.pool, self.chunk.texts
        pool.take(replica, texts)
        task = asyncio.get_running_loop().create_task(self._attempt(replica, kind))
        task.add_done_callback(lambda _: pool.release(replica, texts))
        return task

    async def run(self, replica: Replica, kind: str) -> wire.ChunkResult:
        """The attempt in the caller's task, counted as ``start`` counts it."""
        pool, texts = self.pool, self.chunk.texts
        pool.take(replica, texts)
        try:
            return await self._attempt(replica, kind)
        finally:
            pool.release(replica, texts)

    def _attempt(self, replica: Replica, kind: str) -> Coroutine[Any, Any, wire.ChunkResult]:
        now = current()
        if now is not None and now.recording:
            return self._traced(replica, kind)
        # passed on as it came (or nothing to pass on)
        return self._send(replica, None if now is None else traceparent_of(now))

    async def _traced(self, replica: Replica, kind: str) -> wire.ChunkResult:
        """The attempt as a CLIENT span of the request's trace (semantic conventions of an
        HTTP client call), whose id the worker gets as its parent."""
        path = self.chunk.message.path
        attributes: Attributes = {
            "http.request.method": "POST",
            "url.full": replica.url + path,
            "headway.attempt": kind,
            "headway.chunk.texts": self.chunk.texts,
        }
        with span(f"POST {path}", attributes, SpanKind.CLIENT) as attempt:
            result = await self._send(replica, current_traceparent())
            attempt.set("http.response.status_code", 200)
            return result

    async def _send(self, replica: Replica, traceparent: str | None) -> wire.ChunkResult:
        remaining_s = self.deadline.remaining_s()
        if remaining_s <= 0:
            raise DeadlineExceeded("deadline passed before the work was sent")
        pool = self.pool
        message = self.chunk.message
        request = UpstreamRequest(
            "POST",
            replica.url,
            message.path,
            remaining_s,
            wire.with_budget(message, remaining_s * 1000),
            wire.CONTENT_TYPE,
            traceparent,
        )
        started = pool.clock()
        try:
            reply = await pool.transport.send(request)
            pool.observe_reply(replica, reply)
            result = _interpret(reply, replica, self.chunk)
        except TransportTimeout as exc:
            raise DeadlineExceeded("deadline passed while the work ran") from exc
        except ConnectFailed as exc:
            pool.mark_unreachable(replica)
            if self.observe:
                pool.record(replica, ok=False)
            raise _Retryable(
                UpstreamFailed(f"replica unreachable: {exc}"), same_replica_ok=False
            ) from exc
        except TransportError as exc:
            raise _Retryable(
                UpstreamFailed(f"connection to replica broke: {exc}"), same_replica_ok=True
            ) from exc
        except Overloaded as exc:
            raise _Retryable(exc, same_replica_ok=False) from exc
        except UpstreamFailed as exc:
            if self.observe:
                pool.record(replica, ok=False)
            raise _Retryable(exc, same_replica_ok=False) from exc
        if self.observe:
            pool.record(replica, ok=True, latency_s=pool.clock() - started)
        return result


def _interpret(reply: Reply, replica: Replica, chunk: Chunk) -> wire.ChunkResult:
    if reply.status == 200:
        return _result(reply.body, replica, chunk)
    message = worker_message(reply)
    if reply.status == 503:
        retry_after = reply.headers.get("retry-after", "1")
        raise Overloaded(
            f"model pool is at capacity: {message}",
            retry_after_s=float(retry_after) if retry_after.isdigit() else 1.0,
        )
    if reply.status == 504:
        raise DeadlineExceeded(message)
    if reply.status == 422:  # the request's own fault (a text too long to keep whole)
        raise ValidationFailed(message)
    raise UpstreamFailed(f"replica {replica.url} answered {reply.status}: {message}")


def _result(body: bytes, replica: Replica, chunk: Chunk) -> wire.ChunkResult:
    """The decoded answer, if it is one for this chunk: a row per text, of the version asked."""
    try:
        result = wire.result_decoder.decode(body)
    except msgspec.DecodeError as exc:  # a ValidationError is one too
        raise UpstreamFailed(f"replica {replica.url} answered 200 with a malformed body") from exc
    width = max(result.dimensions, 1)
    if (
        result.rows != chunk.texts
        or len(result.values) != 4 * result.rows * width
        or result.model_version != chunk.message.model_version
    ):
        raise UpstreamFailed(
            f"replica {replica.url} answered {result.rows} rows of {width} values from version "
            f"{result.model_version[:12]!r} for {chunk.texts} texts of "
            f"{chunk.message.model_version[:12]!r}"
        )
    return result


def worker_message(reply: Reply) -> str:
    try:
        error = msgspec.json.decode(reply.body)["error"]
        return str(error["message"])
    except (msgspec.DecodeError, KeyError, TypeError):
        return f"status {reply.status}"


async def gather_or_cancel(work: Sequence[Awaitable[T]]) -> list[T]:
    """Results in order; on the first failure cancel the rest and raise that failure."""
    if len(work) == 1:
        return [await work[0]]
    tasks = [asyncio.ensure_future(item) for item in work]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            if (exc := task.exception()) is not None:
                raise exc
        return [task.result() for task in tasks]
    finally:
        for task in tasks:
            if not task.done():
                task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

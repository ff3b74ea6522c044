"""Sending chunks to a pool within a deadline, and translating what comes back.

A worker's answer maps onto the error tree: its 503 (queue full) is our
``Overloaded`` with its ``Retry-After``; its 504 is ``DeadlineExceeded``;
anything else is ``UpstreamFailed``. A replica that refuses connections is
marked unready; a connection that breaks mid-call (a reused keep-alive
connection the server closed, say) says nothing about the replica. A chunk
gets at most one extra attempt, a retry or a hedge (see ``call_chunk``):
computing an embedding twice has no side effect, and the copy carries the same
request id. Chunks of one request run in parallel; the first failure cancels
the others.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import msgspec

from headway.errors import (
    DeadlineExceeded,
    HeadwayError,
    NoReplicas,
    Overloaded,
    UpstreamFailed,
)
from headway.gateway.deadline import Deadline
from headway.gateway.pool import Replica, ReplicaPool, Spread
from headway.gateway.transport import (
    ConnectFailed,
    Reply,
    Transport,
    TransportError,
    TransportTimeout,
)
from headway.worker import protocol

T = TypeVar("T")

BodyForBudget = Callable[[float], bytes]


async def call_chunk(
    pool: ReplicaPool,
    transport: Transport,
    path: str,
    body_for: BodyForBudget,
    texts: int,
    deadline: Deadline,
    version: str,
    spread: Spread,
) -> protocol.ChunkResult:
    """One chunk to a replica serving ``version``, with at most one extra attempt elsewhere.

    The extra attempt is a retry or a hedge, never both, and either is paid from the
    pool's retry budget. Retried: connection failures, broken connections, 5xx, and a
    worker's 503 (its queue is full; another may not be), within the deadline. The retry
    goes to another replica; only a broken connection may be retried on the same one (a
    reused keep-alive connection the server closed). Hedged, where the pool hedges: a
    chunk not answered by the pool's recent latency quantile is sent to another replica
    too, to one whose recent latency is below that quantile (not another slow one); the
    first answer wins and the other call is cancelled (the worker drops work whose caller
    left). Only answers feed the quantile, not the calls given up on. Failures other than
    a full queue count toward ejection. ``spread``: the request's chunks go to different
    replicas.
    """
    pool.retry_budget.record_request()
    pool.counts.chunks += 1
    first = pool.pick(version, spread=spread)
    if first is None:
        raise NoReplicas(f"pool {pool.name} has no ready replica for this model")
    send = _Attempt(pool, transport, path, body_for, texts, deadline)
    loop = asyncio.get_running_loop()
    running = {send.start(first): first}
    hedge_after_s = pool.hedge_after_s()
    hedge_at = None if hedge_after_s is None else loop.time() + hedge_after_s
    spare = True  # the one extra attempt, not yet spent
    hedge: asyncio.Task[protocol.ChunkResult] | None = None
    try:
        while True:
            timeout = None if hedge_at is None else max(0.0, hedge_at - loop.time())
            done, _ = await asyncio.wait(
                running, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if not done:  # the hedge is due
                assert hedge_after_s is not None
                hedge_at = None
                other = pool.pick(version, exclude=first, max_latency_s=hedge_after_s)
                if other is not None and pool.retry_budget.try_retry():
                    spare = False
                    pool.counts.hedges += 1
                    hedge = send.start(other)
                    running[hedge] = other
                continue
            task = done.pop()
            replica = running.pop(task)
            try:
                result = task.result()
            except _Retryable as failed:
                if running:
                    continue  # the other attempt may still answer
                retry = _retry_target(pool, version, replica, failed) if spare else None
                if retry is None or not pool.retry_budget.try_retry():
                    raise failed.error from None
                spare, hedge_at = False, None
                pool.counts.retries += 1
                running[send.start(retry)] = retry
                continue
            if task is hedge:
                pool.counts.hedges_won += 1
            return result
    finally:
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)


class _Retryable(Exception):
    """An attempt that failed in a way another replica, or a fresh connection, may not."""

    def __init__(self, error: HeadwayError, *, same_replica_ok: bool) -> None:
        super().__init__(error.message)
        self.error = error
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


@dataclass(frozen=True, slots=True)
class _Attempt:
    """One chunk, ready to be sent to any replica of its pool."""

    pool: ReplicaPool
    transport: Transport
    path: str
    body_for: BodyForBudget
    texts: int
    deadline: Deadline

    def start(self, replica: Replica) -> asyncio.Task[protocol.ChunkResult]:
        """Counted as the replica's outstanding work at once, so that the next pick (the
        request's next chunk, say) sees it, and until the call ends, however it ends."""
        replica.outstanding_texts += self.texts
        task = asyncio.get_running_loop().create_task(self._send(replica))
        task.add_done_callback(lambda _: _release(replica, self.texts))
        return task

    async def _send(self, replica: Replica) -> protocol.ChunkResult:
        remaining_s = self.deadline.remaining_s()
        if remaining_s <= 0:
            raise DeadlineExceeded("deadline passed before the work was sent")
        pool = self.pool
        started = time.monotonic()
        try:
            reply = await self.transport.post(
                replica.url,
                self.path,
                self.body_for(remaining_s * 1000),
                protocol.CONTENT_TYPE,
                remaining_s,
            )
            result = _interpret(reply, replica)
        except TransportTimeout as exc:
            raise DeadlineExceeded("deadline passed while the work ran") from exc
        except ConnectFailed as exc:
            pool.mark_unreachable(replica)
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
            pool.record(replica, ok=False)
            raise _Retryable(exc, same_replica_ok=False) from exc
        pool.record(replica, ok=True, latency_s=time.monotonic() - started)
        return result


def _release(replica: Replica, texts: int) -> None:
    replica.outstanding_texts -= texts


def _interpret(reply: Reply, replica: Replica) -> protocol.ChunkResult:
    if reply.status == 200:
        return protocol.result_decoder.decode(reply.body)
    message = _worker_message(reply)
    if reply.status == 503:
        retry_after = reply.headers.get("retry-after", "1")
        raise Overloaded(
            f"model pool is at capacity: {message}",
            retry_after_s=float(retry_after) if retry_after.isdigit() else 1.0,
        )
    if reply.status == 504:
        raise DeadlineExceeded(message)
    raise UpstreamFailed(f"replica {replica.url} answered {reply.status}: {message}")


def _worker_message(reply: Reply) -> str:
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

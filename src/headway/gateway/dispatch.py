"""Sending chunks to a pool within a deadline, and translating what comes back.

A worker's answer maps onto the error tree: its 503 (queue full) is our
``Overloaded`` with its ``Retry-After``; its 504 is ``DeadlineExceeded``;
anything else is ``UpstreamFailed``. A replica that refuses connections is
marked unready; a connection that breaks mid-call (a reused keep-alive
connection the server closed, say) says nothing about the replica. A failed
chunk is tried once more (see ``call_chunk``): computing an embedding twice has
no side effect, and the retry carries the same request id. Chunks of one
request run in parallel; the first failure cancels the others.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
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
from headway.gateway.pool import Replica, ReplicaPool
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
) -> protocol.ChunkResult:
    """One chunk to a replica serving ``version``; on failure, once more elsewhere.

    Retried: connection failures, broken connections, 5xx, and a worker's 503 (its
    queue is full; another may not be), within the deadline and the pool's retry
    budget. The retry goes to another replica; only a broken connection may be
    retried on the same one (a reused keep-alive connection the server closed).
    Failures other than a full queue count toward the replica's ejection.
    """
    pool.retry_budget.record_request()
    tried: Replica | None = None
    same_allowed = False
    failure: HeadwayError | None = None
    for attempt in range(2):
        replica = pool.pick(version, exclude=tried)
        if replica is None and same_allowed and tried is not None and tried.ready:
            replica = tried
        if replica is None:
            if failure is not None:
                raise failure
            raise NoReplicas(f"pool {pool.name} has no ready replica for this model")
        if attempt and not pool.retry_budget.try_retry():
            assert failure is not None
            raise failure
        remaining_s = deadline.remaining_s()
        if remaining_s <= 0:
            raise DeadlineExceeded("deadline passed before the work was sent")
        replica.outstanding_texts += texts
        started = time.monotonic()
        try:
            reply = await transport.post(
                replica.url, path, body_for(remaining_s * 1000), protocol.CONTENT_TYPE, remaining_s
            )
            result = _interpret(reply, replica)
        except TransportTimeout as exc:
            raise DeadlineExceeded("deadline passed while the work ran") from exc
        except ConnectFailed as exc:
            pool.mark_unreachable(replica)
            pool.record(replica, ok=False)
            failure, same_allowed = UpstreamFailed(f"replica unreachable: {exc}"), False
        except TransportError as exc:
            failure, same_allowed = UpstreamFailed(f"connection to replica broke: {exc}"), True
        except Overloaded as exc:
            failure, same_allowed = exc, False
        except UpstreamFailed as exc:
            pool.record(replica, ok=False)
            failure, same_allowed = exc, False
        else:
            pool.record(replica, ok=True, latency_s=time.monotonic() - started)
            return result
        finally:
            replica.outstanding_texts -= texts
        tried = replica
    assert failure is not None
    raise failure


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

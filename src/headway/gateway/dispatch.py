"""Sending chunks to a pool within a deadline, and translating what comes back.

A worker's answer maps onto the error tree: its 503 (queue full) is our
``Overloaded`` with its ``Retry-After``; its 504 is ``DeadlineExceeded``;
anything else is ``UpstreamFailed``. A replica that refuses connections is
marked unready; a connection that breaks mid-call (a reused keep-alive
connection the server closed, say) says nothing about the replica. Either way
the chunk is tried once more, elsewhere when another replica is ready, if the
deadline allows: computing an embedding twice has no side effect. Chunks of one
request run in parallel; the first failure cancels the others.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import msgspec

from headway.errors import (
    DeadlineExceeded,
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
    """One chunk to a replica serving ``version``, tried at most twice."""
    tried: Replica | None = None
    for _ in range(2):
        replica = pool.pick(version, exclude=tried) or (tried if tried and tried.ready else None)
        if replica is None:
            if tried is not None:
                raise UpstreamFailed(f"pool {pool.name}: no other replica to try")
            raise NoReplicas(f"pool {pool.name} has no ready replica")
        remaining_s = deadline.remaining_s()
        if remaining_s <= 0:
            raise DeadlineExceeded("deadline passed before the work was sent")
        replica.outstanding_texts += texts
        try:
            reply = await transport.post(
                replica.url, path, body_for(remaining_s * 1000), protocol.CONTENT_TYPE, remaining_s
            )
        except TransportTimeout as exc:
            raise DeadlineExceeded("deadline passed while the work ran") from exc
        except ConnectFailed:
            pool.mark_unreachable(replica)
            tried = replica
            continue
        except TransportError:
            tried = replica
            continue
        finally:
            replica.outstanding_texts -= texts
        return _interpret(reply, replica)
    raise UpstreamFailed(f"pool {pool.name}: replicas unreachable")


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

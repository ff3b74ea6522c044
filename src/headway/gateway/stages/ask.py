"""One question to one replica of a pool, for work that is not a chunk of model work
(TEI's ``/tokenize`` and ``/decode``): the version's replica picked as chunks are, one
attempt (the work is cheap to ask again), the worker's refusals mapped as ``dispatch``
maps them."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from headway import wire
from headway.errors import (
    DeadlineExceeded,
    ModelMismatch,
    NoReplicas,
    UpstreamFailed,
    ValidationFailed,
)
from headway.gateway.context import Deadline
from headway.gateway.pool import ReplicaPool
from headway.gateway.stages.dispatch import worker_message
from headway.transport.base import TransportError, TransportTimeout, UpstreamRequest

T = TypeVar("T")


async def ask(
    pool: ReplicaPool,
    version: str,
    message: Any,
    decoder: msgspec.msgpack.Decoder[T],
    deadline: Deadline,
    weight: int,
) -> T:
    """``message`` (a wire struct with a ``path`` and a ``timeout_ms``) to a replica serving
    ``version``, counted as ``weight`` texts of its outstanding work while it runs."""
    replica = pool.pick(version)
    if replica is None:
        raise NoReplicas(f"no ready replica serves {version[:12]}", retry_after_s=1.0)
    remaining_s = deadline.remaining_s()
    if remaining_s <= 0:
        raise DeadlineExceeded("deadline passed before the work was sent")
    body = wire.encode(msgspec.structs.replace(message, timeout_ms=remaining_s * 1000))
    request = UpstreamRequest(
        "POST", replica.url, message.path, remaining_s, body, wire.CONTENT_TYPE, None
    )
    pool.take(replica, weight)
    try:
        reply = await pool.transport.send(request)
    except TransportTimeout as exc:
        raise DeadlineExceeded("deadline passed while the work ran") from exc
    except TransportError as exc:
        raise UpstreamFailed(f"replica {replica.url} did not answer: {exc}") from exc
    finally:
        pool.release(replica, weight)
    if reply.status == 200:
        try:
            return decoder.decode(reply.body)
        except msgspec.DecodeError as exc:
            raise UpstreamFailed(f"replica {replica.url} answered a malformed body") from exc
    message_text = worker_message(reply)
    refusals: dict[int, type[Exception]] = {
        409: ModelMismatch,
        422: ValidationFailed,
        503: NoReplicas,
        504: DeadlineExceeded,
    }
    refusal = refusals.get(reply.status)
    if refusal is not None:
        raise refusal(message_text)
    raise UpstreamFailed(f"replica {replica.url} answered {reply.status}: {message_text}")

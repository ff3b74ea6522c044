"""The usage event: one per request that did work on our side, keyed by our request id.

It is the one record billing trusts. The gateway writes it to its outbox before the
answer leaves (``outbox.py``), the relay carries it to NATS JetStream with
``Nats-Msg-Id`` = ``request_id``, and the consumer writes it to the ledger once per
``request_id`` (``billing/``). Encoded as JSON (``encode``/``decode``), so that an
operator can read a stream or a dead letter with any tool.

``billable`` is False for work we refunded: our failure (5xx), shed after the quota
was charged, our deadline. Those events still reach the ledger (an operator sees
the work we did and gave back) but never its aggregates, nor an invoice.
"""

from __future__ import annotations

from typing import Literal

import msgspec

Endpoint = Literal["embeddings", "rerank"]
SCHEMA_VERSION = 1


class MalformedEvent(ValueError):
    """Bytes that do not decode to a valid usage event (they go to the dead letters)."""


class UsageEvent(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    request_id: str
    """Ours (the edge's ``X-Request-Id``): the key of the outbox, the stream and the ledger."""
    tenant: str
    key_id: str
    """An id of the API key (a prefix of its digest), never the key itself."""
    endpoint: Endpoint
    alias: str
    """The model name the client asked for."""
    version: str
    """The content hash of the version that served it."""
    tier: Literal["interactive", "batch"]
    texts: int
    tokens: int
    """Real tokens, counted by the model's tokenizer on the worker."""
    outcome: str
    """``served``, or the error type of a failure on our side (``deadline_exceeded``, …)."""
    billable: bool
    queue_s: float
    """Longest time a chunk of this request waited in a worker's queue."""
    inference_s: float
    """Longest time a chunk of this request spent in model runs."""
    total_s: float
    """From the request's arrival at the gateway to the event."""
    gateway_id: str
    at: float
    """Unix time (seconds) the gateway finished the request; its hour is the ledger's."""
    schema: int = SCHEMA_VERSION
    trace_id: str = ""
    """The W3C trace id (hex) of the request: a ledger row leads to the request's trace.
    Consumers must be upgraded before gateways (events are decoded strictly)."""

    @property
    def hour(self) -> int:
        """The start of the event's hour, in unix seconds."""
        return int(self.at // 3600) * 3600


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(UsageEvent)


def encode(event: UsageEvent) -> bytes:
    return _encoder.encode(event)


def decode(data: bytes) -> UsageEvent:
    """The event in ``data``, checked; ``MalformedEvent`` for anything else."""
    try:
        event = _decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise MalformedEvent(str(exc)) from exc
    problem = _problem(event)
    if problem:
        raise MalformedEvent(problem)
    return event


def _problem(event: UsageEvent) -> str | None:
    if event.schema != SCHEMA_VERSION:
        return f"schema {event.schema} is not {SCHEMA_VERSION}"
    if not event.request_id or not event.tenant or not event.version:
        return "request_id, tenant and version must not be empty"
    if event.texts < 0 or event.tokens < 0:
        return "texts and tokens must not be negative"
    if not 0 < event.at < 2**33:
        return f"at {event.at!r} is not a unix time"
    if any("\x00" in value for value in _strings(event)):
        return "a text field holds a NUL character"  # Postgres would refuse it, forever
    return None


def _strings(event: UsageEvent) -> list[str]:
    return [
        event.request_id,
        event.tenant,
        event.key_id,
        event.alias,
        event.version,
        event.outcome,
        event.gateway_id,
    ]

"""The usage event: one per request that did work on our side, keyed by our request id.

It is the one record billing trusts: the gateway writes it to its outbox before the answer
leaves (``outbox.py``), the relay carries it to JetStream with ``Nats-Msg-Id`` =
``request_id``, and the consumer writes it to the ledger once per ``request_id``
(``billing/``). JSON, so that an operator can read a stream or a dead letter with any tool.

``billable`` is False for work we refunded (our 5xx, shed after the quota was charged, our
deadline): such an event reaches the ledger, where an operator sees the work given back,
but never its aggregates nor an invoice.

Usage is keyed by ``tenant_id``, the registry's id, never given to another tenant (one
created with a deleted one's name starts with no usage); ``tenant`` is the name, for display.
A schema 1 event (no id; still in an outbox or the stream while a deployment upgrades)
decodes with ``LEGACY_TENANT_ID`` and is billed under its name, like the ledger's legacy
rows (``billing/ledger/migrations.py``): nothing of an old event is dropped, nor guessed.
"""

from __future__ import annotations

from typing import Literal

import msgspec

Endpoint = Literal["embeddings", "rerank"]
SCHEMA_VERSION = 2
LEGACY_SCHEMA = 1
"""Events without ``tenant_id``; still decoded (see the module's docstring)."""
LEGACY_TENANT_ID = 0
"""The tenant id of usage recorded before events carried one (registry ids start at 1)."""


class MalformedEvent(ValueError):
    """Bytes that do not decode to a valid usage event (they go to the dead letters)."""


class UsageEvent(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    request_id: str
    """Ours (the edge's ``X-Request-Id``): the key of the outbox, the stream and the ledger."""
    tenant_id: int
    """The tenant's registry id: what the ledger keys usage by (``LEGACY_TENANT_ID``
    only in a schema 1 event)."""
    tenant: str
    """The tenant's name when it was served: for display (a name can be re-created)."""
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


class _EventV1(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Schema 1, as the gateways before tenant ids wrote it (never edited: it is what
    they wrote)."""

    request_id: str
    tenant: str
    key_id: str
    endpoint: Endpoint
    alias: str
    version: str
    tier: Literal["interactive", "batch"]
    texts: int
    tokens: int
    outcome: str
    billable: bool
    queue_s: float
    inference_s: float
    total_s: float
    gateway_id: str
    at: float
    schema: int = LEGACY_SCHEMA
    trace_id: str = ""


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(UsageEvent)
_legacy_decoder = msgspec.json.Decoder(_EventV1)


def encode(event: UsageEvent) -> bytes:
    return _encoder.encode(event)


def decode(data: bytes) -> UsageEvent:
    """The event in ``data``, checked; ``MalformedEvent`` for anything else."""
    try:
        event = _decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        legacy = _legacy(data)
        if legacy is None:
            raise MalformedEvent(str(exc)) from exc
        event = legacy
    problem = _problem(event)
    if problem:
        raise MalformedEvent(problem)
    return event


def _legacy(data: bytes) -> UsageEvent | None:
    """A schema 1 event as a ``UsageEvent`` of ``LEGACY_TENANT_ID``; None if it is not one."""
    try:
        old = _legacy_decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    if old.schema != LEGACY_SCHEMA:
        return None  # a newer event that lacks its tenant id: the first error says so
    fields = {name: getattr(old, name) for name in old.__struct_fields__}
    return UsageEvent(tenant_id=LEGACY_TENANT_ID, **fields)


def _problem(event: UsageEvent) -> str | None:
    if event.schema not in (LEGACY_SCHEMA, SCHEMA_VERSION):
        return f"schema {event.schema} is not {SCHEMA_VERSION}"
    if (event.schema == LEGACY_SCHEMA) != (event.tenant_id == LEGACY_TENANT_ID):
        return f"tenant_id {event.tenant_id} in an event of schema {event.schema}"
    if event.tenant_id < 0 or event.tenant_id >= 2**63:
        return f"tenant_id {event.tenant_id} is not a registry id"
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

"""The usage event: written, durably, before a 200 leaves; not billable when we gave back.

``UsageMeter`` wraps the work from the quota charge to the merge. ``served`` returns only once
the event is durable (the outbox committed and fsynced it: ``metering/outbox.py``), so every 200
has an event, on disk for the relay if the gateway dies after it, and a client that disconnects
after the model ran is billed (docs/billing.md, "Every 200 billed exactly once").

Work that fails on our side (a 5xx) leaves an event with ``billable`` False: the operator sees
the work we did and gave back, no invoice does. A client's mistake (4xx) leaves none, nor does a
request admission refused: no worker saw it, and under overload an event per refusal would cost
a durable write per shed request. The rule, and the quota refunds with it, is ``settle.py``'s.

A batch line keeps its own request id on every attempt (billed once: ``gateway/lines/headers.py``);
the not-billable event of a failed attempt gets an id of its own, so the attempt that serves
still finds the line's id free in the ledger.

``check_meter`` runs before any work: a gateway whose outbox is full (NATS away long enough to
fill it) answers 503 rather than serve what it cannot bill.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType

from headway.errors import HeadwayError, MeteringUnavailable
from headway.gateway.context import RequestContext
from headway.gateway.stages.authenticate import Caller
from headway.gateway.stages.merge import Merged
from headway.gateway.stages.resolve import Target
from headway.gateway.stages.settle import settlement
from headway.metering.event import Endpoint, UsageEvent
from headway.metering.sink import UsageSink
from headway.tracing.spans import current_trace_id

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class MeterParts:
    """What the meter needs of the gateway: where events go, who we are, the time."""

    sink: UsageSink
    gateway_id: str
    wall_clock: Callable[[], float]
    """Unix time, for the event's ``at`` (its hour is the ledger's)."""
    clock: Callable[[], float]
    """The gateway's monotonic clock, for ``total_s``."""
    outcome: Callable[[str, bool, float], None] | None = None
    """Told (version, served, seconds) of each request that served or failed on our side:
    the counts a rollout is judged on (``rollouts/recorder.py``)."""


def check_meter(sink: UsageSink) -> None:
    if sink.full:
        raise MeteringUnavailable(
            "the usage outbox is full (the usage stream is unreachable); retry later",
            retry_after_s=5.0,
        )


class UsageMeter:
    """``async with UsageMeter(parts, ctx, caller, target, texts, started) as meter``:
    ``await meter.served(merged)`` on success; a not-billable event if the block fails on
    our side. A class, not an ``asynccontextmanager``: it runs on every request."""

    __slots__ = ("_caller", "_ctx", "_done", "_parts", "_started", "_target", "_texts")

    def __init__(
        self,
        parts: MeterParts,
        ctx: RequestContext,
        caller: Caller,
        target: Target,
        texts: int,
        started: float,
    ) -> None:
        self._parts, self._ctx, self._caller = parts, ctx, caller
        self._target, self._texts, self._started = target, texts, started
        self._done = False

    async def __aenter__(self) -> UsageMeter:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._done or not settlement(exc).not_billable_event:
            return
        outcome = exc.type if isinstance(exc, HeadwayError) else "internal_error"
        self._tell(False)
        try:
            await self._parts.sink.record(self._event(outcome, False, None))
        except Exception:  # the request fails anyway; its own error is the one to answer
            log.exception("request %s: could not record its refunded usage", self._ctx.request_id)

    async def served(self, merged: Merged, *, model_ran: bool = True) -> None:
        """``model_ran`` False: the cache answered every text (no outcome for a rollout)."""
        self._done = True
        if model_ran:
            self._tell(True)
        try:
            await self._parts.sink.record(self._event("served", True, merged))
        except Exception as exc:
            raise MeteringUnavailable("the usage event could not be made durable") from exc

    def _tell(self, served: bool) -> None:
        parts = self._parts
        if parts.outcome is not None:
            parts.outcome(self._target.record.version, served, parts.clock() - self._started)

    def _event(self, outcome: str, billable: bool, merged: Merged | None) -> UsageEvent:
        ctx, parts, target = self._ctx, self._parts, self._target
        endpoint: Endpoint = "rerank" if ctx.route == "rerank" else "embeddings"
        request_id = ctx.request_id
        if not billable and self._caller.retried:  # its own id stays free for the retry
            request_id = request_id[:24] + os.urandom(4).hex()
        return UsageEvent(
            request_id=request_id,
            tenant_id=ctx.tenant.id,
            tenant=ctx.tenant.name,
            key_id=self._caller.key_id,
            endpoint=endpoint,
            alias=target.alias,
            version=target.record.version,
            tier=ctx.tenant.tier,
            texts=self._texts,
            tokens=merged.tokens if merged else 0,
            outcome=outcome,
            billable=billable,
            queue_s=merged.queue_s if merged else 0.0,
            inference_s=merged.inference_s if merged else 0.0,
            total_s=parts.clock() - self._started,
            gateway_id=parts.gateway_id,
            at=parts.wall_clock(),
            trace_id=current_trace_id(),
        )

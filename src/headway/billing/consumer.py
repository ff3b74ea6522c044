"""The billing consumer: usage events → the ledger, once per request id, acked after commit.

One loop, one batch at a time:

    fetch   up to ``batch_events`` deliveries from the source (JetStream or the outboxes)
    decode  each one; what is not a valid event becomes a dead letter, never an error
    apply   the batch in ONE ledger transaction (processed ids + hourly aggregates +
            dead letters); a failure (the database is away) retries the SAME batch,
            with capped, jittered backoff (``ledger_link.py``), until it commits —
            nothing is acked meanwhile, and the outage is logged once each way
    ack     synchronously, only now: a crash before this line redelivers the batch,
            and the ledger's primary key drops what was already committed

So duplicates, redeliveries and replays from any point change nothing, and a
malformed event never blocks the stream. Billing lag is measured per event as
commit time minus the event's ``at`` (when the gateway answered).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from headway.billing.ledger.base import Applied, DeadLetter, Ledger
from headway.billing.ledger_link import Backoff, LedgerLink
from headway.billing.sources.base import Delivery, EventSource
from headway.metering.event import MalformedEvent, UsageEvent, decode

log = logging.getLogger(__name__)


class ConsumerObserver(Protocol):
    def committed(self, applied: Applied, lags_s: Sequence[float]) -> None: ...
    def apply_failed(self) -> None: ...
    def source_failed(self, step: str) -> None: ...
    def pending(self, events: int) -> None: ...


class NoObserver:
    def committed(self, applied: Applied, lags_s: Sequence[float]) -> None:
        pass

    def apply_failed(self) -> None:
        pass

    def source_failed(self, step: str) -> None:
        pass

    def pending(self, events: int) -> None:
        pass


def split(deliveries: Sequence[Delivery]) -> tuple[list[UsageEvent], list[DeadLetter]]:
    """The valid events, and a dead letter for each delivery that is not one."""
    events: list[UsageEvent] = []
    dead: list[DeadLetter] = []
    for delivery in deliveries:
        try:
            events.append(decode(delivery.data))
        except MalformedEvent as exc:
            dead.append(DeadLetter(delivery.data, str(exc)[:500], delivery.source))
    return events, dead


class Consumer:
    def __init__(
        self,
        source: EventSource,
        ledger: Ledger,
        *,
        batch_events: int = 500,
        fetch_wait_s: float = 0.2,
        observer: ConsumerObserver | None = None,
        wall_clock: Callable[[], float] = time.time,
        max_backoff_s: float = 5.0,
        link: LedgerLink | None = None,
    ) -> None:
        """``link``: the ledger's reachability, shared with whoever opened the ledger
        (the service); by default one of its own backing off up to ``max_backoff_s``."""
        self._source, self._ledger = source, ledger
        self._batch_events, self._fetch_wait_s = batch_events, fetch_wait_s
        self._observer = observer or NoObserver()
        self._wall_clock = wall_clock
        self._link = link or LedgerLink(backoff=Backoff(min(0.05, max_backoff_s), max_backoff_s))

    async def run(self) -> None:
        """Until cancelled."""
        while True:
            await self.step()

    async def step(self) -> Applied | None:
        """One batch, fetched, committed and acked; None when the source had nothing.

        A source that fails (NATS away) is counted and logged, and the step ends: a
        failed fetch is tried again on the next step; a failed ack leaves the batch to be
        delivered again, which the ledger's primary key makes harmless."""
        try:
            deliveries = await self._source.fetch(self._batch_events, self._fetch_wait_s)
        except Exception as exc:
            self._source_failed("fetch", exc)
            await asyncio.sleep(self._fetch_wait_s)
            return None
        if not deliveries:
            try:
                pending = await self._source.pending()
            except Exception as exc:
                self._source_failed("pending", exc)
                return None
            if pending is not None:
                self._observer.pending(pending)
            return None
        events, dead = split(deliveries)
        if dead:
            log.warning("%d malformed usage events go to the dead letters", len(dead))
        applied = await self._apply(events, dead)
        now = self._wall_clock()
        self._observer.committed(applied, [now - event.at for event in events])
        try:
            await self._source.ack(deliveries)
        except Exception as exc:
            self._source_failed("ack", exc)
        return applied

    def _source_failed(self, step: str, exc: Exception) -> None:
        self._observer.source_failed(step)
        log.warning("usage source %s failed: %s", step, exc)

    async def _apply(self, events: list[UsageEvent], dead: list[DeadLetter]) -> Applied:
        while True:
            try:
                applied = await self._ledger.apply(events, dead)
            except Exception as exc:  # the database is away: hold the batch, try again
                self._observer.apply_failed()
                self._link.failed(exc, "writing a batch")
                await self._link.pause()
                continue
            self._link.succeeded()
            return applied

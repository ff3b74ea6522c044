"""Planted bugs, for the chaos checker's self-test only (``bench/chaos.py``).

A checker that has never caught anything proves little. Each plant below is one of the
bugs the exactly-once design exists to prevent, switched on in one process by the
``test_faults`` setting, which start-up refuses unless ``test_faults_allowed`` is set too
(``Settings._test_fault_only_in_tests``); the manifests and ``headway up`` set neither.

    drop_outbox_row    the gateway answers 200 but one usage event in ``DROP_EVERY``
                       never reaches its outbox: a request served and never billed
    ack_before_commit  the billing consumer acknowledges each batch as soon as it is
                       fetched, before the ledger commits it: a consumer that dies with
                       the batch uncommitted (Postgres away, a SIGKILL) loses it
    duplicate_line     the executor writes the first answered line of each output
                       file twice

Each is a wrapper around the real seam (``Metering``, ``EventSource``, the mover's line
results), so the product's own modules hold no test branch; each logs a warning at start
so a log shows the process was rigged.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from typing import Literal

from headway.background import Background
from headway.batches.model import LineResult
from headway.billing.sources.base import Delivery, EventSource
from headway.metering.event import UsageEvent
from headway.metering.sink import Metering
from headway.settings import Settings

log = logging.getLogger(__name__)

Plant = Literal["drop_outbox_row", "ack_before_commit", "duplicate_line"]
DROP_EVERY = 20
"""``drop_outbox_row`` drops the 20th, 40th, ... event a gateway records."""


def planted(settings: Settings, plant: Plant) -> bool:
    """Whether this process runs with ``plant`` (settings already refused it outside tests)."""
    if plant not in settings.test_faults:
        return False
    log.warning("PLANTED BUG %s is on in this process (test_faults): tests only", plant)
    return True


class DroppingMetering:
    """``drop_outbox_row``: every ``every``-th event is not recorded, and the request is
    still answered 200."""

    def __init__(self, inner: Metering, every: int = DROP_EVERY) -> None:
        self._inner, self._every, self._seen = inner, every, 0

    @property
    def full(self) -> bool:
        return self._inner.full

    async def record(self, event: UsageEvent) -> None:
        self._seen += 1
        if self._seen % self._every:
            await self._inner.record(event)

    async def start(self, background: Background) -> None:
        await self._inner.start(background)

    async def close(self) -> None:
        await self._inner.close()


class AckingOnFetch:
    """``ack_before_commit``: each fetched batch is acknowledged before the consumer
    writes it; the consumer's own ack afterwards does nothing."""

    def __init__(self, inner: EventSource) -> None:
        self._inner = inner

    async def fetch(self, max_events: int, timeout_s: float) -> Sequence[Delivery]:
        deliveries = await self._inner.fetch(max_events, timeout_s)
        if deliveries:
            await self._inner.ack(deliveries)
        return deliveries

    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        return None

    async def pending(self) -> int | None:
        return await self._inner.pending()

    async def close(self) -> None:
        await self._inner.close()


def duplicating_first_answer(results: Iterable[LineResult]) -> Iterator[LineResult]:
    """``duplicate_line``: the results in order, the first answered (ok) one twice."""
    doubled = False
    for result in results:
        yield result
        if result.ok and not doubled:
            doubled = True
            yield result


def gateway_metering(settings: Settings, metering: Metering) -> Metering:
    return DroppingMetering(metering) if planted(settings, "drop_outbox_row") else metering


def consumer_source(settings: Settings, source: EventSource) -> EventSource:
    return AckingOnFetch(source) if planted(settings, "ack_before_commit") else source


__all__ = [
    "DROP_EVERY",
    "AckingOnFetch",
    "DroppingMetering",
    "Plant",
    "consumer_source",
    "duplicating_first_answer",
    "gateway_metering",
    "planted",
]

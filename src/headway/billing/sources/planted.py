"""``ack_before_commit`` (``headway.plants``): a consumer's source that acknowledges early."""

from __future__ import annotations

from collections.abc import Sequence

from headway.billing.sources.base import Delivery, EventSource
from headway.plants import planted
from headway.settings import Settings


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


def planted_source(settings: Settings, source: EventSource) -> EventSource:
    return AckingOnFetch(source) if planted(settings, "ack_before_commit") else source

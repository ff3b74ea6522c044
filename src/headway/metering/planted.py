"""``drop_outbox_row`` (``headway.plants``): a gateway's metering that loses events."""

from __future__ import annotations

from headway.background import Background
from headway.metering.event import UsageEvent
from headway.metering.sink import Metering
from headway.plants import DROP_EVERY, planted
from headway.settings import Settings


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


def planted_metering(settings: Settings, metering: Metering) -> Metering:
    return DroppingMetering(metering) if planted(settings, "drop_outbox_row") else metering

"""Where the request path puts a usage event: a protocol, and a fake beside it.

``record`` returns once the event is durable (for the outbox: committed and
fsynced); the request path awaits it before the 200 leaves. ``full`` is checked
before any work runs: a gateway whose outbox has reached its bound refuses new
requests (503) rather than serve work it could not bill.
"""

from __future__ import annotations

from typing import Protocol

from headway.background import Background
from headway.metering.event import UsageEvent


class UsageSink(Protocol):
    @property
    def full(self) -> bool: ...

    async def record(self, event: UsageEvent) -> None: ...


class Metering(UsageSink, Protocol):
    """A sink with a lifecycle, as the gateway service owns it: ``start`` opens it and
    puts its loops (the relay) on the service's ``Background``; ``close`` flushes."""

    async def start(self, background: Background) -> None: ...

    async def close(self) -> None: ...


class MemorySink:
    """Keeps events in a list; for tests of the request path."""

    def __init__(self) -> None:
        self.events: list[UsageEvent] = []
        self.full = False

    async def record(self, event: UsageEvent) -> None:
        self.events.append(event)

    async def start(self, background: Background) -> None:
        return None

    async def close(self) -> None:
        return None

"""A source of usage events for the billing consumer, acknowledged only after commit.

``fetch`` returns up to ``max_events`` deliveries (waiting at most ``timeout_s`` for
the first); the consumer writes them to the ledger in one transaction and only then
calls ``ack`` with the same deliveries. Whatever is fetched and not acknowledged
(the consumer crashed, the transaction failed) comes again: the source is at least
once, the ledger's primary key makes it exactly once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Delivery:
    data: bytes
    """The event's bytes as published (``metering.event.encode``), maybe malformed."""
    source: str
    """Where it came from, for dead letters: ``usage.events #123`` or ``outbox gw-1 #45``."""
    published_at: float | None
    """Unix time the stream stored it, when the source knows it (for billing lag)."""
    token: object
    """The source's own handle for ``ack``."""


class EventSource(Protocol):
    async def fetch(self, max_events: int, timeout_s: float) -> Sequence[Delivery]: ...

    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        """Acknowledge, synchronously: returns once the source has recorded the acks."""
        ...

    async def pending(self) -> int | None:
        """Events not yet acknowledged (consumer lag), when the source can tell."""
        ...

    async def close(self) -> None: ...


class MemorySource:
    """A list of deliveries; acks remembered. For tests of the consumer."""

    def __init__(self, deliveries: Sequence[Delivery] = ()) -> None:
        self.waiting = list(deliveries)
        self.acked: list[Delivery] = []

    async def fetch(self, max_events: int, timeout_s: float) -> Sequence[Delivery]:
        taken, self.waiting = self.waiting[:max_events], self.waiting[max_events:]
        return taken

    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        self.acked.extend(deliveries)

    async def pending(self) -> int | None:
        return len(self.waiting)

    async def close(self) -> None:
        return None

"""The durable work queue of batch lines: what executors pull, run and acknowledge.

A validated batch puts one ``WorkItem`` per line; an executor pulls items, records each
line's result, and only then acks. An item neither acked, nak'd nor touched for
``lease_s`` is delivered again, to anyone: delivery is at least once, and the batch store
keeps a line's first result (its request id is the same on every attempt, so the ledger
bills it once). A pull hands out items round robin by tenant (``fair.py``), within the
puller's ``Room`` (per tenant: its cap on lines in flight less what it holds; none while
its quota says wait), so no tenant's backlog delays another's line past the next pull.
Items name their tenant by id; items an older executor queued carry only the name and
come with ``LEGACY_TENANT_ID``, served as their batch's tenant until drained.

``queue_open.open_work_queue`` picks ``sqlite_queue.SqliteWorkQueue`` (embedded: a table
in the batch store's file, rows claimed under a lease token) or
``jetstream_queue.JetStreamWorkQueue`` (shared: a JetStream work-queue stream, a durable
pull consumer per tenant).

    WorkQueueError              the queue could not do what was asked (closed, file broken)
    ├── WorkQueueUnavailable    NATS away or not answering in time: try again later
    └── WorkQueueConfigError    the stream exists with another configuration
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from headway.batches.model import LEGACY_TENANT_ID


class WorkQueueError(RuntimeError):
    """The work queue could not do what was asked: it is closed, or its store failed."""


class WorkQueueUnavailable(WorkQueueError):
    """The queue's server is away or did not confirm in time; nothing is lost, try again."""


class WorkQueueConfigError(WorkQueueError):
    """The queue's stream exists with a configuration other than the one it needs."""


@dataclass(frozen=True, slots=True)
class WorkItem:
    """One line of one batch, to be served once (msgspec encodes it as a JSON object)."""

    batch_id: str
    line: int
    """1-based line number in the batch's input file."""
    tenant_id: int
    """The batch's tenant; ``LEGACY_TENANT_ID`` on an item an older executor queued."""
    tenant: str
    """The tenant's name, for logs."""


def check_owned(items: Sequence[WorkItem]) -> None:
    """Every item names a tenant by id: a batch still nobody's (``LEGACY_TENANT_ID``, not
    yet adopted) is never queued."""
    for item in items:
        if item.tenant_id <= LEGACY_TENANT_ID:
            raise WorkQueueError(
                f"line {item.line} of {item.batch_id} names no tenant id ({item.tenant_id}):"
                " a batch is queued only once it is its tenant's"
            )


@dataclass(frozen=True, slots=True)
class Room:
    """How many items of each tenant one pull may hand out: ``tenants[id]`` where the
    puller named the tenant, else ``per_tenant`` (None: as many as the pull takes)."""

    per_tenant: int | None = None
    tenants: Mapping[int, int] = field(default_factory=dict)

    def of(self, tenant_id: int) -> int | None:
        return self.tenants.get(tenant_id, self.per_tenant)


ANY_ROOM = Room()


class Delivery(Protocol):
    """One pulled item, leased to its puller until acked, nak'd or the lease runs out."""

    @property
    def item(self) -> WorkItem: ...

    @property
    def attempts(self) -> int:
        """Deliveries of this item so far, this one included (1 on the first)."""
        ...

    async def ack(self) -> None:
        """Done: the item is never delivered again."""
        ...

    async def nak(self, delay_s: float) -> None:
        """Not now: the item is visible again after ``delay_s`` (a 429/503's wait)."""
        ...

    async def touch(self) -> None:
        """Still working: the lease starts again from now."""
        ...


class WorkQueue(Protocol):
    """Batch lines, durable, delivered at least once (see the module docstring)."""

    @property
    def lease_s(self) -> float:
        """A delivery neither acked, nak'd nor touched for this long is delivered again."""
        ...

    async def put(self, items: Sequence[WorkItem]) -> None:
        """Durable when it returns. An item whose ``(batch_id, line)`` is queued already
        (not yet acked) is not queued twice. ``WorkQueueError`` for an item without a
        tenant id (``check_owned``)."""
        ...

    async def pull(self, max_items: int, wait_s: float, room: Room = ANY_ROOM) -> list[Delivery]:
        """Up to ``max_items`` visible items, round robin by tenant and within ``room``,
        waiting at most ``wait_s`` for the first (``0``: look once); ``[]`` when none came
        in time."""
        ...

    async def ack_all(self, deliveries: Sequence[Delivery]) -> None:
        """``ack`` each of ``deliveries`` (this queue's), at once where the queue can (one
        transaction)."""
        ...

    async def drop(self, batch_id: str) -> int:
        """Remove every queued item of a batch (cancelled, expired, tenant deleted);
        returns how many went, best effort."""
        ...

    async def depth(self) -> int:
        """Items not yet acked (queued, delayed or leased)."""
        ...

    async def close(self) -> None: ...

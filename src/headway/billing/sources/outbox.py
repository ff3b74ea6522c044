"""Usage events straight from the gateways' outboxes: the consumer's source in embedded
mode, where there is no NATS.

Every ``*.sqlite3`` in the folder is one gateway's outbox (``<gateway id>.sqlite3``);
the folder is listed again every ``rescan_s`` for gateways that appeared or went. Each
file has a cursor: ``fetch`` reads rows after it (the files taken in turns, so one busy
gateway does not starve the others) and moves it; ``ack`` deletes the rows from their
files, which is also how the gateway's outbox drains (its depth follows, see
``metering/outbox.py``).

At least once, as the contract asks: a fresh source starts every cursor at 0, so after
a consumer crash whatever was fetched and not acknowledged is still in the files and is
read again. Within one process, a row fetched and not acknowledged for ``ack_wait_s``
(its transaction failed) puts its file's cursor back to it, as JetStream's ack wait
does: it and the rows after it are delivered again, and the ledger drops duplicates.
``ack`` raises ``OutboxError`` when a file cannot be written (the rows stay, and come
again). ``pending`` is the sum of the files' depths (the spans of their ids).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from headway.billing.sources.base import Delivery
from headway.metering.outbox import OutboxError, OutboxFile

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Cursor:
    file: OutboxFile
    after_id: int = 0
    fetched_at: dict[int, float] = field(default_factory=dict)
    """Rows delivered and not yet acknowledged, with when."""
    failing: bool = False


class OutboxSource:
    """An ``EventSource`` over a folder of outbox files (see the module docstring)."""

    def __init__(
        self,
        folder: Path,
        *,
        rescan_s: float = 2.0,
        ack_wait_s: float = 30.0,
        poll_s: float = 0.05,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.folder = folder
        self._rescan_s = rescan_s
        self._ack_wait_s = ack_wait_s
        self._poll_s = poll_s
        self._clock = clock
        self._cursors: dict[Path, _Cursor] = {}
        self._scanned_at: float | None = None
        self._turn = 0

    async def fetch(self, max_events: int, timeout_s: float) -> Sequence[Delivery]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            await self._rescan_if_due()
            deliveries = await self._take(max_events)
            remaining = deadline - loop.time()
            if deliveries or remaining <= 0:
                return deliveries
            await asyncio.sleep(min(self._poll_s, remaining))

    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        by_file: dict[Path, list[int]] = {}
        for delivery in deliveries:
            path, row_id = _token_of(delivery)
            by_file.setdefault(path, []).append(row_id)
        for path, ids in by_file.items():
            cursor = self._cursors.get(path)
            file = cursor.file if cursor is not None else OutboxFile(path)
            await file.remove(ids)
            if cursor is None:
                await file.close()
                continue
            for row_id in ids:
                cursor.fetched_at.pop(row_id, None)

    async def pending(self) -> int | None:
        await self._rescan_if_due()
        total = 0
        for cursor in list(self._cursors.values()):
            try:
                total += await cursor.file.depth()
            except OutboxError:
                return None
        return total

    async def close(self) -> None:
        cursors, self._cursors = self._cursors, {}
        for cursor in cursors.values():
            await cursor.file.close()

    async def _rescan_if_due(self) -> None:
        if self._scanned_at is None or self._clock() - self._scanned_at >= self._rescan_s:
            await self._rescan()

    async def _rescan(self) -> None:
        self._scanned_at = self._clock()
        present = set(await asyncio.to_thread(lambda: sorted(self.folder.glob("*.sqlite3"))))
        for path in present - self._cursors.keys():
            self._cursors[path] = _Cursor(OutboxFile(path))
        for path in self._cursors.keys() - present:
            await self._cursors.pop(path).file.close()

    async def _take(self, max_events: int) -> list[Delivery]:
        """Up to ``max_events`` rows, the files in turns starting one further each call."""
        paths = sorted(self._cursors)
        if not paths:
            return []
        self._turn = (self._turn + 1) % len(paths)
        deliveries: list[Delivery] = []
        for path in paths[self._turn :] + paths[: self._turn]:
            if len(deliveries) >= max_events:
                break
            deliveries += await self._take_from(self._cursors[path], max_events - len(deliveries))
        return deliveries

    async def _take_from(self, cursor: _Cursor, limit: int) -> list[Delivery]:
        now = self._clock()
        overdue = [i for i, at in cursor.fetched_at.items() if now - at >= self._ack_wait_s]
        if overdue:
            cursor.after_id = min(overdue) - 1
            redelivered = [i for i in cursor.fetched_at if i > cursor.after_id]
            for row_id in redelivered:
                del cursor.fetched_at[row_id]
        try:
            rows = await cursor.file.read(cursor.after_id, limit)
        except OutboxError as exc:  # a file still being created, or a broken one
            if not cursor.failing:
                cursor.failing = True
                log.warning("outbox source: skipping %s for now: %s", cursor.file.path, exc)
            return []
        cursor.failing = False
        if not rows:
            return []
        cursor.after_id = rows[-1].id
        path = cursor.file.path
        deliveries = []
        for row in rows:
            cursor.fetched_at[row.id] = now
            deliveries.append(
                Delivery(
                    data=row.data,
                    source=f"outbox {path.stem} #{row.id}",
                    published_at=row.created_at,
                    token=(path, row.id),
                )
            )
        return deliveries


def _token_of(delivery: Delivery) -> tuple[Path, int]:
    token = delivery.token
    if (
        not isinstance(token, tuple)
        or len(token) != 2
        or not isinstance(token[0], Path)
        or not isinstance(token[1], int)
    ):
        raise TypeError(f"{delivery.source}: not a delivery of an OutboxSource")
    return token[0], token[1]

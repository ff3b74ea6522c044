"""What the executor cannot work without, and how it waits for each.

Two dependencies, each a ``DependencyLink`` (``headway.dependency_link``: capped, jittered
backoff, one log line per change of state): the batch store (Postgres in shared mode,
else the SQLite file) and the work queue (JetStream, else the SQLite queue). Each has its
gauge (``headway_batch_store_up``, ``headway_batch_queue_up``) and its retries counter, and
the executor is ready only while both are up.

Waiting loses nothing and does nothing twice, because of the order every line keeps
(``executor.py``): its result is recorded, then its queue item acked. A line whose
record fails while the store is away is handed back (or, the queue away too, comes back
after its lease): it runs again. A line recorded whose ack fails is delivered again, and
the executor that pulls it finds the result and only acks it. The store's ``record`` keeps
the first result of a line, so no line is in the output twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from headway.batches.metrics import ExecutorMetrics
from headway.batches.queue import WorkQueueUnavailable
from headway.batches.store import BatchStoreUnavailable
from headway.dependency_link import Backoff, DependencyLink

AWAY = (BatchStoreUnavailable, WorkQueueUnavailable)
"""The errors that mean a dependency is away (waited out), not that something is wrong."""

MEANWHILE = "lines wait meanwhile (none lost: each is delivered again)"


@dataclass(frozen=True, slots=True)
class ExecutorLinks:
    store: DependencyLink
    queue: DependencyLink

    @classmethod
    def of(
        cls,
        metrics: ExecutorMetrics | None = None,
        initial_s: float = 0.1,
        max_s: float = 10.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> ExecutorLinks:
        """Both links, reported to ``metrics`` (none: to metrics nobody reads)."""
        seen = metrics or ExecutorMetrics()

        def link(dependency: str, name: str) -> DependencyLink:
            return DependencyLink(
                name,
                on_change=lambda up: seen.dependency_up(dependency, up),
                on_retry=lambda: seen.dependency_retry(dependency),
                backoff=Backoff(initial_s, max_s),
                sleep=sleep,
                meanwhile=MEANWHILE,
                resumed="the executor carries on",
            )

        return cls(link("store", "batch store"), link("queue", "work queue"))

    def of_error(self, exc: BaseException) -> DependencyLink:
        """The link whose dependency ``exc`` (one of ``AWAY``) says is away."""
        return self.store if isinstance(exc, BatchStoreUnavailable) else self.queue

    @property
    def up(self) -> bool:
        return self.store.up is True and self.queue.up is True


def watched(
    step: Callable[[], Awaitable[object]], links: ExecutorLinks, doing: str
) -> Callable[[], Awaitable[None]]:
    """``step`` (a periodic one: the mover's tick, the depth reading) whose dependency
    errors are told to their link, once a change, rather than logged with a traceback at
    every interval; anything else it raises goes on to the loop that runs it."""

    async def run() -> None:
        try:
            await step()
        except AWAY as exc:
            links.of_error(exc).failed(exc, doing)

    return run

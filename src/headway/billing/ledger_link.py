"""Whether the consumer can reach its ledger, and how it waits while it cannot.

The consumer meets an unreachable ledger in two places: at start (``headway billing
run`` started before Postgres, or while it restarts) and mid-stream (a connection lost
under a batch). Both wait as every process waits for a dependency
(``headway.dependency_link``: capped exponential backoff with jitter, one log line per
change of state); this module names the ledger's link and ties it to the billing
metrics' observer, ``headway_billing_ledger_up`` and
``headway_billing_ledger_retries_total``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from headway.billing.ledger.base import Ledger
from headway.billing.ledger.errors import LedgerUnavailable
from headway.dependency_link import Backoff, DependencyLink, backoff_delay, until_reachable

__all__ = ["Backoff", "LedgerLink", "LedgerObserver", "backoff_delay", "open_when_reachable"]

log = logging.getLogger(__name__)


class LedgerObserver(Protocol):
    def ledger_up(self, up: bool) -> None:
        """The ledger answered (True) or failed (False); called on every change."""
        ...

    def ledger_retry(self) -> None:
        """A failed ledger call is about to be tried again."""
        ...


class NoLedgerObserver:
    def ledger_up(self, up: bool) -> None:
        pass

    def ledger_retry(self) -> None:
        pass


class LedgerLink(DependencyLink):
    """The ledger's reachability as the consumer last saw it."""

    def __init__(
        self,
        observer: LedgerObserver | None = None,
        backoff: Backoff | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        observer = observer or NoLedgerObserver()
        super().__init__(
            "billing ledger",
            on_change=observer.ledger_up,
            on_retry=observer.ledger_retry,
            backoff=backoff,
            sleep=sleep,
            logger=log,
            meanwhile="nothing is acknowledged meanwhile",
            resumed="the consumer carries on",
        )


async def open_when_reachable(
    open_ledger: Callable[[], Awaitable[Ledger]], link: LedgerLink
) -> Ledger:
    """``open_ledger()`` once it succeeds: while it raises ``LedgerUnavailable`` (the
    database is down, starting, refusing connections) it is tried again after the link's
    backoff. Any other error (``SchemaTooNew``: newer code migrated it) is raised, as no
    wait can cure it."""
    return await until_reachable(open_ledger, link, LedgerUnavailable, "opening it")

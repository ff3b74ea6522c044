"""Whether the consumer can reach its ledger, and how it waits while it cannot.

The consumer meets an unreachable ledger in two places: at start (``headway billing
run`` started before Postgres, or while it restarts) and mid-stream (a connection lost
under a batch). Both wait the same way: capped exponential backoff with jitter
(``backoff_delay``), so a fleet of consumers that lost one database does not come back
at it in lock-step, and never faster than ``initial_s`` nor slower than ``max_s``.

``LedgerLink`` is the one place that knows the state (up, down, not yet known): it
logs one line per change of state, never one per attempt (a database away for an hour
is two lines, not thousands), and tells its observer, which the metrics turn into
``headway_billing_ledger_up`` and ``headway_billing_ledger_retries_total``.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Protocol

from headway.billing.ledger.base import Ledger
from headway.billing.ledger.errors import LedgerUnavailable

log = logging.getLogger(__name__)


def backoff_delay(attempt: int, initial_s: float, max_s: float, unit: float) -> float:
    """The pause before retry ``attempt`` (0 for the first): ``initial_s · 2^attempt``
    capped at ``max_s``, then jittered to between half of it and all of it by ``unit`` in
    [0, 1). Half is kept ("equal jitter") so that a retry never comes at once."""
    base = min(max_s, initial_s * 2.0 ** min(attempt, 62))
    return base / 2 + base / 2 * unit


class Backoff:
    """Successive delays of one outage; ``reset`` once a call succeeded."""

    def __init__(
        self,
        initial_s: float = 0.1,
        max_s: float = 30.0,
        unit: Callable[[], float] = random.random,
    ) -> None:
        if not 0 < initial_s <= max_s:
            raise ValueError(f"backoff needs 0 < initial_s <= max_s, got {initial_s}, {max_s}")
        self.initial_s, self.max_s = initial_s, max_s
        self._unit = unit
        self.attempt = 0

    def next(self) -> float:
        delay = backoff_delay(self.attempt, self.initial_s, self.max_s, self._unit())
        self.attempt += 1
        return delay

    def reset(self) -> None:
        self.attempt = 0


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


class LedgerLink:
    """The ledger's reachability as the consumer last saw it."""

    def __init__(
        self,
        observer: LedgerObserver | None = None,
        backoff: Backoff | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._observer = observer or NoLedgerObserver()
        self.backoff = backoff or Backoff()
        self._sleep = sleep
        self.up: bool | None = None
        """None until the first call settled it."""
        self.changes = 0
        """State changes so far (each one logged once)."""

    def succeeded(self) -> None:
        self.backoff.reset()
        if self.up is not True:
            if self.up is False:
                log.info("billing ledger reachable again; the consumer carries on")
            self._change(True)

    def failed(self, exc: BaseException, doing: str) -> None:
        if self.up is not False:
            log.error(
                "billing ledger unreachable while %s (%s); retrying with backoff up to %.1f s,"
                " nothing is acknowledged meanwhile",
                doing,
                exc,
                self.backoff.max_s,
            )
            self._change(False)

    async def pause(self) -> None:
        """Wait out the next backoff delay before a retry."""
        self._observer.ledger_retry()
        await self._sleep(self.backoff.next())

    def _change(self, up: bool) -> None:
        self.up = up
        self.changes += 1
        self._observer.ledger_up(up)


async def open_when_reachable(
    open_ledger: Callable[[], Awaitable[Ledger]], link: LedgerLink
) -> Ledger:
    """``open_ledger()`` once it succeeds: while it raises ``LedgerUnavailable`` (the
    database is down, starting, refusing connections) it is tried again after the link's
    backoff. Any other error (``SchemaTooNew``: newer code migrated it) is raised, as no
    wait can cure it."""
    while True:
        try:
            ledger = await open_ledger()
        except LedgerUnavailable as exc:
            link.failed(exc, "opening it")
            await link.pause()
            continue
        link.succeeded()
        return ledger

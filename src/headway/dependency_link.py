"""Whether a process can reach a dependency it cannot work without, and how it waits.

A long-lived process (the billing consumer, the batch executor, a worker reading the model
store) meets an unreachable dependency (Postgres, NATS) in two places: at start (started
before it, or while it restarts) and mid-work (a connection lost under a call). Both wait
the same way: capped exponential backoff with jitter (``backoff_delay``), so a fleet that
lost one database does not come back at it in lock-step, and never faster than
``initial_s`` nor slower than ``max_s``.

``DependencyLink`` is the one place that knows one dependency's state (up, down, not yet
known): it logs one line per change of state, never one per attempt (a database away for
an hour is two lines, not thousands), and calls ``on_change(up)`` and ``on_retry()``,
which each owner's metrics turn into a ``…_up`` gauge and a retries counter; its
``/readyz`` follows ``up``. What is unavailable (and so worth waiting for) is the
caller's typed error (``LedgerUnavailable``, ``BatchStoreUnavailable``,
``WorkQueueUnavailable``, ``RegistryUnavailable``); any other error is raised, as no wait
can cure it.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

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


def _ignore_change(up: bool) -> None:
    pass


def _ignore_retry() -> None:
    pass


class DependencyLink:
    """One dependency's reachability as its process last saw it.

    ``name``: what the log lines call it ("billing ledger", "batch store"); ``meanwhile``:
    what the process does while it waits, for the line that says it is down ("nothing is
    acknowledged meanwhile"); ``resumed``: for the line that says it is back."""

    def __init__(
        self,
        name: str,
        *,
        on_change: Callable[[bool], None] = _ignore_change,
        on_retry: Callable[[], None] = _ignore_retry,
        backoff: Backoff | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        logger: logging.Logger = log,
        meanwhile: str = "nothing is lost meanwhile",
        resumed: str = "carrying on",
    ) -> None:
        self.name = name
        self._on_change, self._on_retry = on_change, on_retry
        self.backoff = backoff or Backoff()
        self._sleep = sleep
        self._log = logger
        self._meanwhile, self._resumed = meanwhile, resumed
        self.up: bool | None = None
        """None until the first call settled it."""
        self.changes = 0
        """State changes so far (each one logged once)."""

    def succeeded(self) -> None:
        self.backoff.reset()
        if self.up is not True:
            if self.up is False:
                self._log.info("%s reachable again; %s", self.name, self._resumed)
            self._change(True)

    def failed(self, exc: BaseException, doing: str) -> None:
        if self.up is not False:
            self._log.error(
                "%s unreachable while %s (%s); retrying with backoff up to %.1f s, %s",
                self.name,
                doing,
                exc,
                self.backoff.max_s,
                self._meanwhile,
            )
            self._change(False)

    async def pause(self) -> None:
        """Wait out the next backoff delay before a retry."""
        self._on_retry()
        await self._sleep(self.backoff.next())

    def _change(self, up: bool) -> None:
        self.up = up
        self.changes += 1
        self._on_change(up)


async def until_reachable(
    call: Callable[[], Awaitable[T]],
    link: DependencyLink,
    unavailable: type[BaseException] | tuple[type[BaseException], ...],
    doing: str,
) -> T:
    """``call()`` once it succeeds: while it raises ``unavailable`` (the dependency is
    down, starting, refusing connections) it is tried again after the link's backoff. Any
    other error is raised at once."""
    while True:
        try:
            result = await call()
        except unavailable as exc:
            link.failed(exc, doing)
            await link.pause()
            continue
        link.succeeded()
        return result

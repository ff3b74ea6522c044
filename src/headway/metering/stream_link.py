"""What every JetStream client here shares: its set-up run once, in a task of its own that
whoever waits shares, and its failures logged once per streak.

``StreamSetup.ready(timeout_s)`` starts the set-up (connect, streams, consumers) if none
is running and waits for it at most ``timeout_s``: False when it is not done by then (it
goes on); the set-up's own exception when it failed (the next caller starts a fresh
one); True once it is done. A caller never waits longer than its own timeout, however
long NATS takes to answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable


class StreamSetup:
    def __init__(self, set_up: Callable[[], Awaitable[None]], name: str) -> None:
        self._set_up, self._name = set_up, name
        self._task: asyncio.Task[None] | None = None
        self.done = False

    async def ready(self, timeout_s: float) -> bool:
        if self.done:
            return True
        task = self._task
        if task is None:
            task = self._task = asyncio.get_running_loop().create_task(self._run(), name=self._name)
        finished, _ = await asyncio.wait({task}, timeout=max(timeout_s, 0.0))
        if not finished:
            return False
        if self._task is task:  # several callers may have waited on this one set-up
            self._task = None
        task.result()  # the set-up's exception, if it failed
        return True

    def reset(self) -> None:
        """Set up again on the next ``ready`` (the server lost what was set up)."""
        self.done = False

    async def close(self, *expected: type[BaseException]) -> None:
        """Cancel a set-up under way; ``expected``: its failures, not raised here."""
        task, self._task, self.done = self._task, None, False
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, *expected):
                await task

    async def _run(self) -> None:
        await self._set_up()
        self.done = True


class FailureStreak:
    """A failure logged when a streak of them starts, and once more when it ends."""

    def __init__(self, log: logging.Logger, failing: str, recovered: str) -> None:
        """``failing``: a %s for the detail of the first failure; ``recovered``: the line
        logged when it ends."""
        self._log, self._failing_line, self._recovered_line = log, failing, recovered
        self.failing = False

    def failed(self, detail: str) -> None:
        if not self.failing:
            self.failing = True
            self._log.warning(self._failing_line, detail)

    def recovered(self) -> None:
        if self.failing:
            self.failing = False
            self._log.warning(self._recovered_line)

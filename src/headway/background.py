"""Every background loop of a process, supervised so that none dies silently.

``every`` runs a periodic step: one that raises is logged with its traceback and counted
(``on_failure``), and the loop carries on at the next interval, since one failed poll must not
freeze a pool's readiness for the rest of the process's life. ``essential`` runs a task the
process cannot serve without (the worker's batcher): if it ever returns or raises, that is a
bug, logged as critical, and ``on_fatal`` stops the process (by default at once, exit status
70), so an orchestrator restarts it instead of it answering nothing while looking alive.

``stop()`` cancels them all and waits for them; it is the only way they end. A step that
swallowed the cancellation or turned it into an error (``cancellation.py``: Python 3.11's
``wait_for``, nats-py) still ends its loop, which checks after each step whether it was asked
to stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable, Coroutine

from headway.cancellation import cancel_requested, raise_if_cancel_requested

log = logging.getLogger(__name__)

Step = Callable[[], Awaitable[object]]
EXIT_SOFTWARE = 70  # sysexits.h EX_SOFTWARE: an internal error


def exit_now(name: str) -> None:
    """Stop the process at once: its state cannot be trusted to shut down cleanly."""
    logging.shutdown()
    os._exit(EXIT_SOFTWARE)


def _exit_now(name: str) -> None:
    exit_now(name)


class Background:
    def __init__(
        self,
        *,
        on_failure: Callable[[str], None] | None = None,
        on_fatal: Callable[[str], None] | None = None,
        on_loop: Callable[[str], None] | None = None,
    ) -> None:
        """``on_failure(loop)``: a step failed; ``on_loop(loop)``: a loop was started (its
        failure counter exists from then, at 0)."""
        self._on_failure = on_failure
        self._on_loop = on_loop
        self._on_fatal = on_fatal or _exit_now  # looked up when called: tests replace it
        self._tasks: list[asyncio.Task[None]] = []
        self.failures: dict[str, int] = {}
        """Failed steps so far, per loop."""

    def every(self, name: str, interval_s: float, step: Step) -> asyncio.Task[None]:
        """Run ``step`` every ``interval_s`` (the first time after one interval)."""
        if self._on_loop is not None:
            self._on_loop(name)
        return self._spawn(name, self._periodic(name, interval_s, step))

    def essential(self, name: str, run: Step) -> asyncio.Task[None]:
        """Run ``run`` until cancelled (here or by its owner); ending any other way stops
        the process."""
        return self._spawn(name, self._guarded(name, run))

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _spawn(self, name: str, loop: Coroutine[object, object, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(loop, name=name)
        self._tasks.append(task)
        return task

    async def _periodic(self, name: str, interval_s: float, step: Step) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await step()
            except Exception:
                if cancel_requested():  # the step turned this loop's stop into an error
                    raise asyncio.CancelledError from None
                self.failures[name] = self.failures.get(name, 0) + 1
                log.exception("background loop %s: step failed; carrying on", name)
                if self._on_failure is not None:
                    self._on_failure(name)
            raise_if_cancel_requested()  # a stop the step swallowed (cancellation.py)

    async def _guarded(self, name: str, run: Step) -> None:
        try:
            await run()
            raise_if_cancel_requested()  # stopped, though ``run`` swallowed the stop
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            if isinstance(exc, Exception) and cancel_requested():  # its stop, as an error
                raise asyncio.CancelledError from None
            log.critical("background task %s died; stopping the process", name, exc_info=True)
        else:
            log.critical("background task %s ended; stopping the process", name)
        self._on_fatal(name)

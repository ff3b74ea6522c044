"""A task that was asked to stop stops, even when something it awaited swallowed the ask.

A loop that runs until cancelled (the batch executor's line loop, every ``Background``
loop) trusts that ``task.cancel()`` reaches it as a ``CancelledError``. It may not:

- Python 3.11's ``asyncio.wait_for`` returns the inner result instead of raising when the
  task is cancelled in the loop turn in which the awaited future completes
  (python/cpython#86296; 3.12 rebuilt ``wait_for`` on ``asyncio.timeout``). nats-py's
  ``Subscription.next_msg`` waits that way, so a pull that is cancelled just as a message
  arrives returns the message;
- nats-py's ``next_msg`` turns a cancellation into ``ConnectionClosedError`` when the
  connection is closed, which a caller handling NATS errors treats as an outage.

Either way the cancel is spent: the task carries on, every later await runs as normal,
and whoever awaits the task (a stop, a test) waits for ever. ``Task.cancelling()`` still
counts the request (only ``uncancel`` takes it back), so a loop that checks
``cancel_requested()`` once a turn, after the awaits that may swallow, stops within a turn.
"""

from __future__ import annotations

import asyncio


def cancel_requested() -> bool:
    """Whether the running task has been asked to stop (and no one took the ask back);
    False outside a task."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def raise_if_cancel_requested() -> None:
    """Raise ``CancelledError`` if the running task was asked to stop: the stop that
    something below swallowed (the module docstring) takes effect here."""
    if cancel_requested():
        raise asyncio.CancelledError

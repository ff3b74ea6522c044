"""The hang dump (tests/hangs.py): a block still waiting at its deadline fails with the
await chain of every task, down to the call that waits."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from tests.hangs import Hung, dumped_on_timeout


async def _waits_for(never: asyncio.Future[None]) -> None:
    await never


async def _outer(never: asyncio.Future[None]) -> None:
    await _waits_for(never)


async def test_a_block_past_its_deadline_fails_with_every_tasks_await_chain() -> None:
    never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    waiter = asyncio.create_task(_outer(never), name="the-waiter")
    try:
        with pytest.raises(Hung) as failed:
            async with dumped_on_timeout(0.01):
                await waiter
    finally:
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
    dump = str(failed.value)
    assert "the-waiter" in dump
    assert dump.index("in _outer") < dump.index("in _waits_for")  # outermost first
    assert "--- threads ---" in dump and "Current thread" in dump


async def test_a_block_that_ends_in_time_is_left_alone() -> None:
    async with dumped_on_timeout(60):
        await asyncio.sleep(0)


async def _swallowing_the_cancellation() -> None:
    """As a library that turns a cancellation into a return would."""
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.get_running_loop().create_future()


async def test_a_block_that_swallows_the_cancellation_still_fails() -> None:
    with pytest.raises(Hung):
        async with dumped_on_timeout(0.01):
            await _swallowing_the_cancellation()

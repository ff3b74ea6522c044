"""A stop that something below swallowed still stops the task (``cancellation.py``), and
every ``Background`` loop honours it."""

from __future__ import annotations

import asyncio
import contextlib
import sys

import pytest

from headway.background import Background
from headway.cancellation import cancel_requested, raise_if_cancel_requested


async def _swallow_one_cancel() -> None:
    """Park until cancelled, then return as if nothing happened."""
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.get_running_loop().create_future()


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="3.12 rebuilt wait_for on timeout")
async def test_python_3_11s_wait_for_returns_the_result_of_a_cancel_that_came_with_it():
    """The mechanism itself: the awaited future completes and the task is cancelled in
    the same loop turn, and ``wait_for`` returns the result (python/cpython#86296)."""
    arrived: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    task = asyncio.ensure_future(asyncio.wait_for(arrived, 10))
    await asyncio.sleep(0)  # the task waits inside wait_for
    arrived.set_result("message")
    task.cancel()
    assert await task == "message"  # not CancelledError: the cancel is gone
    assert not task.cancelled()


async def test_a_swallowed_cancel_is_still_requested_and_raised_where_checked():
    seen: list[bool] = []

    async def loop() -> None:
        seen.append(cancel_requested())
        await _swallow_one_cancel()
        seen.append(cancel_requested())
        raise_if_cancel_requested()
        raise AssertionError("went on after its stop")

    task = asyncio.ensure_future(loop())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == [False, True]
    assert not cancel_requested()  # this test's own task was never asked


async def test_a_background_loop_whose_step_swallows_its_stop_ends():
    steps = 0
    stepping = asyncio.Event()

    async def step() -> None:
        nonlocal steps
        steps += 1
        stepping.set()
        if steps == 1:
            await _swallow_one_cancel()
        else:  # went on after its stop: wait here, so the test fails rather than hangs
            await asyncio.get_running_loop().create_future()

    background = Background()
    background.every("swallows", 0.001, step)
    await stepping.wait()
    stop = asyncio.ensure_future(background.stop())
    done, _ = await asyncio.wait({stop}, timeout=10)
    assert done and steps == 1


async def test_a_background_loop_whose_step_turns_its_stop_into_an_error_ends_unlogged(caplog):
    stepping = asyncio.Event()
    failed: list[str] = []

    async def step() -> None:
        first = not stepping.is_set()
        stepping.set()
        try:
            await asyncio.get_running_loop().create_future()
        except asyncio.CancelledError:
            if first:
                raise ConnectionError("closed") from None  # as nats-py's next_msg does
            raise

    background = Background(on_failure=failed.append)
    background.every("converts", 0.001, step)
    await stepping.wait()
    await asyncio.wait_for(background.stop(), 10)
    assert failed == [] and background.failures == {}


async def test_an_essential_task_that_swallows_its_stop_is_stopped_not_fatal():
    fatal: list[str] = []
    running = asyncio.Event()

    async def serves() -> None:
        running.set()
        await _swallow_one_cancel()

    background = Background(on_fatal=fatal.append)
    background.essential("serves", serves)
    await running.wait()
    await asyncio.wait_for(background.stop(), 10)
    assert fatal == []


async def test_the_billing_consumers_fetch_raises_a_stop_nats_py_swallowed():
    """``JetStreamSource.fetch`` returns nothing but a stop when nats-py's ``fetch`` (on
    ``next_msg``, ``wait_for``) swallowed one: the consumer's loop ends, no event acked."""
    from headway.billing.sources.jetstream import JetStreamSource
    from headway.metering.stream import StreamConfig

    class SwallowingSubscription:
        async def fetch(self, batch: int, timeout: float) -> list[object]:  # noqa: ASYNC109 (nats-py's)
            await _swallow_one_cancel()
            return []

    source = JetStreamSource(StreamConfig(servers=("nats://127.0.0.1:9",)))

    async def ready(timeout_s: float) -> SwallowingSubscription:
        return SwallowingSubscription()

    source._ready = ready  # type: ignore[method-assign,assignment]
    task = asyncio.ensure_future(source.fetch(10, 5.0))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

"""A JetStream client's set-up: run once for every waiter, bounded by each one's timeout,
started again after a failure or a reset."""

from __future__ import annotations

import asyncio
import logging

import pytest

from headway.metering.stream_link import FailureStreak, StreamSetup


class SetUp:
    def __init__(self) -> None:
        self.calls = 0
        self.release = asyncio.Event()
        self.fail: Exception | None = None

    async def __call__(self) -> None:
        self.calls += 1
        await self.release.wait()
        if self.fail is not None:
            raise self.fail


async def test_waiters_share_one_set_up_and_none_waits_past_its_timeout() -> None:
    set_up = SetUp()
    setup = StreamSetup(set_up, "test setup")
    assert await setup.ready(0.01) is False  # still going
    waiters = [asyncio.create_task(setup.ready(5.0)) for _ in range(3)]
    set_up.release.set()
    assert await asyncio.gather(*waiters) == [True, True, True]
    assert set_up.calls == 1 and setup.done
    assert await setup.ready(0.0) is True and set_up.calls == 1


async def test_a_failed_set_up_is_raised_once_and_the_next_caller_starts_another() -> None:
    set_up = SetUp()
    set_up.fail, set_up.release = OSError("refused"), asyncio.Event()
    set_up.release.set()
    setup = StreamSetup(set_up, "test setup")
    with pytest.raises(OSError, match="refused"):
        await setup.ready(1.0)
    set_up.fail = None
    assert await setup.ready(1.0) is True
    assert set_up.calls == 2
    setup.reset()
    assert await setup.ready(1.0) is True and set_up.calls == 3


async def test_close_cancels_a_set_up_under_way() -> None:
    set_up = SetUp()
    setup = StreamSetup(set_up, "test setup")
    assert await setup.ready(0.0) is False
    await setup.close()
    assert not setup.done
    set_up.release.set()
    assert await setup.ready(1.0) is True and set_up.calls == 2


def test_a_streak_is_logged_when_it_starts_and_when_it_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    streak = FailureStreak(logging.getLogger("test.streak"), "failing: %s", "recovered")
    with caplog.at_level(logging.WARNING, "test.streak"):
        streak.recovered()
        for n in range(3):
            streak.failed(f"try {n}")
        streak.recovered()
        streak.recovered()
    assert [r.getMessage() for r in caplog.records] == ["failing: try 0", "recovered"]

"""The one helper every background loop runs under: failures are logged, counted, survived."""

import asyncio
import logging

from headway.background import Background
from tests.fakes import until


async def test_a_failing_step_is_logged_counted_and_the_loop_carries_on(caplog):
    calls = 0
    failed: list[str] = []

    async def step() -> None:
        nonlocal calls
        calls += 1
        if calls <= 2:
            raise RuntimeError("unexpected")

    background = Background(on_failure=failed.append)
    with caplog.at_level(logging.ERROR, logger="headway.background"):
        background.every("poll", 0.001, step)
        await until(lambda: calls >= 5)
    await background.stop()
    assert failed == ["poll", "poll"]
    assert background.failures == {"poll": 2}
    assert len(caplog.records) == 2 and caplog.records[0].exc_info is not None
    after_stop = calls
    await asyncio.sleep(0.01)
    assert calls == after_stop  # stopped means stopped


async def test_an_essential_task_that_dies_or_ends_stops_the_process(caplog):
    fatal: list[str] = []
    background = Background(on_fatal=fatal.append)

    async def dies() -> None:
        raise RuntimeError("bug")

    async def ends() -> None:
        return None

    with caplog.at_level(logging.CRITICAL, logger="headway.background"):
        background.essential("dies", dies)
        background.essential("ends", ends)
        await until(lambda: len(fatal) == 2)
    assert sorted(fatal) == ["dies", "ends"]
    assert {r.levelname for r in caplog.records} == {"CRITICAL"}
    await background.stop()


async def test_stopping_an_essential_task_is_not_a_death():
    fatal: list[str] = []
    background = Background(on_fatal=fatal.append)
    started = asyncio.Event()

    async def serves() -> None:
        started.set()
        await asyncio.Event().wait()

    task = background.essential("serves", serves)
    await started.wait()
    await background.stop()
    assert task.cancelled() and fatal == []

import asyncio

import numpy as np
import pytest

from headway.background import Background
from headway.models.backend import Encoded
from headway.worker.batcher import Batcher, BatchLimits, DeadlineMissed, NoObserver, QueueFull
from tests.fakes import FakeClock, RecordingBackend, until


def never_fatal(name: str) -> None:
    raise AssertionError(f"background task {name} died")


def texts(*first_ids: int, length: int = 1) -> list[Encoded]:
    return [Encoded((i,) + (0,) * (length - 1)) for i in first_ids]


async def started(backend: RecordingBackend, limits: BatchLimits, clock: FakeClock) -> Batcher:
    batcher = Batcher(backend, limits, clock=clock)
    batcher.start(Background(on_fatal=never_fatal))
    return batcher


async def wait_entered(backend: RecordingBackend) -> None:
    assert await asyncio.to_thread(backend.entered.wait, 5)


async def test_results_come_back_to_the_right_caller_in_order():
    backend = RecordingBackend()
    batcher = await started(backend, BatchLimits(max_wait_s=0.001), FakeClock())
    first = batcher.submit(texts(1, 2), deadline=2000)
    second = batcher.submit(texts(3), deadline=2000)
    assert not isinstance(first, QueueFull) and not isinstance(second, QueueFull)
    np.testing.assert_array_equal((await first)[:, 0], [1, 2])
    np.testing.assert_array_equal((await second)[:, 0], [3])
    await batcher.close()


async def test_queued_work_runs_earliest_deadline_first():
    backend = RecordingBackend(gated=True)
    clock = FakeClock()
    batcher = await started(backend, BatchLimits(max_batch_size=1, max_wait_s=0), clock)
    busy = batcher.submit(texts(99), deadline=5000)
    await wait_entered(backend)  # the inference thread is now held on chunk 99
    late = batcher.submit(texts(1), deadline=3000)
    early = batcher.submit(texts(2), deadline=2000)
    backend.gate.set()
    await asyncio.gather(busy, late, early)  # type: ignore[arg-type]
    assert backend.calls == [[99], [2], [1]]
    await batcher.close()


async def test_a_lower_priority_number_runs_first_whatever_its_deadline():
    backend = RecordingBackend(gated=True)
    batcher = await started(backend, BatchLimits(max_batch_size=1, max_wait_s=0), FakeClock())
    busy = batcher.submit(texts(99), deadline=5000)
    await wait_entered(backend)
    batch_tier = batcher.submit(texts(1), deadline=2000, priority=1)
    interactive_late = batcher.submit(texts(2), deadline=4000, priority=0)
    interactive_early = batcher.submit(texts(3), deadline=3000, priority=0)
    backend.gate.set()
    await asyncio.gather(busy, batch_tier, interactive_late, interactive_early)  # type: ignore[arg-type]
    assert backend.calls == [[99], [3], [2], [1]]
    await batcher.close()


async def test_an_owner_task_that_dies_stops_the_process_loudly():
    class Exploding(NoObserver):
        def queue_depth(self, texts: int) -> None:
            if texts == 0:  # the owner task took the chunk: a bug in its bookkeeping
                raise RuntimeError("bug")

    died: list[str] = []
    batcher = Batcher(RecordingBackend(), BatchLimits(max_wait_s=0), observer=Exploding())
    batcher.start(Background(on_fatal=died.append))
    batcher.submit(texts(1), deadline=float("inf"))
    await until(lambda: died == ["batcher"])
    await batcher.close()


async def test_full_queue_is_refused_at_once_as_a_value():
    backend = RecordingBackend(gated=True)
    batcher = await started(backend, BatchLimits(max_queue_texts=3, max_wait_s=0), FakeClock())
    running = batcher.submit(texts(1), deadline=2000)
    await wait_entered(backend)
    queued = batcher.submit(texts(2, 3, 4), deadline=2000)
    refused = batcher.submit(texts(5), deadline=2000)
    assert isinstance(refused, QueueFull)
    assert refused.queued_texts == 3 and refused.max_queue_texts == 3
    backend.gate.set()
    await asyncio.gather(running, queued)  # type: ignore[arg-type]
    await batcher.close()


async def test_expired_work_is_dropped_before_the_model_runs():
    backend = RecordingBackend(gated=True)
    clock = FakeClock(1000.0)
    batcher = await started(backend, BatchLimits(max_batch_size=1, max_wait_s=0), clock)
    running = batcher.submit(texts(1), deadline=1100)
    await wait_entered(backend)
    doomed = batcher.submit(texts(2), deadline=1001)
    kept = batcher.submit(texts(3), deadline=1100)
    clock.advance(5)  # chunk 2's deadline passes while chunk 1 runs
    backend.gate.set()
    with pytest.raises(DeadlineMissed, match="expired"):
        await doomed  # type: ignore[misc]
    await asyncio.gather(running, kept)  # type: ignore[arg-type]
    assert [2] not in backend.calls
    await batcher.close()


async def test_work_that_cannot_finish_in_time_is_dropped():
    backend = RecordingBackend()
    clock = FakeClock(1000.0)
    batcher = await started(backend, BatchLimits(max_wait_s=0), clock)
    batcher.service_time.seconds = 0.5  # one batch takes half a second
    hopeless = batcher.submit(texts(1), deadline=1000.2)
    with pytest.raises(DeadlineMissed, match="cannot_finish"):
        await hopeless  # type: ignore[misc]
    assert backend.calls == []
    await batcher.close()


async def test_callers_that_left_are_skipped():
    backend = RecordingBackend(gated=True)
    batcher = await started(backend, BatchLimits(max_batch_size=1, max_wait_s=0), FakeClock())
    running = batcher.submit(texts(1), deadline=2000)
    await wait_entered(backend)
    gone = batcher.submit(texts(2), deadline=2000)
    stays = batcher.submit(texts(3), deadline=2000)
    gone.cancel()  # type: ignore[union-attr]
    backend.gate.set()
    await asyncio.gather(running, stays)  # type: ignore[arg-type]
    assert backend.calls == [[1], [3]]
    await batcher.close()


async def test_a_failing_batch_fails_every_caller_in_it():
    backend = RecordingBackend(fail=True, gated=True)
    batcher = await started(backend, BatchLimits(max_wait_s=0), FakeClock())
    first = batcher.submit(texts(1), deadline=2000)
    await wait_entered(backend)
    second = batcher.submit(texts(2), deadline=2000)
    third = batcher.submit(texts(3), deadline=2000)
    backend.gate.set()
    for future in (first, second, third):
        with pytest.raises(RuntimeError, match="model exploded"):
            await future  # type: ignore[misc]
    await batcher.close()


async def test_waiting_work_is_batched_up_to_the_size_limit():
    backend = RecordingBackend(gated=True)
    batcher = await started(backend, BatchLimits(max_batch_size=4, max_wait_s=0), FakeClock())
    first = batcher.submit(texts(0), deadline=2000)
    await wait_entered(backend)
    rest = [batcher.submit(texts(i), deadline=2000 + i) for i in range(1, 7)]
    backend.gate.set()
    await asyncio.gather(first, *rest)  # type: ignore[arg-type]
    assert backend.calls == [[0], [1, 2, 3, 4], [5, 6]]
    await batcher.close()


SMALL_BACKGROUND = BatchLimits(max_batch_size=4, max_background_batch_size=2, max_wait_s=0)


async def test_with_no_interactive_work_about_background_work_fills_whole_batches():
    backend = RecordingBackend(gated=True)
    batcher = await started(backend, SMALL_BACKGROUND, FakeClock())
    first = batcher.submit(texts(0), deadline=2000, priority=1)
    await wait_entered(backend)
    rest = [batcher.submit(texts(i), deadline=2000 + i, priority=1) for i in range(1, 6)]
    backend.gate.set()
    await asyncio.gather(first, *rest)  # type: ignore[arg-type]
    assert backend.calls == [[0], [1, 2, 3, 4], [5]]
    await batcher.close()


async def test_while_interactive_work_is_about_background_runs_in_small_pieces():
    backend = RecordingBackend(gated=True)
    clock = FakeClock()
    batcher = await started(backend, SMALL_BACKGROUND, clock)
    first = batcher.submit(texts(0), deadline=2000)  # interactive: about for the next second
    await wait_entered(backend)
    big = batcher.submit(texts(1, 2, 3, 4, 5), deadline=2000, priority=1)
    backend.gate.set()
    await first  # type: ignore[misc]
    rows = await big  # type: ignore[misc]
    assert backend.calls == [[0], [1, 2], [3, 4], [5]]
    np.testing.assert_array_equal(rows[:, 0], [1, 2, 3, 4, 5])  # put back together, in order

    clock.advance(1.5)  # a quiet second later: whole batches again
    backend.gate.clear()
    held = batcher.submit(texts(6), deadline=3000, priority=1)
    await wait_entered(backend)
    again = batcher.submit(texts(7, 8, 9, 10), deadline=3000, priority=1)
    backend.gate.set()
    await asyncio.gather(held, again)  # type: ignore[arg-type]
    assert backend.calls[4:] == [[6], [7, 8, 9, 10]]
    await batcher.close()


async def test_a_batch_led_by_interactive_work_takes_background_only_within_its_cap():
    backend = RecordingBackend(gated=True)
    batcher = await started(backend, SMALL_BACKGROUND, FakeClock())
    first = batcher.submit(texts(0), deadline=2000)
    await wait_entered(backend)
    background = batcher.submit(texts(1, 2), deadline=2000, priority=1)
    interactive = batcher.submit(texts(3), deadline=3000)
    backend.gate.set()
    await asyncio.gather(first, background, interactive)  # type: ignore[arg-type]
    assert backend.calls == [[0], [3, 1], [2]]
    await batcher.close()


async def test_a_failed_piece_fails_its_chunk_once_and_its_other_pieces_never_run():
    backend = RecordingBackend(gated=True, fail_on=frozenset({3}))
    batcher = await started(backend, SMALL_BACKGROUND, FakeClock())
    first = batcher.submit(texts(0), deadline=2000)
    await wait_entered(backend)
    big = batcher.submit(texts(1, 2, 3, 4, 5, 6), deadline=2000, priority=1)
    backend.gate.set()
    await first  # type: ignore[misc]
    with pytest.raises(RuntimeError):
        await big  # type: ignore[misc]
    await until(lambda: batcher.queued_texts == 0)
    assert backend.calls == [[0], [1, 2], [3, 4]]
    await batcher.close()


async def test_close_fails_what_is_still_queued():
    backend = RecordingBackend(gated=True)
    batcher = await started(backend, BatchLimits(max_batch_size=1, max_wait_s=0), FakeClock())
    running = batcher.submit(texts(1), deadline=2000)
    await wait_entered(backend)
    queued = batcher.submit(texts(2), deadline=2000)
    backend.gate.set()
    await running  # type: ignore[misc]
    closing = asyncio.ensure_future(batcher.close())
    await closing
    assert queued.done()  # type: ignore[union-attr]


class FakeSleep:
    """A batch-fill wait on the fake clock: records each wait asked for; with ``gated``, a
    wait lasts until the test opens the gate, then the clock moves on by its length."""

    def __init__(self, clock: FakeClock, *, gated: bool = False) -> None:
        self.clock = clock
        self.waits: list[float] = []
        self.gate = asyncio.Event()
        if not gated:
            self.gate.set()

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        await self.gate.wait()
        self.clock.advance(seconds)


FILL = BatchLimits(max_batch_size=8, max_wait_s=0.002)


def filling(
    backend: RecordingBackend, limits: BatchLimits, clock: FakeClock, sleep: FakeSleep
) -> Batcher:
    """A batcher whose model costs 50 ms a call + 5 ms a text, as the synthetic one."""
    batcher = Batcher(backend, limits, clock=clock, sleep=sleep)
    for texts in (8, 1, 8, 1):
        batcher.cost.observe(texts, 0.050 + 0.005 * texts)
    batcher.start(Background(on_fatal=never_fatal))
    return batcher


def arriving_fast(batcher: Batcher, clock: FakeClock) -> None:
    """Chunks have been arriving 1 ms apart: about 1,000 texts/s."""
    for i in range(5):
        batcher.arrivals.observe(clock.now - 0.005 + i * 0.001, 1)


async def test_an_idle_model_with_nothing_more_expected_runs_a_lone_chunk_at_once():
    backend, clock = RecordingBackend(), FakeClock()
    sleep = FakeSleep(clock)
    batcher = filling(backend, FILL, clock, sleep)
    await batcher.submit(texts(1), deadline=2000)  # type: ignore[misc]
    assert sleep.waits == [] and backend.calls == [[1]]
    await batcher.close()


async def test_with_work_arriving_an_idle_model_waits_and_the_batch_fills():
    backend, clock = RecordingBackend(), FakeClock()
    sleep = FakeSleep(clock, gated=True)
    batcher = filling(backend, FILL, clock, sleep)
    arriving_fast(batcher, clock)
    first = batcher.submit(texts(1), deadline=2000)
    waited = [pytest.approx(0.002)]  # max_wait_s: every other bound is looser
    await until(lambda: sleep.waits == waited)
    second = batcher.submit(texts(*range(2, 9)), deadline=2000)  # the batch is full: it runs
    await asyncio.gather(first, second)  # type: ignore[arg-type]
    assert backend.calls == [list(range(1, 9))] and sleep.waits == waited
    await batcher.close()


async def test_a_wait_that_passes_with_nothing_new_runs_what_is_queued():
    backend, clock = RecordingBackend(), FakeClock()
    sleep = FakeSleep(clock, gated=True)
    batcher = filling(backend, FILL, clock, sleep)
    arriving_fast(batcher, clock)
    lone = batcher.submit(texts(1), deadline=2000)
    waited = [pytest.approx(0.002)]
    await until(lambda: sleep.waits == waited)
    sleep.gate.set()
    await lone  # type: ignore[misc]
    assert backend.calls == [[1]] and sleep.waits == waited  # waited once, not again
    await batcher.close()


async def test_a_model_whose_cost_is_per_text_does_not_wait_however_fast_work_comes():
    backend, clock = RecordingBackend(), FakeClock()
    sleep = FakeSleep(clock)
    batcher = Batcher(backend, FILL, clock=clock, sleep=sleep)
    for n in (8, 1, 8, 1):
        batcher.cost.observe(n, 0.010 * n)
    batcher.start(Background(on_fatal=never_fatal))
    arriving_fast(batcher, clock)
    await batcher.submit(texts(1), deadline=2000)  # type: ignore[misc]
    assert sleep.waits == [] and backend.calls == [[1]]
    await batcher.close()


async def test_work_that_queued_while_the_model_ran_runs_next_without_a_wait():
    backend, clock = RecordingBackend(gated=True), FakeClock()
    sleep = FakeSleep(clock)
    batcher = filling(backend, BatchLimits(max_batch_size=4, max_wait_s=0.002), clock, sleep)
    running = batcher.submit(texts(0), deadline=2000)
    await wait_entered(backend)
    queued = [batcher.submit(texts(i), deadline=2000) for i in (1, 2)]  # not a full batch
    backend.gate.set()
    await asyncio.gather(running, *queued)  # type: ignore[arg-type]
    assert backend.calls == [[0], [1, 2]] and sleep.waits == []
    await batcher.close()


async def test_the_fixed_rule_waits_for_a_batch_to_fill_even_at_idle():
    backend, clock = RecordingBackend(), FakeClock()
    sleep = FakeSleep(clock)
    limits = BatchLimits(max_batch_size=8, max_wait_s=0.002, batch_wait="fixed")
    batcher = filling(backend, limits, clock, sleep)
    await batcher.submit(texts(1), deadline=2000)  # type: ignore[misc]
    assert sleep.waits == [pytest.approx(0.002)] and backend.calls == [[1]]
    await batcher.close()


async def test_the_batches_that_run_teach_the_cost_fit():
    backend, clock = RecordingBackend(), FakeClock()
    batcher = await started(backend, BatchLimits(max_wait_s=0), clock)
    await batcher.run_now(texts(1, 2, 3))
    await batcher.submit(texts(4), deadline=2000)  # type: ignore[misc]
    assert batcher.cost.cost.per_call_s == 0.0  # the fake clock never moved: nothing costs
    assert batcher.arrivals.texts == 1.0
    await batcher.close()

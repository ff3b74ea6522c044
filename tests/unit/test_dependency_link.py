"""The shared dependency link: one log line per change, backoff between tries, and only
the named errors waited out; the executor's two links and its periodic-step guard."""

from __future__ import annotations

import logging

import pytest

from headway.batches.links import ExecutorLinks, watched
from headway.batches.metrics import ExecutorMetrics
from headway.batches.queue import WorkQueueUnavailable
from headway.batches.store import BatchStoreUnavailable
from headway.dependency_link import Backoff, DependencyLink, until_reachable


class Seen:
    def __init__(self) -> None:
        self.states: list[bool] = []
        self.retries = 0

    def change(self, up: bool) -> None:
        self.states.append(up)

    def retry(self) -> None:
        self.retries += 1


async def test_waits_out_only_the_named_error_with_growing_pauses(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="headway.dependency_link")
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    seen = Seen()
    link = DependencyLink(
        "thing",
        on_change=seen.change,
        on_retry=seen.retry,
        backoff=Backoff(0.1, 0.4, unit=lambda: 1.0),
        sleep=sleep,
        meanwhile="waiting",
    )
    failures = 4

    async def call() -> str:
        nonlocal failures
        if failures:
            failures -= 1
            raise ConnectionError("refused")
        return "answer"

    assert await until_reachable(call, link, ConnectionError, "opening it") == "answer"
    assert slept == pytest.approx([0.1, 0.2, 0.4, 0.4])
    assert seen.states == [False, True] and seen.retries == 4 and link.up is True
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2 and messages[0].startswith("thing unreachable while opening it")
    assert messages[0].endswith("waiting") and messages[1].startswith("thing reachable again")

    async def broken() -> str:
        raise ValueError("not a wait's to cure")

    with pytest.raises(ValueError, match="cure"):
        await until_reachable(broken, link, ConnectionError, "opening it")


def test_a_first_success_is_not_logged_as_a_recovery(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="headway.dependency_link")
    link = DependencyLink("thing")
    link.succeeded()
    link.succeeded()
    assert link.up is True and link.changes == 1 and caplog.records == []


def sample(metrics: ExecutorMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels or None)


async def test_executor_links_report_each_dependency_and_need_both_for_ready() -> None:
    metrics = ExecutorMetrics()
    links = ExecutorLinks.of(metrics)
    assert not links.up  # unknown until each answered
    links.store.succeeded()
    links.queue.succeeded()
    assert links.up and sample(metrics, "headway_batch_store_up") == 1

    async def store_away() -> None:
        raise BatchStoreUnavailable("refused")

    async def queue_away() -> None:
        raise WorkQueueUnavailable("refused")

    await watched(store_away, links, "moving batches")()
    assert links.store.up is False and links.queue.up is True and not links.up
    assert sample(metrics, "headway_batch_store_up") == 0
    await watched(queue_away, links, "reading the depth")()
    assert sample(metrics, "headway_batch_queue_up") == 0

    async def bug() -> None:
        raise KeyError("a bug")

    with pytest.raises(KeyError):  # not a dependency: the periodic loop logs and counts it
        await watched(bug, links, "moving batches")()


async def test_the_line_loop_counts_a_pause_per_retry() -> None:
    metrics = ExecutorMetrics()
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    links = ExecutorLinks.of(metrics, 0.1, 0.2, sleep)
    links.store.failed(BatchStoreUnavailable("refused"), "pulling lines")
    await links.store.pause()
    await links.store.pause()
    retries = "headway_batch_dependency_retries_total"
    assert sample(metrics, retries, dependency="store") == 2
    assert sample(metrics, retries, dependency="queue") == 0
    assert len(slept) == 2 and all(0.05 <= s <= 0.2 for s in slept)

"""``headway bench batching``: request shapes, the bound, and its section on made-up runs."""

from collections import Counter

import pytest

from headway_tools.bench import batching_report
from headway_tools.bench.batching import (
    MAX_BATCH_SIZES,
    OUTSTANDING_BATCHES,
    Batches,
    BatchingPoint,
    BatchingResults,
    request_shape,
)
from headway_tools.bench.served import CLIENT, GATEWAY, WORKER, LoadPoint
from headway_tools.loadgen import ClosedLoopResult
from tests.unit.tools.test_bench_reports import COMMAND, MACHINE, assert_like_the_published


@pytest.mark.parametrize("max_batch", MAX_BATCH_SIZES)
def test_requests_fill_batches_exactly_and_keep_batches_queued_behind_the_running_one(max_batch):
    texts, outstanding = request_shape(max_batch)
    assert max_batch % texts == 0  # whole requests fill a batch, none is split across two
    assert texts <= 16  # below the gateway's fan-out chunk: a request reaches the worker whole
    assert texts * outstanding == OUTSTANDING_BATCHES * max_batch


def test_a_request_never_holds_more_than_a_batch_of_one():
    assert request_shape(1) == (1, OUTSTANDING_BATCHES)


def test_the_bound_is_what_full_calls_serve():
    results = BatchingResults(0.050, 0.005, [])
    bounds = [round(results.bound_texts_per_s(n), 1) for n in MAX_BATCH_SIZES]
    assert bounds == [18.2, 88.9, 152.4]  # the 18.2, 88.9 and 152 texts/s


def test_batches_over_a_run_are_the_difference_of_two_readings():
    run = Batches(110, 3300) - Batches(10, 100)
    assert (run.count, run.texts, run.mean_texts) == (100, 3200, 32.0)


def made_up(max_batch: int, texts_per_s: float) -> BatchingPoint:
    texts, outstanding = request_shape(max_batch)
    requests = int(texts_per_s * 10 / texts)
    result = ClosedLoopResult(requests, requests * texts, 10.0, [0.1] * requests, Counter())
    load = LoadPoint(GATEWAY, texts, outstanding, result, {WORKER: 0.3, GATEWAY: 0.2, CLIENT: 0.1})
    return BatchingPoint(max_batch, load, Batches(100, 100 * max_batch))


def test_the_batching_section_is_the_published_one():
    points = [made_up(1, 18.0), made_up(8, 86.0), made_up(32, 148.0)]
    section = batching_report.render(BatchingResults(0.05, 0.005, points), MACHINE, COMMAND, 10)
    assert_like_the_published(section, batching_report.SECTION)
    rows = [line for line in section.splitlines() if line.startswith("| 32 ")]
    assert rows and rows[0].split("|")[4:7] == [" 152 ", " 148 ", " 97% "]
    assert "max batch 8 4.78×, max batch 32 8.22×" in section

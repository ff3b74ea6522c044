"""``headway bench batches``: its input file, its figures and its section, from made-up
results."""

import msgspec
import pytest

from headway.batches.jsonl import check_upload, read_lines
from headway_tools.bench import batches_report
from headway_tools.bench.batches import (
    BATCH_MARGIN,
    CONCURRENCIES,
    TEXTS_PER_LINE,
    BatchesResults,
    Contention,
    Throughput,
    batch_file,
    change,
    contention_lines,
    interactive_workload,
    line_texts,
    saturating_concurrency,
)
from headway_tools.bench.host import Machine
from headway_tools.loadgen import ClosedLoopResult, Summary

MACHINE = Machine("2026-01-01 00:00 UTC", 2, "AMD EPYC", "Linux 6.1", "3.11.7", 0.5)
COMMAND = "headway bench batches --lines 2000 --seconds 30"


# the input ----------------------------------------------------------------------------


def test_lines_hold_distinct_corpus_sentences_and_repeat_with_the_seed():
    lines = line_texts(50)
    assert len(lines) == 50 and {len(texts) for texts in lines} == {TEXTS_PER_LINE}
    flat = [text for texts in lines for text in texts]
    assert len(set(flat)) == len(flat)
    assert line_texts(50) == lines
    assert line_texts(50, seed=99) != lines


def test_the_batch_file_is_one_embeddings_request_per_line_that_the_gateway_takes():
    lines = line_texts(20)
    data = batch_file(lines)
    assert check_upload(data, max_bytes=len(data), max_lines=20) == 20
    accepted, errors = read_lines(
        data, "/v1/embeddings", lambda body: len(msgspec.json.decode(body)["input"]), max_inputs=80
    )
    assert errors == []
    assert [line.texts for line in accepted] == [TEXTS_PER_LINE] * 20
    first = msgspec.json.decode(data.splitlines()[0])
    assert first == {
        "custom_id": "line-1",
        "method": "POST",
        "url": "/v1/embeddings",
        "body": {"model": "all-MiniLM-L6-v2", "input": lines[0]},
    }


def test_the_interactive_requests_have_the_lines_shape():
    (search,) = interactive_workload().classes
    assert search.texts == (TEXTS_PER_LINE, TEXTS_PER_LINE)
    assert search.key == "demo-key-search-app" and search.model == "all-MiniLM-L6-v2"


def test_the_contention_batch_outlasts_the_run_within_the_limits():
    assert contention_lines(400.0, 30.0, 12_500) == BATCH_MARGIN * 400 * 30 / TEXTS_PER_LINE
    assert contention_lines(4000.0, 30.0, 12_500) == 12_500
    assert contention_lines(0.0, 30.0, 12_500) == 1


def test_change_is_relative_to_the_base():
    assert change(100.0, 110.0) == pytest.approx(0.10)
    assert change(100.0, 90.0) == pytest.approx(-0.10)
    assert change(None, 1.0) is None and change(0.0, 1.0) is None and change(1.0, None) is None


# the figures and the section ----------------------------------------------------------


def summary(served: int, goodput: int, p95_ms: float) -> Summary:
    return Summary(
        name="overall",
        start_s=0.0,
        seconds=10.0,
        offered=500,
        served=served,
        goodput=goodput,
        shed=500 - served,
        quota=0,
        timeouts=0,
        errors=0,
        served_texts=served * TEXTS_PER_LINE,
        latency_p50_ms=80.0,
        latency_p95_ms=p95_ms,
        latency_p99_ms=300.0,
        rejection_p99_ms=None,
        lag_p99_ms=1.0,
        lag_max_ms=2.0,
    )


def results(batch_s: float, beside_p95_ms: float, *, throughout: bool = True) -> BatchesResults:
    throughput = Throughput(2000, 8000, 20.0, 32, {"status 503 overloaded": 3}, batch_s)
    contention = Contention(
        50.0, summary(500, 495, 200.0), summary(498, 490, beside_p95_ms), 6000, 1000, throughout
    )
    return BatchesResults(throughput, contention, 10.0)


def test_the_figures_are_rates_and_ratios():
    figures = results(21.0, 215.0)
    assert figures.throughput.sync_texts_per_s == 400.0
    assert figures.throughput.batch_texts_per_s == pytest.approx(8000 / 21)
    assert figures.throughput.ratio == pytest.approx(20 / 21)
    assert figures.contention.p95_change == pytest.approx(0.075)
    assert figures.contention.batch_texts_per_s == 400.0


def test_the_section_shows_both_parts_and_their_goals():
    section = batches_report.render(results(21.0, 215.0), MACHINE, COMMAND)
    assert section.startswith("## Batches")
    assert f"Command: `{COMMAND}`" in section and MACHINE.date in section
    assert "| synchronous API | 20.00 | 400.0 |  |  |" in section
    assert "| Batch API | 21.00 | 381.0 | 95.2% | met |" in section
    assert "(requests not answered 200: 3 status 503 overloaded; sent again)" in section
    assert "| alone | 50.0 | 50.0 | 99.0% | 0 | 0 | 80.0 | 200 | 300 |" in section
    assert "| beside a batch | 50.0 | 49.8 | 98.0% | 2 | 0 | 80.0 | 215 | 300 |" in section
    assert "p95 changed by +7.5% (goal ≤ +10%): met" in section
    assert "(6,000 lines) ran throughout, and completed 1,000 lines meanwhile" in section


def test_the_section_says_what_was_missed():
    section = batches_report.render(results(25.0, 260.0, throughout=False), MACHINE, COMMAND)
    assert "| Batch API | 25.00 | 320.0 | 80.0% | **missed** |" in section
    assert "p95 changed by +30.0% (goal ≤ +10%): **missed**" in section
    assert "**ended before the load did**" in section


class Pool:
    """Closed-loop runs that serve ``rates[concurrency]`` texts/s."""

    def __init__(self, rates: dict[int, float]) -> None:
        self.rates = rates
        self.runs: list[int] = []

    async def run(self, *, concurrency: int, duration_s: float) -> ClosedLoopResult:
        self.runs.append(concurrency)
        texts = int(self.rates[concurrency] * duration_s)
        return ClosedLoopResult(texts // 4, texts, duration_s)


@pytest.mark.parametrize(
    ("rates", "chosen"),
    [
        ({4: 100.0, 8: 200.0, 16: 205.0, 32: 150.0}, 8),  # 16 serves < 5% more than 8
        ({4: 100.0, 8: 150.0, 16: 180.0, 32: 250.0}, 32),
        ({4: 300.0, 8: 290.0, 16: 200.0, 32: 100.0}, 4),
    ],
)
async def test_the_fewest_clients_that_saturate_are_chosen(rates, chosen):
    pool = Pool(rates)
    assert await saturating_concurrency(pool) == chosen
    assert pool.runs == list(CONCURRENCIES)

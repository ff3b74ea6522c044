import numpy as np
import pytest

from headway_tools.loadgen.recorder import (
    Outcome,
    Record,
    Records,
    outcome_of,
    outcomes,
    summarize,
)


def record(
    *,
    cls: str = "a",
    at: float = 0.0,
    latency: float = 0.01,
    status: int = 200,
    failure: str = "",
    lag: float = 0.0,
    texts: int = 1,
    deadline: float = 1.0,
    error: str = "",
) -> Record:
    return Record(
        class_name=cls,
        intended_s=at,
        lag_s=lag,
        latency_s=latency,
        status=status,
        outcome=outcome_of(status, failure),
        texts=texts,
        deadline_s=deadline,
        error=error,
    )


@pytest.mark.parametrize(
    ("status", "failure", "outcome"),
    [
        (200, "", Outcome.OK),
        (503, "", Outcome.SHED),
        (429, "", Outcome.QUOTA),
        (504, "", Outcome.TIMEOUT),
        (0, "timeout", Outcome.TIMEOUT),
        (0, "error", Outcome.ERROR),
        (500, "", Outcome.ERROR),
        (201, "", Outcome.ERROR),
        (400, "", Outcome.ERROR),
    ],
)
def test_outcomes_by_status(status, failure, outcome):
    assert outcome_of(status, failure) is outcome
    vector = outcomes(np.array([status], dtype=np.int32), np.array([failure == "timeout"]))
    assert vector.tolist() == [outcome]


def test_counts_goodput_and_latencies():
    records = Records.from_records(
        [
            # served within the 100 ms deadline, served late, and the rest
            *(
                record(at=0.01 * i, latency=0.010 + 0.001 * i, texts=2, deadline=0.1)
                for i in range(90)
            ),
            *(record(at=0.9, latency=0.5, texts=2, deadline=0.1) for _ in range(10)),
            *(record(at=0.5, status=503, latency=0.002) for _ in range(5)),
            *(record(at=0.5, status=429, latency=0.004) for _ in range(3)),
            record(at=0.5, status=504, latency=0.1),
            record(at=0.5, status=0, failure="timeout", latency=2.0),
            record(at=0.5, status=0, failure="error", latency=0.001, error="connection lost"),
            record(at=0.5, status=500, latency=0.003),
        ]
    )
    report = summarize(records, duration_s=1.0)
    s = report.overall
    assert (s.offered, s.served, s.goodput) == (112, 100, 90)
    assert (s.shed, s.quota, s.timeouts, s.errors) == (5, 3, 2, 2)
    assert s.served_texts == 200 and s.served_texts_per_s == 200
    assert s.latency_p50_ms == pytest.approx(59)  # 50th of 100 served: 10 + 49 ms
    assert s.latency_p95_ms == pytest.approx(500)
    assert s.rejection_p99_ms == pytest.approx(4)
    assert report.error_reasons == {"connection lost": 1, "status 500": 1}


def test_a_served_request_counts_as_goodput_exactly_up_to_its_deadline():
    records = Records.from_records(
        [record(latency=0.25, deadline=0.25), record(latency=0.2501, deadline=0.25)]
    )
    assert summarize(records, 1.0).overall.goodput == 1


def test_per_class_summaries_split_the_records():
    records = Records.from_records(
        [record(cls="batch", texts=8), record(cls="interactive"), record(cls="interactive")],
        class_names=["interactive", "batch", "unused"],
    )
    report = summarize(records, 2.0)
    assert [(c.name, c.offered, c.served_texts) for c in report.classes] == [
        ("interactive", 2, 2),
        ("batch", 1, 8),
        ("unused", 0, 0),
    ]
    assert report.classes[0].offered_rps == 1.0
    assert report.classes[2].latency_p99_ms is None


def test_timeline_buckets_by_intended_second_and_rates_a_partial_last_second():
    times = [0.0, 0.5, 0.99, 1.0, 1.7, 2.2, 2.4]
    records = Records.from_records([record(at=t) for t in reversed(times)])
    timeline = summarize(records, 2.5).timeline
    assert [(s.name, s.start_s, s.offered) for s in timeline] == [
        ("0s", 0.0, 3),
        ("1s", 1.0, 2),
        ("2s", 2.0, 2),
    ]
    assert timeline[2].seconds == 0.5 and timeline[2].offered_rps == 4.0


@pytest.mark.parametrize(
    ("lags_ms", "behind"),
    [
        ([1.0] * 200, False),
        ([1.0] * 197 + [6.0] * 3, True),  # p99 (198th of 200) over 5 ms
        ([1.0] * 198 + [6.0] * 2, False),  # p99 at 1 ms, max under 50 ms
        ([1.0] * 199 + [51.0], True),  # one request over 50 ms late
    ],
)
def test_behind_schedule_from_the_lag(lags_ms, behind):
    records = Records.from_records([record(lag=lag / 1000) for lag in lags_ms])
    report = summarize(records, 1.0)
    assert report.behind_schedule is behind
    assert report.overall.lag_max_ms == pytest.approx(max(lags_ms))


def test_records_read_back_as_rows():
    rows = [record(cls="b", at=0.3, status=0, failure="error", error="connect: refused")]
    records = Records.from_records(rows)
    assert len(records) == 1 and records[0] == rows[0]


def test_an_empty_run_summarizes_to_zeros():
    report = summarize(Records.from_records([], class_names=["a"]), 1.0)
    assert report.overall.offered == 0 and report.overall.lag_p99_ms is None
    assert not report.behind_schedule

from headway.bench.overload import settling_s
from headway.loadgen import LoadResult, Record, Records, summarize
from headway.loadgen.recorder import Outcome


def result(completions):
    """One served request completing at each (intended, latency) pair, deadline 1 s."""
    records = [
        Record("c", intended, 0.0, latency, 200, Outcome.OK, 1, 1.0)
        for intended, latency in completions
    ]
    table = Records.from_records(records, ("c",))
    return LoadResult(table, summarize(table, 20.0))


def test_goodput_that_recovers_after_two_seconds_settles_at_two_seconds():
    # 100 req/s of good completions, except a gap between 10 s and 12 s.
    times = [i / 100 for i in range(2000) if not 1000 <= i < 1200]
    assert settling_s(result([(t, 0.01) for t in times]), 10.0, 20.0, 100.0) == 2.0


def test_late_answers_are_not_goodput():
    times = [i / 100 for i in range(2000)]
    late = result([(t, 1.5) for t in times])  # every answer past its 1 s deadline
    assert settling_s(late, 10.0, 20.0, 100.0) is None
    on_time = result([(t, 0.2) for t in times])
    assert settling_s(on_time, 10.0, 20.0, 100.0) == 0.0

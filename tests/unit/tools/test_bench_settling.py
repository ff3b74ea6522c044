from headway_tools.bench.overload import settling
from headway_tools.loadgen import LoadResult, Record, Records, summarize
from headway_tools.loadgen.recorder import Outcome


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
    settled = settling(result([(t, 0.01) for t in times]), 10.0, 20.0)
    assert settled.seconds == 2.0  # the first 1 s window holding >= 90 completions
    assert 99 <= settled.steady_rps <= 101


def test_late_answers_are_not_goodput():
    times = [i / 100 for i in range(2000)]
    late = settling(result([(t, 1.5) for t in times]), 10.0, 20.0)
    assert late.seconds is None
    assert late.steady_rps == 0.0
    on_time = settling(result([(t, 0.2) for t in times]), 10.0, 20.0)
    assert on_time.seconds == 0.0

"""``headway bench path`` runs the real gateway in process and measures something sane."""

from headway_tools.bench.path import cases, run_path_bench


def test_every_request_kind_is_served_and_costs_a_plausible_cpu_time(tmp_path):
    results = run_path_bench(tmp_path, seconds=0.1)  # every request must be answered 200
    assert [p.case.name for p in results.points] == [c.name for c in cases()]
    for point in results.points:
        assert point.requests >= 5 * 200
        assert len(point.cpu_us) == 5
        assert 1 < point.median_us < 100_000  # µs: neither free nor absurd
    by_name = {p.case.name: p for p in results.points}
    # 64 texts in 4 chunks cost more than 1 text in 1: the measure sees the work
    assert by_name["embeddings, 64 texts"].median_us > by_name["embeddings, 1 text"].median_us
    assert not list(tmp_path.iterdir())  # the data directory is left alone

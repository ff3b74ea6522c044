"""``headway bench batch-commits``: its section on made-up figures (the one
docs/benchmarks.md shows), and one tiny real run."""

from pathlib import Path

from headway_tools.bench import batch_commits
from headway_tools.bench.batch_commits import BatchCommitResults, run_batch_commits_bench
from tests.unit.tools.test_bench_reports import COMMAND, MACHINE, assert_like_the_published


def test_the_batch_commits_section_is_the_published_one() -> None:
    figures = {
        ("add_file", "NORMAL"): 10.0,
        ("add_file", "FULL"): 12.5,
        ("record", "NORMAL"): 8.0,
        ("record", "FULL"): 12.0,
    }
    section = batch_commits.render(BatchCommitResults(10, 30, figures), MACHINE, COMMAND)
    assert_like_the_published(section, batch_commits.SECTION)
    record = next(line for line in section.splitlines() if line.startswith("| `record`"))
    assert record.split("|")[2:6] == [" 8.00 ", " 12.00 ", " +4.00 ", " 1.50 "]


def test_a_run_times_each_call_under_each_setting(tmp_path: Path) -> None:
    results = run_batch_commits_bench(tmp_path, rounds=1, per_round=2)
    assert set(results.ms_per_commit) == {
        (call, sync) for call in ("add_file", "record") for sync in ("NORMAL", "FULL")
    }
    assert all(ms > 0 for ms in results.ms_per_commit.values())
    assert list(tmp_path.iterdir()) == []  # its files removed

"""``headway bench coldstart``'s section, on made-up trials: the one docs/benchmarks.md shows."""

from headway_tools.bench import coldstart_report
from headway_tools.bench.coldstart import ColdStartResults, Trial
from tests.unit.tools.test_bench_reports import COMMAND, MACHINE, assert_like_the_published


def trial(scale: float) -> Trial:
    return Trial(
        cold_s=2.5 * scale,
        warm_s=0.007 * scale,
        held_s=2.45 * scale,
        load_s=0.8 * scale,
        again_cold_s=2.7 * scale,
        again_warm_s=0.006 * scale,
        again_held_s=2.68 * scale,
        again_load_s=0.9 * scale,
    )


def test_the_coldstart_section_is_the_published_one():
    results = ColdStartResults([trial(s) for s in (1.0, 0.8, 1.3)], 3.0, "ca23eae9ab1f" * 5)
    section = coldstart_report.render(results, MACHINE, COMMAND)
    assert_like_the_published(section, coldstart_report.SECTION)
    first = next(line for line in section.splitlines() if line.startswith("| first request, pool"))
    assert first.split("|")[2:5] == [" 2,500 ", " 2,000 ", " 3,250 "]  # median, min, max

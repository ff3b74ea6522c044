"""``headway bench isolation``: its goals, its victim's batch and its section, from made-up
results."""

import msgspec

from headway_tools.bench import isolation_report
from headway_tools.bench.attacks import ATTACKS, Outcome
from headway_tools.bench.host import Machine
from headway_tools.bench.isolation import (
    BATCH_LINES,
    LINE_TEXTS,
    AttackRun,
    IsolationResults,
    VictimFigures,
    batch_input,
    within_goals,
    worst_of,
)
from headway_tools.loadgen import Summary

MACHINE = Machine("2026-01-01 00:00 UTC", 2, "AMD EPYC", "Linux 6.1", "3.11.7", 0.5)


def summary(p95_ms: float | None, offered: int = 100, goodput: int = 100) -> Summary:
    return Summary(
        "victim", 0.0, 15.0, offered, goodput, goodput, 0, 0, 0, 0, 4 * goodput,
        p95_ms and p95_ms / 2, p95_ms, p95_ms, None, 0.1, 0.2,
    )  # fmt: skip


def figures(p95_ms: float | None = 300.0, goodput: int = 100, batch_s: float | None = 20.0):
    return VictimFigures(summary(p95_ms, goodput=goodput), batch_s)


def test_within_the_goals_nothing_is_missed():
    alone = figures()
    assert within_goals(alone, figures(p95_ms=329.0, goodput=91, batch_s=29.9)) == []


def test_each_goal_missed_is_named_with_both_figures():
    alone = figures()
    assert within_goals(alone, figures(p95_ms=331.0)) == ["p95 331 ms vs 300 ms alone"]
    assert within_goals(alone, figures(goodput=89)) == ["in deadline 89.0% vs 100.0% alone"]
    assert within_goals(alone, figures(batch_s=30.1)) == ["batch 30.1 s vs 20.0 s alone"]
    assert within_goals(alone, figures(batch_s=None)) == ["batch never vs 20.0 s alone"]


def test_an_attack_is_held_against_the_worst_quiet_run():
    quiet = worst_of([figures(p95_ms=300.0), figures(p95_ms=320.0, goodput=95, batch_s=22.0)])
    assert (quiet.p95_ms, quiet.in_deadline, quiet.batch_s) == (320.0, 0.95, 22.0)
    assert within_goals(quiet, figures(p95_ms=350.0, goodput=86)) == []
    assert within_goals(quiet, figures(p95_ms=353.0)) == ["p95 353 ms vs 320 ms alone"]
    assert worst_of([figures(), figures(batch_s=None)]).batch_s is None  # one never finished


def test_the_victims_batch_is_new_texts_that_the_gateway_takes():
    data = batch_input(BATCH_LINES, run=3)
    lines = [msgspec.json.decode(line) for line in data.splitlines()]
    assert len(lines) == BATCH_LINES
    texts = [text for line in lines for text in line["body"]["input"]]
    assert len(texts) == BATCH_LINES * LINE_TEXTS == len(set(texts))
    assert not set(texts) & {
        text
        for line in batch_input(BATCH_LINES, run=4).splitlines()
        for text in msgspec.json.decode(line)["body"]["input"]
    }
    assert {line["url"] for line in lines} == {"/v1/embeddings"}


def test_the_section_shows_each_attack_its_verdict_and_the_goals():
    alone = figures()
    held = AttackRun(("metrics_scrape",), (Outcome("metrics_scrape", True, "404"),), figures())
    hurt = AttackRun(
        ("line_flood",), (Outcome("line_flood", None, "queued"),), figures(batch_s=None)
    )
    broke = AttackRun(("bad_inputs",), (Outcome("bad_inputs", False, "500"),), figures())
    together = AttackRun(
        ("metrics_scrape", "bad_inputs", "line_flood"),
        (Outcome("metrics_scrape", True, "404"), Outcome("bad_inputs", False, "a 500")),
        figures(),
    )
    results = IsolationResults(300.0, 37.5, alone, (held, hurt, broke, together), 120.0)
    section = isolation_report.render(results, MACHINE, "headway bench isolation")
    rows = {line.split(" | ")[0].strip("| "): line for line in section.splitlines()}
    assert "| yes |" in rows["metrics_scrape"] and rows["metrics_scrape"].endswith("met |")
    assert "**missed**: batch never" in rows["line_flood"]
    assert "| **no** |" in rows["bad_inputs"]
    assert "- `metrics_scrape`: 404" in section
    assert "| all at once | **no** |" in section
    assert "- `bad_inputs`, beside every other attack: **a 500**" in section
    assert "metrics_scrape`, beside" not in section  # only what did not hold


def test_every_attack_is_named_as_the_bench_and_the_e2e_test_call_it():
    assert list(ATTACKS) == [
        "nested_line",
        "burst_lines",
        "line_flood",
        "cache_probe",
        "metrics_scrape",
        "anonymous_upload",
        "slow_body",
        "big_headers",
        "key_guessing",
        "bad_inputs",
        "quota_flood",
    ]


def test_the_shared_mode_is_said_in_its_own_section():
    results = IsolationResults(300.0, 37.5, figures(), (), 60.0, shared=True)
    section = isolation_report.render(results, MACHINE, "headway bench isolation --shared")
    assert section.startswith("## Isolation: a victim tenant beside a hostile tenant and an")
    assert ", in the shared mode" in section.splitlines()[0]
    assert "Redis, Postgres and NATS JetStream" in section

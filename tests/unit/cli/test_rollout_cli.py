"""``headway rollouts …`` against the in-memory registry (the SQLite one does not hold
rollouts yet), with the user fixed so the two-person rule can be exercised."""

from dataclasses import replace

import pytest
from typer.testing import CliRunner

from headway.cli.rollout import rollout_app
from tests.fakes import FakeRegistryStore

OLD, NEW = "a" * 64, "b" * 64


@pytest.fixture
def store(monkeypatch):
    fake = FakeRegistryStore()
    fake.add_version(OLD, "minilm")
    fake.add_version(NEW)
    monkeypatch.setattr("headway.registry.open.open_registry", lambda settings: fake)
    monkeypatch.setattr("getpass.getuser", lambda: "ana")
    return fake


@pytest.fixture
def cli(tmp_path):
    (tmp_path / "registry.sqlite3").touch()  # a data dir: the fake registry stands in for it

    def invoke(*args):
        return CliRunner().invoke(rollout_app, [*args, "--data-dir", str(tmp_path)])

    return invoke


def test_start_builds_the_plan_from_the_flags(store, cli):
    result = cli(
        "start", "minilm", "--to", NEW, "--steps", "shadow,10,100", "--interval", "2m",
        "--max-error-rate", "0.02", "--min-requests", "50", "--shadow-share", "0.5",
        "--approval",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    (rollout,) = store.rollouts()
    assert rollout.plan.steps == (0, 10, 100)
    assert rollout.plan.interval_s == 120.0
    assert (rollout.plan.max_error_rate, rollout.plan.min_requests) == (0.02, 50)
    assert (rollout.plan.shadow_share, rollout.plan.approval) == (0.5, True)
    assert rollout.plan.max_latency_ratio == 1.5  # not given: the default
    assert rollout.started_by == "cli:ana"
    assert f"1   minilm  {OLD[:12]}  {NEW[:12]}  running  shadow" in result.output


def test_show_lists_every_rollout_as_a_table(store, cli):
    cli("start", "minilm", "--to", NEW, "--interval", "90")
    assert store.rollouts()[0].plan.interval_s == 90.0
    cli("pause", "1")
    lines = cli("show").output.splitlines()
    assert lines[0].split() == ["ID", "ALIAS", "PRIMARY", "CANDIDATE", "STATE", "STEP", "REASON"]
    assert lines[1].split() == [
        *("1", "minilm", OLD[:12], NEW[:12], "paused", "shadow"),
        *("paused", "by", "cli:ana"),
    ]
    assert cli("show", "other").output.strip() == "no rollouts"


def test_pause_resume_abort_by_id(store, cli):
    cli("start", "minilm", "--to", NEW)
    assert "paused" in cli("pause", "1").output
    assert "running" in cli("resume", "1").output
    result = cli("abort", "1")
    assert result.exit_code == 0
    assert "aborted by cli:ana" in result.output
    assert store.splits() == []


def test_approve_refuses_the_starter_and_exits_1(store, cli, monkeypatch):
    cli("start", "minilm", "--to", NEW, "--steps", "50,100", "--approval")
    store.by_id[1] = replace(store.by_id[1], state="awaiting_approval")
    result = cli("approve", "1")
    assert (result.exit_code, result.output.strip()) == (
        1,
        "rollout 1 was started by cli:ana; someone else must approve it",
    )
    monkeypatch.setattr("getpass.getuser", lambda: "bea")
    result = cli("approve", "1")
    assert result.exit_code == 0, result.output
    assert store.rollout(1).step == 1


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["pause", "7"], 1, "no rollout 7"),
        (["start", "nope", "--to", NEW], 1, "no alias 'nope'"),
        (["start", "minilm", "--to", NEW, "--steps", "shadow,5,200"], 2, "'200' is not a step"),
        (["start", "minilm", "--to", NEW, "--interval", "soon"], 2, "'soon' is not a duration"),
        (["start", "minilm", "--to", NEW, "--interval", "0s"], 2, "'0s' is not a duration"),
        (["start", "minilm", "--to", NEW, "--max-error-rate", "1.5"], 2, "--max-error-rate"),
        (["start", "minilm", "--to", NEW, "--max-error-rate", "nan"], 2, "nan is not in [0, 1]"),
        (["start", "minilm", "--to", NEW, "--shadow-share", "0"], 2, "0 is not in (0, 1]"),
        (["start", "minilm", "--to", NEW, "--max-latency-ratio", "inf"], 2, "inf is not in (0"),
        (["start", "minilm", "--to", NEW, "--min-agreement", "-1.01"], 2, "--min-agreement"),
        (["start", "minilm", "--to", NEW, "--min-requests", "0"], 2, "--min-requests"),
        (["start", "minilm"], 2, "--to"),
    ],
)
def test_refusals_exit_1_and_bad_flags_exit_2(store, cli, args, code, message):
    result = cli(*args)
    assert result.exit_code == code, result.output
    assert message in result.output
    assert store.rollouts() == []

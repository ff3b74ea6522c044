"""A ``HEADWAY_*`` variable that names no setting is an error naming the nearest one."""

from __future__ import annotations

import pytest

from headway.settings import SettingsError, load_settings


def problems(monkeypatch: pytest.MonkeyPatch, **environ: str) -> tuple[str, ...]:
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as refused:
        load_settings()
    return refused.value.problems


def test_a_misspelt_variable_is_refused_with_the_nearest_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert problems(monkeypatch, HEADWAY_LOGLEVEL="debug") == (
        "HEADWAY_LOGLEVEL: no such setting; did you mean HEADWAY_LOG_LEVEL?",
    )


def test_a_section_joined_by_one_underscore_is_told_to_use_two(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert problems(monkeypatch, HEADWAY_GATEWAY_CHUNK_TEXTS="8") == (
        "HEADWAY_GATEWAY_CHUNK_TEXTS: no such setting; did you mean "
        "HEADWAY_GATEWAY__CHUNK_TEXTS? (sections are joined by __)",
    )


def test_a_variable_like_no_setting_says_every_headway_variable_is_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (problem,) = problems(monkeypatch, HEADWAY_SOMETHING_ELSE_ENTIRELY="1")
    assert problem.startswith("HEADWAY_SOMETHING_ELSE_ENTIRELY: no such setting (every HEADWAY_*")


def test_every_problem_is_reported_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    found = problems(
        monkeypatch,
        HEADWAY_LOGLEVEL="debug",
        HEADWAY_UP__EMBED_REPLICAS="0",
        HEADWAY_WORKER__BACKEND="tensorflow",
    )
    assert len(found) == 3


def test_lists_come_as_json_and_bad_json_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEADWAY_WORKER__MODELS", '["a", "b"]')
    assert load_settings().worker.models == ("a", "b")
    (problem,) = problems(monkeypatch, HEADWAY_WORKER__MODELS="a,b")
    assert problem.startswith(
        "HEADWAY_WORKER__MODELS: worker.models: a list or table is given as JSON"
    )


def test_a_whole_section_may_come_as_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEADWAY_UP", '{"gateways": 2}')
    assert load_settings().up.gateways == 2

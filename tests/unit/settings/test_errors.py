"""Each problem is one line naming its source, the setting, what is wrong; never
pydantic's dump. A config file's format comes from its suffix."""

from __future__ import annotations

from pathlib import Path

import pytest

from headway.settings import SettingsError, load_settings


def refused(**kwargs: object) -> tuple[str, ...]:
    with pytest.raises(SettingsError) as error:
        load_settings(**kwargs)  # type: ignore[arg-type]
    text = str(error.value)
    assert "errors.pydantic.dev" not in text and "validation error" not in text
    assert "[type=" not in text
    return error.value.problems


def test_a_flag_is_named_as_typed() -> None:
    assert refused(
        flags={"up": {"embed_replicas": 0}},
        flag_names={("up", "embed_replicas"): "--embed-replicas"},
    ) == ("--embed-replicas: up.embed_replicas: should be greater than or equal to 1, got 0",)


def test_a_flag_without_a_name_is_its_dotted_path() -> None:
    assert refused(flags={"up": {"embed_replicas": 0}}) == (
        "up.embed_replicas: should be greater than or equal to 1, got 0",
    )


def test_a_variable_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEADWAY_LOG_LEVEL", "verbose")
    assert refused() == (
        "HEADWAY_LOG_LEVEL: log_level: should be 'debug', 'info', 'warning' or 'error', "
        "got 'verbose'",
    )


def test_a_file_is_named_with_the_line(tmp_path: Path) -> None:
    config = tmp_path / "headway.toml"
    config.write_text('log_level = "info"\n\n[up]\ngateways = 2\nembed_replicas = 0\n')
    assert refused(config_file=config) == (
        f"{config}:5: up.embed_replicas: should be greater than or equal to 1, got 0",
    )


def test_an_unknown_key_in_a_file_suggests_the_nearest(tmp_path: Path) -> None:
    config = tmp_path / "headway.toml"
    config.write_text("[gateway]\nport = 9000\nchunk_textz = 8\n")
    assert refused(config_file=config) == (
        f"{config}:3: gateway.chunk_textz: no such setting; did you mean gateway.chunk_texts?",
    )


def test_a_check_of_a_section_names_the_setting_it_is_about(tmp_path: Path) -> None:
    missing = tmp_path / "gone.key"
    (tmp_path / "public.crt").touch()
    flags = {"tls": {"public_cert": str(tmp_path / "public.crt"), "public_key": str(missing)}}
    names = {("tls", "public_key"): "--public-key"}
    assert refused(flags=flags, flag_names=names) == (
        f"--public-key: tls.public_key: {missing} is not a file",
    )


def test_a_check_across_sources_names_each(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEADWAY_REDIS__CACHE_URL", "redis://cache:6379/0")
    assert refused() == (
        "HEADWAY_REDIS__CACHE_URL: redis.cache_url needs redis_url (the quota instance) too",
    )


def test_a_secret_is_never_echoed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEADWAY_REDIS__QUOTA__PASSWORD", "s3cret")
    monkeypatch.setenv("HEADWAY_REDIS_URL", "http://q:6379")
    (problem,) = refused()
    assert "s3cret" not in problem


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("headway.toml", 'log_level = "info"\n[up]\nembed_replicas = 3\n'),
        ("headway.json", '{"up": {"embed_replicas": 3}}'),
        ("headway.yaml", "up:\n  embed_replicas: 3\n"),
        ("headway.yml", "up:\n  embed_replicas: 3\n"),
    ],
)
def test_the_format_is_the_suffix(tmp_path: Path, name: str, text: str) -> None:
    config = tmp_path / name
    config.write_text(text)
    assert load_settings(config_file=config).up.embed_replicas == 3


@pytest.mark.parametrize(
    ("name", "text", "line"),
    [
        ("headway.json", '{"up": {\n  "embed_replicas": 0}}', 2),
        ("headway.yaml", "up:\n  embed_replicas: 0\n", 2),
    ],
)
def test_json_and_yaml_errors_name_the_line(
    tmp_path: Path, name: str, text: str, line: int
) -> None:
    config = tmp_path / name
    config.write_text(text)
    (problem,) = refused(config_file=config)
    assert problem.startswith(f"{config}:{line}: up.embed_replicas: should be greater")


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("headway.toml", "[up\n", ":1: not valid TOML: "),
        ("headway.json", '{\n  "up": ,\n}', ":2: not valid JSON: Expecting value"),
        ("headway.yaml", "up:\n  - a\n  b: c\n", ":3: not valid YAML: "),
    ],
)
def test_a_syntax_error_names_the_file_and_line(
    tmp_path: Path, name: str, text: str, expected: str
) -> None:
    config = tmp_path / name
    config.write_text(text)
    (problem,) = refused(config_file=config)
    assert problem.startswith(f"{config}{expected}")


def test_another_suffix_is_refused_naming_those_accepted(tmp_path: Path) -> None:
    config = tmp_path / "headway.ini"
    config.write_text("[up]\n")
    assert refused(config_file=config) == (
        f"{config}: a config file's name ends in .toml, .json, .yaml, .yml",
    )


def test_a_file_whose_top_level_is_not_a_table_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "headway.yaml"
    config.write_text("- a\n- b\n")
    assert refused(config_file=config) == (f"{config}: the top level must be a table of settings",)

"""``headway config show`` and ``headway config check``, through the real command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from headway.cli import app


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["config", *args])
    return result.exit_code, result.output


def test_show_names_the_source_of_every_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "headway.toml"
    config.write_text("[gateway]\nport = 7000\n")
    monkeypatch.setenv("HEADWAY_WORKER__MAX_BATCH_SIZE", "8")
    code, output = run("show", "--config", str(config), "--data-dir", str(tmp_path))
    assert code == 0, output
    lines = output.splitlines()
    assert f"gateway.port = 7000  (file {config}:2)" in lines
    assert "worker.max_batch_size = 8  (env HEADWAY_WORKER__MAX_BATCH_SIZE)" in lines
    assert f'data_dir = "{tmp_path}"  (flag --data-dir)' in lines
    assert "gateway.chunk_texts = 16  (default)" in lines


def test_show_masks_secrets_and_passwords_in_urls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEADWAY_REDIS_URL", "redis://:hunter2@quota:6379/0")
    monkeypatch.setenv("HEADWAY_POSTGRES_URL", "postgresql://gw:hunter3@db:5432/headway")
    monkeypatch.setenv("HEADWAY_BILLING__EXPORT_API_KEY", "sk_live_hunter4")
    monkeypatch.setenv("HEADWAY_WEIGHTS__TOKEN", "hunter5")
    code, output = run("show")
    assert code == 0, output
    assert "hunter" not in output
    assert 'redis_url = "redis://:***@quota:6379/0"  (env HEADWAY_REDIS_URL)' in output
    assert 'postgres_url = "postgresql://gw:***@db:5432/headway"' in output
    assert 'billing.export_api_key = "***"  (env HEADWAY_BILLING__EXPORT_API_KEY)' in output
    assert 'batches.executor_token = ""  (default)' in output  # unset stays visible


def test_show_json_parses_and_defaults_ignore_every_source(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEADWAY_GATEWAY__PORT", "9000")
    code, output = run("show", "--json")
    assert code == 0, output
    shown = json.loads(output)
    assert shown["gateway.port"] == {"value": 9000, "source": "env HEADWAY_GATEWAY__PORT"}
    code, output = run("show", "--defaults", "--json")
    defaults = json.loads(output)
    assert defaults["gateway.port"] == {"value": 8080, "source": "default"}
    assert {entry["source"] for entry in defaults.values()} == {"default"}
    assert set(defaults) == set(shown)


def test_show_refuses_invalid_settings_naming_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEADWAY_LOGLEVEL", "debug")
    code, output = run("show")
    assert code == 2
    assert output == ("error: HEADWAY_LOGLEVEL: no such setting; did you mean HEADWAY_LOG_LEVEL?\n")


def test_check_counts_what_the_file_sets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "headway.yaml"
    config.write_text("gateway:\n  port: 7000\n  chunk_texts: 8\nlog_level: debug\n")
    monkeypatch.setenv("HEADWAY_LOGLEVEL", "x")  # the environment is ignored
    assert run("check", str(config)) == (0, f"{config}: ok (3 settings set)\n")


def test_check_prints_one_line_a_problem_in_the_settings_order(tmp_path: Path) -> None:
    config = tmp_path / "headway.toml"
    config.write_text("[up]\nembed_replicas = 0\n[gateway]\nprot = 1\n")
    code, output = run("check", str(config))
    assert code == 2
    assert output.splitlines() == [
        f"{config}:4: gateway.prot: no such setting; did you mean gateway.port?",
        f"{config}:2: up.embed_replicas: should be greater than or equal to 1, got 0",
    ]


def test_a_command_names_the_flag_as_typed(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["up", "--embed-replicas", "0", "--data-dir", str(tmp_path)])
    assert result.exit_code == 2
    assert result.output == (
        "error: --embed-replicas: up.embed_replicas: should be greater than or equal to 1, got 0\n"
    )

"""docs/settings.md is generated from the settings' declarations and kept current;
deploy/headway.toml, the shared-mode example, validates."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from headway.cli import app
from headway.settings import Settings, load_settings
from headway.settings_reference import REGENERATE, reference
from headway.settings_sources import leaves

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "deploy" / "headway.toml"


def test_the_settings_reference_is_current() -> None:
    written = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    assert written == reference(), f"docs/settings.md is stale: run `{REGENERATE}`"


def test_every_setting_is_in_the_reference_with_its_variable_and_a_description() -> None:
    text = reference()
    for path, field in leaves(Settings):
        name = ".".join(path)
        assert field.description, f"{name} has no description"
        assert f"| `{name}` |" in text
        assert f"`HEADWAY_{'__'.join(path).upper()}`" in text


def test_the_example_config_is_valid(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("HEADWAY_"):
            monkeypatch.delenv(name)
    settings = load_settings(config_file=EXAMPLE)
    assert settings.redis_url and settings.nats_url and settings.postgres_url
    assert settings.redis.cache_url
    result = CliRunner().invoke(app, ["config", "check", str(EXAMPLE)])
    assert result.exit_code == 0 and result.output.startswith(f"{EXAMPLE}: ok (")

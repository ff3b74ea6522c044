"""``--update-streams`` turns ``streams.update`` on; without it the setting is the
environment's or the default (off), never forced off by the flag's absence."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import headway.billing.service
import headway.serve
from headway.billing.service import BillingService
from headway.cli import app
from headway.cli.options import settings_from
from headway.settings import Settings


def test_the_flag_turns_the_setting_on_and_its_absence_leaves_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert settings_from(None, data_dir=tmp_path, update_streams=True).streams.update
    assert not settings_from(None, data_dir=tmp_path, update_streams=False).streams.update
    monkeypatch.setenv("HEADWAY_STREAMS__UPDATE", "true")
    assert settings_from(None, data_dir=tmp_path, update_streams=False).streams.update


@pytest.mark.parametrize("given", [True, False])
def test_billing_run_takes_the_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: bool
) -> None:
    started: list[Settings] = []

    class Recorded(BillingService):
        def __init__(self, settings: Settings) -> None:
            started.append(settings)
            super().__init__(settings)

    monkeypatch.setattr(headway.billing.service, "BillingService", Recorded)
    monkeypatch.setattr(headway.serve, "serve", lambda *args, **kwargs: None)
    monkeypatch.delenv("HEADWAY_STREAMS__UPDATE", raising=False)
    args = ["run", "billing", "--data-dir", str(tmp_path), "--port", "0"]
    result = CliRunner().invoke(app, args + (["--update-streams"] if given else []))
    assert result.exit_code == 0, result.output
    (settings,) = started
    assert settings.streams.update is given

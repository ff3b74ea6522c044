"""``headway models import DIR``: a folder in, a registered version and its alias out, and
a warning that says how to price the alias."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from headway.cli import app
from tests.builders import build_tiny_sentence_transformer
from tests.models.conftest import EVAL_TEXTS


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory, offline: None) -> Path:
    directory = tmp_path_factory.mktemp("bring") / "my-mpnet"
    build_tiny_sentence_transformer(
        directory, "mpnet", prompts={"query": "query: "}, corpus=EVAL_TEXTS
    )
    return directory


def test_a_folder_is_imported_aliased_by_its_name_and_the_missing_price_is_named(
    folder: Path, tmp_path: Path
) -> None:
    data_dir = ["--data-dir", str(tmp_path / "data")]
    first = CliRunner().invoke(app, ["models", "import", str(folder), *data_dir])
    assert first.exit_code == 0, first.output
    version, name, *rest = first.stdout.split()
    assert (name, rest) == ("my-mpnet", ["aliases:", "my-mpnet"])
    assert "alias 'my-mpnet' has no price in headway/billing/default_prices.toml" in first.stderr
    assert 'alias = "my-mpnet"' in first.stderr and "billing.price_book" in first.stderr

    again = CliRunner().invoke(app, ["models", "import", str(folder), *data_dir])
    assert again.exit_code == 0 and again.stdout.split()[0] == version  # same bytes, same version
    listed = CliRunner().invoke(app, ["models", "list", *data_dir])
    assert f"{version}  my-mpnet  embedding" in listed.stdout


def test_a_priced_alias_gets_no_warning(folder: Path, tmp_path: Path) -> None:
    book = tmp_path / "prices.toml"
    book.write_text(
        'currency = "USD"\n[[price]]\nalias = "mine"\nunit = "texts"\nper = 1000\n'
        'amount = "0.10"\neffective_from = 2020-01-01\n'
    )
    env = {"HEADWAY_BILLING__PRICE_BOOK": str(book)}
    command = ["models", "import", str(folder), "--alias", "mine", "--data-dir", str(tmp_path)]
    result = CliRunner().invoke(app, command, env=env)
    assert result.exit_code == 0, result.output
    assert "warning" not in result.stderr


def test_what_is_not_a_model_is_refused_with_a_reason(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    result = CliRunner().invoke(
        app, ["models", "import", str(tmp_path / "empty"), "--data-dir", str(tmp_path)]
    )
    assert result.exit_code == 1
    assert "is not a model folder: it has no config.json" in result.stderr


def test_an_int8_variant_is_measured_and_a_rollout_below_its_gate_is_refused(
    tmp_path: Path,
) -> None:
    runner = CliRunner()
    data_dir = ["--data-dir", str(tmp_path / "data")]
    imported = runner.invoke(app, ["models", "import", "--int8", *data_dir])
    assert imported.exit_code == 0, imported.output
    listed = runner.invoke(app, ["models", "list", *data_dir]).stdout
    (variant,) = [line for line in listed.splitlines() if "int8" in line.split()[1]]
    assert "agrees with ca23eae9ab1f: mean cosine 0.99" in variant
    gate = ["models", "gate", "minilm", "--min-mean-cosine", "0.999", *data_dir]
    assert runner.invoke(app, gate).exit_code == 0
    assert (
        "gate: variants need mean cosine >= 0.999"
        in runner.invoke(app, ["models", "list", *data_dir]).stdout
    )
    refused = runner.invoke(app, ["rollouts", "start", "minilm", "--to", "minilm-int8", *data_dir])
    assert refused.exit_code != 0
    assert "less than the source's gate asks: mean cosine 0.99" in refused.output
    lowered = ["models", "gate", "minilm", "--min-mean-cosine", "0.98", *data_dir]
    assert runner.invoke(app, lowered).exit_code == 0
    started = runner.invoke(app, ["rollouts", "start", "minilm", "--to", "minilm-int8", *data_dir])
    assert started.exit_code == 0, started.output
    bad = runner.invoke(app, ["models", "gate", "minilm", "--min-mean-cosine", "2", *data_dir])
    assert bad.exit_code == 2 and "from 0 to 1" in bad.stderr

"""The command line explains itself (issue 29): the naming scheme and its hidden old names,
help panels, -h, --version, --json, confirmations, one-line errors, the data dir it reads."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from headway.cli import app
from headway.cli.datadir import require_data_dir
from headway.cli.failures import CliError, explain
from headway.cli.options import settings_from
from headway.registry.model import SYSTEM, ModelRecord
from headway.registry.sqlite import Registry
from tests.weights_builders import stored_artifact

V1, V2 = "a" * 64, "b" * 64


def run(*args: str, **kwargs: Any):
    return CliRunner().invoke(app, list(args), **kwargs)


@pytest.fixture
def data_dir(tmp_path, monkeypatch) -> Path:
    """A data dir with tenant acme and two versions of model m (alias m on V1)."""
    monkeypatch.setattr("getpass.getuser", lambda: "ana")
    monkeypatch.delenv("HEADWAY_DATA_DIR", raising=False)
    folder = tmp_path / "data"
    assert run("tenants", "add", "acme", "--data-dir", str(folder)).exit_code == 0
    registry = Registry(settings_from(None, data_dir=folder).registry_path)
    for version, aliases in ((V1, ("m",)), (V2, ("m-next",))):
        registry.add_model(ModelRecord(version, "m", "embedding", 8, "fp32"), aliases, actor=SYSTEM)
    return folder


def at(data_dir: Path, *args: str, **kwargs: Any):
    return run(*args, "--data-dir", str(data_dir), **kwargs)


def one_error_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    return lines[0]


def every_command(
    command: Any = None, path: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], Any]]:
    command = command or typer.main.get_command(app)
    found = [(path, command)]
    for name, sub in getattr(command, "commands", {}).items():
        found += every_command(sub, (*path, name))
    return found


# --- names, panels, help -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "notice"),
    [
        (["tenants", "keys", "acme"], ["keys", "list", "acme"], "`headway keys list`"),
        (["tenants", "admin-keys"], ["keys", "list", "--admin"], "`headway keys list --admin`"),
        (["rollout", "status"], ["rollouts", "show"], "`headway rollouts show`"),
        (["rollout", "list"], ["rollouts", "list"], "`headway rollouts list`"),
    ],
)
def test_an_old_name_still_works_and_says_its_new_one(data_dir, old, new, notice):
    before, after = at(data_dir, *old), at(data_dir, *new)
    assert before.exit_code == after.exit_code == 0, before.output
    assert before.stdout == after.stdout
    (line,) = before.stderr.strip().splitlines()
    assert f"`headway {' '.join(old[:2])}` is now {notice}; the old name goes" in line
    assert after.stderr == ""


def test_the_old_process_names_are_hidden_aliases_of_run():
    root = typer.main.get_command(app)
    run_group = root.commands["run"]
    assert set(run_group.commands) == {"gateway", "worker", "billing", "batches"}
    for old in ("gateway", "worker"):
        assert root.commands[old].hidden
    assert root.commands["billing"].commands["run"].hidden
    assert root.commands["batches"].commands["run"].hidden
    assert root.commands["rollout"].hidden


def test_help_lists_the_commands_in_their_panels_and_not_the_old_names():
    shown = run("--help").output
    for panel in ("Run", "Manage", "Observe", "Security", "Measure"):
        assert f"─ {panel} " in shown, panel
    rows = [line.strip("│ ").split(" ")[0] for line in shown.splitlines()]
    assert {"up", "run", "tenants", "models", "rollouts", "keys", "certs"} <= set(rows)
    assert not {"gateway", "worker", "rollout"} & set(rows)


def test_version_and_dash_h():
    assert run("--version").output.startswith("headway ")
    assert run("-h").exit_code == 0 and "Usage:" in run("-h").output


def test_every_command_answers_dash_h_without_markup_artefacts():
    commands = every_command()
    assert len(commands) > 60
    for path, _ in commands:
        shown = run(*path, "-h")
        assert shown.exit_code == 0, (path, shown.output)
        assert "``" not in shown.output, path


@pytest.mark.parametrize(
    "path",
    [
        ("up",),
        ("run", "gateway"),
        ("tenants", "add"),
        ("keys", "rotate"),
        ("models", "import"),
        ("models", "split"),
        ("rollouts", "start"),
        ("billing", "invoice"),
    ],
)
def test_the_main_commands_show_examples(path):
    shown = run(*path, "--help").output
    assert "Examples:" in shown and f"headway {' '.join(path)} " in shown


# --- --json ------------------------------------------------------------------------------


def test_every_list_and_show_prints_one_json_document(data_dir):
    documents = {
        args: json.loads(at(data_dir, *args, "--json").stdout)
        for args in [
            ("tenants", "list"),
            ("tenants", "show", "acme"),
            ("keys", "list", "acme"),
            ("keys", "list", "--admin"),
            ("models", "list"),
            ("models", "show", "m"),
            ("rollouts", "list"),
            ("rollouts", "show"),
            ("batches", "list"),
            ("batches", "list", "acme"),
        ]
    }
    (acme,) = documents["tenants", "list"]["data"]
    assert acme["name"] == "acme" and acme["tier"] == "interactive" and acme["max_files"] is None
    assert documents["tenants", "show", "acme"]["keys"][0]["role"] == "tenant"
    assert len(documents["keys", "list", "acme"]["data"]) == 1
    versions = {m["version"]: m["aliases"] for m in documents["models", "list"]["data"]}
    assert versions == {V1: ["m"], V2: ["m-next"]}
    assert documents["models", "show", "m"]["splits"] == {}
    assert documents["rollouts", "list"] == documents["batches", "list"] == {"data": []}
    customers = at(data_dir, "billing", "customers", "--json")
    assert json.loads(customers.stdout)["data"] == [
        {"id": acme["id"], "name": "acme", "billing_customer": None}
    ]


# --- confirmations -------------------------------------------------------------------------


def test_a_destructive_command_off_a_terminal_needs_yes(data_dir):
    refused = at(data_dir, "tenants", "delete", "acme")
    assert refused.exit_code == 2
    assert "pass --yes" in one_error_line(refused)
    assert "acme" in at(data_dir, "tenants", "list").stdout
    assert at(data_dir, "tenants", "delete", "acme", "--yes").exit_code == 0
    assert at(data_dir, "tenants", "list").stdout == ""


@pytest.mark.parametrize(("answer", "code", "kept"), [("n\n", 1, True), ("y\n", 0, False)])
def test_on_a_terminal_it_asks(data_dir, monkeypatch, answer, code, kept):
    monkeypatch.setattr("headway.cli.output.on_terminal", lambda: True)
    asked = at(data_dir, "tenants", "delete", "acme", input=answer)
    assert asked.exit_code == code, asked.output
    assert "Delete tenant acme and its files and batches? [y/N]" in asked.output
    assert ("acme" in at(data_dir, "tenants", "list").stdout) == kept


# --- names and the data dir ----------------------------------------------------------------


@pytest.mark.parametrize("name", ["", "a/b", "Bad Name!", "x" * 65, ".lead"])
def test_a_tenant_name_breaking_the_rule_is_refused_stating_it(tmp_path, name):
    folder = tmp_path / "new"
    refused = at(folder, "tenants", "add", name)
    assert refused.exit_code == 2
    assert "letters, digits, '.', '_' and '-'" in one_error_line(refused)
    assert not folder.exists()


def test_the_admin_api_and_the_cli_share_the_rule():
    from headway.control.admin import tenants
    from headway.registry.model import TENANT_NAME_PATTERN

    assert tenants.TenantName.__metadata__[0].pattern == TENANT_NAME_PATTERN


def test_a_command_in_the_wrong_folder_says_where_it_looked_and_creates_nothing(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HEADWAY_DATA_DIR", raising=False)
    for args in (["tenants", "list"], ["models", "list"], ["keys", "list", "--admin"]):
        refused = run(*args)
        assert refused.exit_code == 1
        line = one_error_line(refused)
        assert f"no headway data dir at {tmp_path / '.headway'}" in line
        assert "because of the default ./.headway" in line and "headway up" in line
    assert not (tmp_path / ".headway").exists()
    elsewhere = run("tenants", "list", env={"HEADWAY_DATA_DIR": str(tmp_path / "x")})
    assert "because of HEADWAY_DATA_DIR" in one_error_line(elsewhere)
    assert "because of --data-dir" in one_error_line(run("tenants", "list", "--data-dir", "y"))
    assert list(tmp_path.iterdir()) == []


def test_shared_mode_needs_no_local_data_dir(tmp_path):
    settings = settings_from(None, data_dir=tmp_path / "absent", postgres_url="postgresql://h/db")
    require_data_dir(settings, None, None)  # no refusal: the registry is on Postgres
    with pytest.raises(CliError, match="no headway data dir"):
        require_data_dir(settings_from(None, data_dir=tmp_path / "absent"), None, None)


def test_a_data_dir_that_is_a_file_is_one_line(tmp_path):
    file = tmp_path / "file"
    file.write_text("x")
    listed = at(file, "tenants", "list")
    assert listed.exit_code == 1 and "is a file, not a folder" in one_error_line(listed)
    added = at(file / "below", "tenants", "add", "acme")  # a command that creates one
    assert added.exit_code == 1
    assert "a file stands where headway needs a folder" in one_error_line(added)


def test_a_corrupt_registry_is_one_line_and_debug_shows_the_traceback(data_dir):
    (data_dir / "registry.sqlite3").write_bytes(b"not a database, just bytes" * 10)
    listed = at(data_dir, "tenants", "list")
    assert listed.exit_code == 1
    assert "registry.sqlite3 is not a SQLite database" in one_error_line(listed)
    debugged = run("--debug", "tenants", "list", "--data-dir", str(data_dir))
    assert isinstance(debugged.exception, CliError)  # raised, so a traceback is printed


def test_any_other_failure_is_one_line(data_dir, monkeypatch):
    def broken(settings):
        raise sqlite3.DatabaseError("database disk image is malformed")

    monkeypatch.setattr("headway.registry.open.open_registry", broken)
    failed = at(data_dir, "tenants", "list")
    assert failed.exit_code == 1
    line = one_error_line(failed)
    assert "cannot be read (database disk image is malformed); move the damaged file" in line


def test_the_table_names_each_os_failure_and_its_fix():
    denied = explain(PermissionError(13, "Permission denied", "/srv/headway"))
    assert denied == (
        "cannot write /srv/headway: Permission denied; give this user access to it or pass"
        " --data-dir"
    )
    assert "move it away" in explain(IsADirectoryError(21, "Is a directory", "/x"))
    assert "--debug" in explain(RuntimeError("boom\nsecond line"))
    assert "\n" not in explain(RuntimeError("boom\nsecond line"))


# --- models ----------------------------------------------------------------------------


def test_alias_split_and_pin_round_trip(data_dir):
    assert at(data_dir, "models", "alias", "m2", "m-next").stdout.strip() == f"m2 -> {V2}"
    split = at(data_dir, "models", "split", "m", "m=9", f"{V2}=1")
    assert split.exit_code == 0, split.output
    pinned = at(data_dir, "models", "pin", "m", "acme", "m2")
    assert pinned.exit_code == 0, pinned.output
    shown = json.loads(at(data_dir, "models", "show", "m", "--json").stdout)["splits"]["m"]
    assert shown == {
        "weights": {V1: 9.0, V2: 1.0},
        "sticky": "tenant",
        "pins": {"acme": V2},
        "shadow": None,
    }
    resplit = at(data_dir, "models", "split", "m", "m=1", "--sticky", "user", "--shadow", "m2:0.5")
    assert resplit.exit_code == 0, resplit.output  # the pins are kept
    shown = json.loads(at(data_dir, "models", "show", "m", "--json").stdout)["splits"]["m"]
    assert shown["pins"] == {"acme": V2} and shown["sticky"] == "user"
    assert shown["shadow"] == {"version": V2, "share": 0.5}
    assert at(data_dir, "models", "pin", "m", "acme", "--remove").exit_code == 0
    assert at(data_dir, "models", "split", "m", "--delete").exit_code == 2  # no --yes
    assert at(data_dir, "models", "split", "m", "--delete", "--yes").exit_code == 0
    assert at(data_dir, "models", "alias", "m2", "--delete", "--yes").exit_code == 0
    listed = json.loads(at(data_dir, "models", "list", "--json").stdout)["data"]
    assert {m["version"]: m["aliases"] for m in listed} == {V1: ["m"], V2: ["m-next"]}


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["split", "m", "nope=1"], "no alias or version 'nope'"),
        (["split", "m", "m=0"], "is not VERSION=WEIGHT"),
        (["split", "m", "m=1", "--shadow", "m:2"], "is not VERSION:SHARE"),
        (["pin", "m", "nobody", "m"], "no tenant"),
        (["alias", "m2", "nope"], "no alias or version 'nope'"),
    ],
)
def test_a_bad_split_or_pin_is_refused_in_one_line(data_dir, args, says):
    refused = at(data_dir, "models", *args)
    assert refused.exit_code in (1, 2)
    assert says in refused.output


def test_while_a_rollout_owns_the_alias_its_split_and_alias_are_refused(data_dir):
    started = at(data_dir, "rollouts", "start", "m", "--to", "m-next")
    assert started.exit_code == 0, started.output
    for args in (["split", "m", "m=1"], ["alias", "m", "m-next"], ["pin", "m", "acme", "m"]):
        refused = at(data_dir, "models", *args)
        assert refused.exit_code == 1 and "owns the split of 'm'" in refused.output, args


def test_tokenizer_without_a_graph_is_refused_and_imports_nothing(tmp_path):
    tokenizer = tmp_path / "tokenizer.json"
    tokenizer.write_text("{}")
    refused = at(tmp_path / "new", "models", "import", "--tokenizer", str(tokenizer))
    assert refused.exit_code == 2
    assert "--tokenizer goes with a graph" in one_error_line(refused)
    assert not (tmp_path / "new").exists()


def test_fetch_of_a_stored_version_verifies_it_without_a_source(tmp_path):
    from headway.models.store import ModelStore

    model = stored_artifact(ModelStore(tmp_path / "models"), graph=b"graph")
    fetched = at(tmp_path, "models", "fetch", model.version)
    assert fetched.exit_code == 0, fetched.output
    assert fetched.stdout.split() == [model.version, str(model.path)]


def test_gateway_urls_must_be_urls(tmp_path):
    refused = at(tmp_path, "run", "gateway", "--embed-urls", "3")
    assert refused.exit_code == 2
    assert one_error_line(refused).startswith("error: --embed-urls takes worker URLs: '3'")
    old = at(tmp_path, "run", "gateway", "--rerank-replicas", "worker-1:9100")
    assert old.exit_code == 2 and "--rerank-urls takes worker URLs" in old.stderr
    assert "`headway run gateway --rerank-replicas` is now" in old.stderr


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["tenants", "list", "--bogus"],
            "error: No such option: --bogus; see `headway tenants list -h`",
        ),
        (["tenants", "add"], "error: Missing argument 'name'; see `headway tenants add -h`"),
        (
            ["tenantz"],
            "error: No such command 'tenantz'. Did you mean 'tenants'?; see `headway -h`",
        ),
    ],
)
def test_a_usage_error_is_one_line_that_points_at_the_help(args: list[str], line: str) -> None:
    result = CliRunner().invoke(app, args, prog_name="headway")
    assert (result.exit_code, result.output) == (2, line + "\n")

"""``headway tenants …`` against a SQLite registry in a temporary directory."""

import pytest
from typer.testing import CliRunner

from headway.cli import app
from headway.cli.options import settings_from
from headway.registry.keys import key_digest
from headway.registry.model import AuditQuery, key_id_of
from headway.registry.sqlite import Registry


@pytest.fixture
def cli(tmp_path, monkeypatch):
    monkeypatch.setattr("getpass.getuser", lambda: "ana")

    def invoke(*args: str):
        return CliRunner().invoke(app, ["tenants", *args, "--data-dir", str(tmp_path)])

    return invoke


@pytest.fixture
def keys_cli(tmp_path, monkeypatch):
    monkeypatch.setattr("getpass.getuser", lambda: "ana")

    def invoke(*args: str):
        return CliRunner().invoke(app, ["keys", *args, "--data-dir", str(tmp_path)])

    return invoke


@pytest.fixture
def registry(tmp_path):
    """The registry ``--data-dir tmp_path`` names, as the CLI opens it."""
    return Registry(settings_from(None, data_dir=tmp_path).registry_path)


def last_line(output: str) -> str:
    return output.strip().splitlines()[-1]


def test_a_tenant_is_added_its_key_rotated_and_revoked_and_it_is_deleted(cli, keys_cli, registry):
    added = cli("add", "acme", "--tier", "batch", "--rate", "5")
    assert added.exit_code == 0, added.output
    first = last_line(added.output)
    listed = keys_cli("list", "acme")
    assert listed.output.split()[0] == key_id_of(key_digest(first))
    assert "live" in listed.output and first not in listed.output

    rotated = keys_cli("rotate", "acme", "--overlap", "0")
    assert rotated.exit_code == 0, rotated.output
    second = last_line(rotated.output)
    keys = {key.key_id: key for key in registry.keys("acme")}
    assert keys[key_id_of(key_digest(first))].revoked_at is not None  # no overlap: at once
    assert keys[key_id_of(key_digest(second))].revoked_at is None

    revoked = keys_cli("revoke", "acme", key_id_of(key_digest(second)), "--yes")
    assert revoked.exit_code == 0, revoked.output
    assert all(key.revoked_at is not None for key in registry.keys("acme"))

    assert "acme  batch  rate=5/s" in cli("list").output
    deleted = cli("delete", "acme", "--yes")
    assert deleted.exit_code == 0 and "usage is kept" in deleted.output
    assert "acme" not in cli("list").output
    actions = [entry.action for entry in registry.audit(AuditQuery(actor="cli:ana"))]
    assert actions == ["tenant.delete", "key.revoke", "key.rotate", "tenant.create"]
    assert registry.audit(AuditQuery(limit=1))[0].action == "tenant.purge"  # the system's


def test_a_rotation_keeps_the_old_key_for_the_overlap(cli, registry):
    first = last_line(cli("add", "acme").output)
    assert cli("rotate-key", "acme").exit_code == 0  # the default overlap, an hour
    old = {key.key_id: key for key in registry.keys("acme")}[key_id_of(key_digest(first))]
    assert old.revoked_at is None and old.expires_at is not None
    assert 3590 < old.expires_at - old.created_at <= 3600 + 60


def test_an_admin_key_is_printed_once_and_registered(cli, registry):
    made = cli("admin-key")
    assert made.exit_code == 0, made.output
    key = last_line(made.output)
    assert key_id_of(key_digest(key)) in {k.key_id for k in registry.keys(None)}


@pytest.mark.parametrize(
    "args",
    [("delete", "nobody"), ("keys", "nobody"), ("rotate-key", "nobody"), ("revoke-key", "f00")],
)
def test_naming_what_is_not_there_exits_1_with_the_reason(cli, registry, args):
    result = cli(*args)
    assert result.exit_code == 1
    assert result.output.strip()


def test_a_negative_overlap_is_a_bad_argument(cli, registry):
    cli("add", "acme")
    assert cli("rotate-key", "acme", "--overlap", "-1").exit_code == 2


def test_a_tenants_batch_bounds_are_set_shown_and_set_back_to_the_setting(cli, registry):
    added = cli("add", "acme", "--max-files", "5", "--max-open-batches", "0")
    assert added.exit_code == 0, added.output
    limits = registry.tenant("acme").batch_limits
    assert (limits.max_files, limits.max_stored_bytes, limits.max_open_batches) == (5, None, 0)
    line = next(line for line in cli("list").output.splitlines() if line.startswith("acme"))
    assert "max_files=5" in line and "max_open_batches=0" in line
    assert f"max_stored_bytes={10 << 30}(default)" in line
    changed = cli("set", "acme", "--max-files", "default", "--max-stored-bytes", "1000")
    assert changed.exit_code == 0, changed.output
    assert (
        "max_files=10000(default)" in changed.output and "max_stored_bytes=1000" in changed.output
    )
    limits = registry.tenant("acme").batch_limits
    assert (limits.max_files, limits.max_stored_bytes, limits.max_open_batches) == (None, 1000, 0)
    actions = [entry.action for entry in registry.audit(AuditQuery(actor="cli:ana"))]
    assert actions == ["tenant.update", "tenant.create"]


@pytest.mark.parametrize("value", ["-1", "many", "²", "1" * 30, "1.5"])
def test_a_batch_bound_that_is_not_a_whole_number_is_a_bad_argument(cli, registry, value):
    result = cli("add", "acme", "--max-files", value)
    assert result.exit_code == 2 and "--max-files must be a whole number" in result.output
    assert [t.name for t in registry.tenants()] == []


def test_a_billing_customer_is_set_and_removed_and_a_bad_one_is_refused(cli, registry):
    cli("add", "acme")
    acme = registry.tenant("acme")
    done = cli("set", "acme", "--billing-customer", "cus_NffrFeUfNV2Hib")
    assert done.exit_code == 0, done.output
    assert last_line(done.output) == "billing customer: cus_NffrFeUfNV2Hib"
    assert registry.billing_customers() == {acme.id: "cus_NffrFeUfNV2Hib"}
    bad = cli("set", "acme", "--billing-customer", "cus with spaces")
    assert bad.exit_code == 2 and "printable ASCII" in bad.output
    assert registry.billing_customers() == {acme.id: "cus_NffrFeUfNV2Hib"}
    removed = cli("set", "acme", "--billing-customer", "none")
    assert removed.exit_code == 0 and last_line(removed.output) == "billing customer: none"
    assert registry.billing_customers() == {}


def test_billing_customers_lists_each_tenant_and_exits_1_while_one_has_none(cli, tmp_path):
    cli("add", "acme")
    cli("add", "beta")
    cli("set", "acme", "--billing-customer", "cus_A")
    args = ["billing", "customers", "--data-dir", str(tmp_path)]
    listed = CliRunner().invoke(app, args)
    lines = listed.output.strip().splitlines()
    assert listed.exit_code == 1
    assert any(line.endswith("acme  cus_A") for line in lines)
    assert any(line.endswith("beta  none: exports refused") for line in lines)
    cli("set", "beta", "--billing-customer", "cus_B")
    assert CliRunner().invoke(app, args).exit_code == 0

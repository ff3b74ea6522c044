"""Every registry write keeps the registry's rules, whoever the writer is."""

import math
import sqlite3

import pytest
from typer.testing import CliRunner

from headway.cli import app
from headway.registry.errors import (
    DuplicateKey,
    DuplicateTenant,
    InvalidQuota,
    RegistryError,
    UnknownModelKind,
    UnknownTenant,
    UnknownTier,
)
from headway.registry.model import ModelRecord
from headway.registry.sqlite import DEFAULT_BURST, DEFAULT_RATE, Registry

BAD_QUOTAS = [0.0, -1.0, math.nan, math.inf]


@pytest.fixture
def registry(tmp_path):
    return Registry(tmp_path / "registry.sqlite3")


def tenant_rows(registry):
    return [(t.name, t.tier, t.rate_texts_per_s, t.burst_texts) for t in registry.tenants()]


def key_count(registry):
    return len(registry.snapshot().principals)


def test_a_tenant_name_is_taken_once(registry):
    registry.add_tenant("acme", "interactive")
    with pytest.raises(DuplicateTenant, match="tenant 'acme' already exists"):
        registry.add_tenant("acme", "batch", key="another-key")
    assert tenant_rows(registry) == [("acme", "interactive", 200.0, 400.0)]
    assert key_count(registry) == 1  # the refused tenant's key was not stored either


def test_an_api_key_is_registered_once_to_a_tenant_or_the_operator(registry):
    registry.add_tenant("acme", "interactive", key="shared-key")
    with pytest.raises(DuplicateKey, match="API key is already registered"):
        registry.add_tenant("globex", "interactive", key="shared-key")
    with pytest.raises(DuplicateKey):
        registry.add_admin_key(key="shared-key")
    registry.add_admin_key(key="admin-key")
    with pytest.raises(DuplicateKey):
        registry.add_tenant("initech", "batch", key="admin-key")
    assert [name for name, *_ in tenant_rows(registry)] == ["acme"]  # nothing half-written
    assert key_count(registry) == 2


@pytest.mark.parametrize("tier", ["gold", "", "Interactive"])
def test_an_unknown_tier_is_refused_on_add_and_on_update(registry, tier):
    with pytest.raises(UnknownTier, match=f"tier {tier!r} is not one of interactive, batch"):
        registry.add_tenant("acme", tier)
    registry.add_tenant("acme", "batch")
    with pytest.raises(UnknownTier):
        registry.update_tenant("acme", tier=tier)
    assert tenant_rows(registry) == [("acme", "batch", 500.0, 2000.0)]


@pytest.mark.parametrize("value", BAD_QUOTAS)
@pytest.mark.parametrize("field", ["rate_texts_per_s", "burst_texts"])
def test_a_quota_that_is_not_a_positive_finite_number_is_refused(registry, field, value):
    with pytest.raises(InvalidQuota, match=f"{field} must be a positive, finite number"):
        registry.add_tenant("acme", "interactive", **{field: value})
    assert registry.tenants() == []
    registry.add_tenant("acme", "interactive", rate_texts_per_s=5, burst_texts=10)
    with pytest.raises(InvalidQuota, match=field):
        registry.update_tenant("acme", **{field: value})
    assert tenant_rows(registry) == [("acme", "interactive", 5.0, 10.0)]


def test_a_constraint_no_rule_foresaw_is_still_a_registry_error(registry):
    with pytest.raises(RegistryError, match=r"NOT NULL constraint failed: tenants\.name") as no:
        registry.add_tenant(None, "interactive")  # what no typed caller can send
    assert not isinstance(no.value, sqlite3.Error)
    assert registry.tenants() == []


def test_an_unset_quota_takes_the_tiers_default(registry):
    tenant, _ = registry.add_tenant("acme", "batch", burst_texts=7)
    assert (tenant.rate_texts_per_s, tenant.burst_texts) == (DEFAULT_RATE["batch"], 7)
    tenant, _ = registry.add_tenant("globex", "interactive", rate_texts_per_s=3)
    assert (tenant.rate_texts_per_s, tenant.burst_texts) == (3, DEFAULT_BURST["interactive"])


def test_an_unknown_tenant_cannot_be_updated(registry):
    with pytest.raises(UnknownTenant, match="no tenant named 'nobody'"):
        registry.update_tenant("nobody", burst_texts=1)
    with pytest.raises(UnknownTenant):
        registry.update_tenant("nobody")  # even with nothing to change
    assert registry.tenants() == []


def test_an_update_changes_only_what_it_names(registry):
    registry.add_tenant("acme", "interactive", rate_texts_per_s=5, burst_texts=10)
    assert registry.update_tenant("acme") == registry.tenants()[0]
    updated = registry.update_tenant("acme", burst_texts=20)
    assert (updated.tier, updated.rate_texts_per_s, updated.burst_texts) == (
        "interactive",
        5,
        20,
    )


def test_a_model_of_an_unknown_kind_is_refused_with_its_aliases(registry):
    record = ModelRecord("c" * 64, "m", "reranker", 384, "none")
    with pytest.raises(UnknownModelKind, match="model kind 'reranker' is not one of"):
        registry.add_model(record, ("m",))
    assert registry.models() == []
    assert registry.resolve_model("m") is None


def test_a_version_recorded_twice_keeps_the_first_record_and_moves_the_aliases(registry):
    first = ModelRecord("d" * 64, "m", "embedding", 384, "none", created_at=1.0)
    registry.add_model(first, ("m",))
    registry.add_model(ModelRecord("d" * 64, "renamed", "embedding", 384, "none"), ("n",))
    assert registry.models() == [(first, ["m", "n"])]


# -- the CLI, one writer among others: the registry's refusals, as exit codes ------------


TIER = "error: tier 'gold' is not one of interactive, batch; say --tier interactive or batch"


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["add", "acme", "--tier", "gold"], 2, TIER),
        (
            ["add", "acme", "--rate", "0"],
            2,
            "error: --rate must be a positive, finite number, not 0.0",
        ),
        (
            ["add", "acme", "--burst", "nan"],
            2,
            "error: --burst must be a positive, finite number, not nan",
        ),
        (["add", "taken"], 1, "error: tenant 'taken' already exists"),
        (["set", "nobody", "--rate", "3"], 1, "error: no tenant named 'nobody'"),
        (["set", "taken", "--tier", "gold"], 2, TIER),
        (
            ["set", "taken", "--burst", "-1"],
            2,
            "error: --burst must be a positive, finite number, not -1.0",
        ),
    ],
)
def test_the_cli_exits_2_for_a_bad_argument_and_1_for_a_refusal(tmp_path, args, code, message):
    Registry(tmp_path / "registry.sqlite3").add_tenant("taken", "batch")
    result = CliRunner().invoke(app, ["tenants", *args, "--data-dir", str(tmp_path)])
    assert result.exit_code == code and result.output.startswith(message), result.output
    assert len(result.output.strip().splitlines()) == 1  # one line, with the fix after "; "
    assert tenant_rows(Registry(tmp_path / "registry.sqlite3")) == [
        ("taken", "batch", 500.0, 2000.0)
    ]

"""The README's demo keys: seeded only into a registry that never held a tenant or key,
warned about while they work, removed (all four) by ``headway tenants demo --remove``."""

import pytest
from typer.testing import CliRunner

from headway.cli import app
from headway.cli.options import settings_from
from headway.registry.demo import (
    DEMO_ADMIN_KEY,
    DEMO_ADMIN_KEY_ID,
    DEMO_KEYS,
    DEMO_TENANTS,
    demo_key_warning,
    live_demo_keys,
    plan_removal,
)
from headway.registry.keys import key_digest
from headway.registry.model import ApiKey, key_id_of
from headway.registry.sqlite import Registry


@pytest.fixture
def cli(tmp_path, monkeypatch):
    monkeypatch.setattr("getpass.getuser", lambda: "ana")

    def invoke(*args: str):
        return CliRunner().invoke(app, ["tenants", *args, "--data-dir", str(tmp_path)])

    return invoke


@pytest.fixture
def registry(tmp_path):
    return Registry(settings_from(None, data_dir=tmp_path).registry_path)


def key(key_id: str, tenant: str | None = None, *, revoked: bool = False) -> ApiKey:
    role = "tenant" if tenant else "admin"
    return ApiKey(key_id, tenant, role, 1.0, None, 2.0 if revoked else None)


def demo_id(name: str) -> str:
    published = {tenant: k for tenant, _, k in DEMO_TENANTS}
    return key_id_of(key_digest(published[name]))


def test_a_new_registry_is_seeded_once(registry):
    assert registry.seed_demo() is True
    assert sorted(live_demo_keys(registry.snapshot())) == sorted(DEMO_KEYS)
    assert registry.seed_demo() is False


def test_a_registry_that_held_a_tenant_is_never_seeded_even_when_it_is_gone(registry):
    registry.add_tenant("acme", "interactive")
    registry.delete_tenant("acme")
    assert registry.tenants() == []
    assert registry.seed_demo() is False
    assert live_demo_keys(registry.snapshot()) == []


def test_a_registry_with_only_an_operator_admin_key_is_not_seeded(registry):
    registry.add_admin_key()
    assert registry.seed_demo() is False
    assert registry.tenants() == []


def test_deleting_the_demo_tenants_keeps_them_deleted(registry):
    """Before: the next `up` saw no tenants, seeded again and crashed on the admin key."""
    registry.seed_demo()
    for name, _, _ in DEMO_TENANTS:
        registry.delete_tenant(name)
    assert registry.seed_demo() is False
    assert live_demo_keys(registry.snapshot()) == [DEMO_ADMIN_KEY]


def test_the_warning_names_the_live_keys_and_the_way_out():
    line = demo_key_warning(["demo-admin-key"])
    assert "demo-admin-key" in line and "headway tenants demo --remove" in line


def test_removal_deletes_a_demo_tenant_whose_only_key_is_the_published_one():
    plan = plan_removal({"search-app": [key(demo_id("search-app"), "search-app")]}, [], 10.0)
    assert plan.delete_tenants == ("search-app",) and plan.revoke_keys == ()


def test_removal_keeps_a_demo_tenant_that_has_keys_of_its_own_and_revokes_the_demo_key():
    keys = [key("0123456789abcdef", "support-bot"), key(demo_id("support-bot"), "support-bot")]
    plan = plan_removal({"support-bot": keys}, [], 10.0)
    assert plan.delete_tenants == () and plan.revoke_keys == (demo_id("support-bot"),)


def test_removal_leaves_a_tenant_of_a_demo_name_that_never_held_the_demo_key():
    plan = plan_removal({"nightly-index": [key("0123456789abcdef", "nightly-index")]}, [], 10.0)
    assert plan.kept == ("nightly-index",) and not plan.delete_tenants and not plan.revoke_keys


def test_removal_replaces_the_demo_admin_key_only_when_it_is_the_last_live_one():
    alone = plan_removal({}, [key(DEMO_ADMIN_KEY_ID), key("00ff", revoked=True)], 10.0)
    assert alone.revoke_keys == (DEMO_ADMIN_KEY_ID,) and alone.needs_admin_key
    with_other = plan_removal({}, [key(DEMO_ADMIN_KEY_ID), key("00ff")], 10.0)
    assert with_other.revoke_keys == (DEMO_ADMIN_KEY_ID,) and not with_other.needs_admin_key
    revoked = plan_removal({}, [key(DEMO_ADMIN_KEY_ID, revoked=True), key("00ff")], 10.0)
    assert revoked.revoke_keys == () and not revoked.needs_admin_key


def test_demo_remove_removes_all_four_and_prints_a_replacement_admin_key(cli, registry):
    registry.seed_demo()
    assert cli("demo").output.count("live") == 4
    removed = cli("demo", "--remove", "--yes")
    assert removed.exit_code == 0, removed.output
    assert live_demo_keys(registry.snapshot()) == []
    assert registry.tenants() == []
    replacement = removed.output.splitlines()[1]
    admin = registry.snapshot().principals[key_digest(replacement)]
    assert admin.role == "admin"
    assert cli("demo").output.count("gone") == 4
    assert "no demo key is live" in cli("demo", "--remove", "--yes").output
    assert registry.seed_demo() is False  # and the next `up` seeds nothing


def test_admin_keys_are_listed_and_the_demo_one_revoked_by_id(cli, registry):
    registry.seed_demo()
    own = cli("admin-key").output.strip().splitlines()[-1]
    listed = cli("admin-keys")
    assert listed.exit_code == 0, listed.output
    assert f"{DEMO_ADMIN_KEY_ID}  admin" in listed.output and "demo-admin-key" in listed.output
    assert key_id_of(key_digest(own)) in listed.output and own not in listed.output
    assert cli("revoke-key", DEMO_ADMIN_KEY_ID).exit_code == 0
    assert DEMO_ADMIN_KEY not in live_demo_keys(registry.snapshot())

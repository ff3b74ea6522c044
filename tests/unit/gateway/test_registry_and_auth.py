import pytest

from headway.errors import Forbidden, Unauthorized
from headway.gateway.stages.authenticate import authenticate, require_tenant
from headway.registry.keys import key_digest
from headway.registry.model import ModelRecord
from headway.registry.sqlite import DEMO_ADMIN_KEY, Registry, RegistryError


@pytest.fixture
def registry(tmp_path):
    return Registry(tmp_path / "registry.sqlite3")


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def test_a_new_key_authenticates_its_tenant_and_is_stored_only_as_a_digest(registry, tmp_path):
    tenant, key = registry.add_tenant("acme", "batch", rate_texts_per_s=5, burst_texts=10)
    principal = authenticate(bearer(key), registry.snapshot())
    assert principal.tenant == tenant
    assert (tenant.tier, tenant.rate_texts_per_s, tenant.burst_texts) == ("batch", 5, 10)
    stored = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    assert key.encode() not in stored
    assert key_digest(key) in stored


def test_unknown_missing_and_malformed_keys_are_unauthorized(registry):
    registry.add_tenant("acme", "interactive")
    snapshot = registry.snapshot()
    for headers in ({}, bearer("nope"), {"authorization": "Basic abc"}, bearer("")):
        with pytest.raises(Unauthorized):
            authenticate(headers, snapshot)


def test_admin_key_cannot_act_as_a_tenant(registry):
    registry.seed_demo()
    principal = authenticate(bearer(DEMO_ADMIN_KEY), registry.snapshot())
    assert principal.role == "admin"
    with pytest.raises(Forbidden):
        require_tenant(principal)


def test_demo_tenants_are_seeded_once(registry):
    assert registry.seed_demo() is True
    assert registry.seed_demo() is False
    names = {t.name: t.tier for t in registry.tenants()}
    assert names == {
        "search-app": "interactive",
        "support-bot": "interactive",
        "nightly-index": "batch",
    }
    snapshot = registry.snapshot()
    tenant = authenticate(bearer("demo-key-nightly-index"), snapshot).tenant
    assert tenant is not None and tenant.tier == "batch"


def test_duplicate_tenant_is_refused(registry):
    registry.add_tenant("acme", "interactive")
    with pytest.raises(RegistryError, match="already exists"):
        registry.add_tenant("acme", "batch")


def test_aliases_resolve_to_versions_and_can_move(registry):
    v1 = ModelRecord("a" * 64, "m", "embedding", 384, "none", created_at=1.0)
    v2 = ModelRecord("b" * 64, "m", "embedding", 384, "none", created_at=2.0)
    registry.add_model(v1, ("m", "latest"))
    registry.add_model(v2, ("latest",))
    snapshot = registry.snapshot()
    assert snapshot.resolve_model("m") == v1
    assert snapshot.resolve_model("latest") == v2
    assert snapshot.resolve_model("a" * 64) == v1
    assert snapshot.resolve_model("unknown") is None


def test_a_tenants_quota_and_tier_can_change(registry):
    registry.add_tenant("acme", "interactive", rate_texts_per_s=5, burst_texts=10)
    updated = registry.update_tenant("acme", tier="batch", rate_texts_per_s=50)
    assert (updated.tier, updated.rate_texts_per_s, updated.burst_texts) == ("batch", 50, 10)
    assert registry.snapshot().principals  # still one key, now for a batch tenant
    with pytest.raises(RegistryError, match="no tenant"):
        registry.update_tenant("nobody", burst_texts=1)

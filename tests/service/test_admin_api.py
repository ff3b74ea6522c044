"""The admin API against a real SQLite registry: each resource, its refusals, its audit."""

from __future__ import annotations

import time

import httpx
import pytest

from headway.catalog import SYNTHETIC_ALIAS, synthetic_record
from headway.registry.keys import key_digest
from headway.registry.model import Actor, ModelRecord, Observation, key_id_of
from headway.registry.sqlite import DEMO_ADMIN_KEY, Registry
from tests.fakes import FakeClock
from tests.service.conftest import SYNTHETIC, WORKER_URLS, auth

ADMIN = auth(DEMO_ADMIN_KEY)
ADMIN_KEY_ID = key_id_of(key_digest(DEMO_ADMIN_KEY))
TENANT = auth()  # search-app's key
SYNTHETIC_VERSION = synthetic_record(SYNTHETIC).version
CANDIDATE = "b" * 64


def add_candidate(registry: Registry) -> None:
    record = ModelRecord(
        CANDIDATE,
        "synthetic-b",
        "embedding",
        SYNTHETIC.dimensions,
        "none",
        max_tokens=128,
        matryoshka_dimensions=(SYNTHETIC.dimensions // 2,),
    )
    registry.add_model(record, actor=Actor("test"))


async def embed(client: httpx.AsyncClient, key: str) -> int:
    body = {"model": SYNTHETIC_ALIAS, "input": ["a"]}
    return (await client.post("/v1/embeddings", headers=auth(key), json=body)).status_code


async def create_tenant(client: httpx.AsyncClient, name: str = "acme", **fields) -> dict:
    created = await client.post("/admin/tenants", headers=ADMIN, json={"name": name, **fields})
    assert created.status_code == 201, created.text
    return created.json()


async def test_a_tenant_is_created_listed_changed_and_deleted(stack):
    created = await create_tenant(stack.client, tier="batch", rate_texts_per_s=50)
    assert created["tenant"] == {
        "name": "acme", "tier": "batch", "rate_texts_per_s": 50.0,
        "burst_texts": created["tenant"]["burst_texts"],
    }  # fmt: skip
    key = created["key"]
    assert created["key_id"] == key_id_of(key_digest(key))
    assert await embed(stack.client, key) == 200  # works on this gateway at once
    listed = (await stack.client.get("/admin/tenants", headers=ADMIN)).json()["data"]
    assert "acme" in {t["name"] for t in listed} and "search-app" in {t["name"] for t in listed}
    changed = await stack.client.patch(
        "/admin/tenants/acme", headers=ADMIN, json={"tier": "interactive", "burst_texts": 7}
    )
    assert changed.status_code == 200
    assert (changed.json()["tier"], changed.json()["burst_texts"]) == ("interactive", 7.0)
    one = (await stack.client.get("/admin/tenants/acme", headers=ADMIN)).json()
    assert one == changed.json()
    keys = (await stack.client.get("/admin/tenants/acme/keys", headers=ADMIN)).json()["data"]
    assert [k["key_id"] for k in keys] == [created["key_id"]]
    assert key not in str(keys)  # ids and dates, never the key
    assert (await stack.client.post("/admin/tenants", headers=ADMIN, json={"name": "acme"})).json()[
        "error"
    ]["type"] == "conflict"
    deleted = await stack.client.delete("/admin/tenants/acme", headers=ADMIN)
    assert deleted.status_code == 200
    assert deleted.json()["usage_kept"] is True and deleted.json()["keys_revoked"] is True
    assert await embed(stack.client, key) == 401  # refused on this gateway at once
    gone = await stack.client.get("/admin/tenants/acme", headers=ADMIN)
    assert (gone.status_code, gone.json()["error"]["type"]) == (404, "not_found")


async def test_a_tenants_batch_bounds_are_set_shown_and_set_back_through_the_api(stack):
    created = await create_tenant(stack.client, max_files=5, max_open_batches=0)
    assert (created["tenant"]["max_files"], created["tenant"]["max_open_batches"]) == (5, 0)
    assert "max_stored_bytes" not in created["tenant"]  # the gateway's setting
    changed = await stack.client.patch(
        "/admin/tenants/acme", headers=ADMIN, json={"max_files": None, "max_stored_bytes": 1000}
    )
    assert changed.status_code == 200, changed.text
    assert {k: v for k, v in changed.json().items() if k.startswith("max_")} == {
        "max_stored_bytes": 1000,
        "max_open_batches": 0,
    }
    kept = await stack.client.patch("/admin/tenants/acme", headers=ADMIN, json={"tier": "batch"})
    assert kept.json()["max_stored_bytes"] == 1000  # a field left out stays as it is
    assert (await stack.client.get("/admin/tenants/acme", headers=ADMIN)).json() == kept.json()
    await stack.gateway.snapshots.refresh()
    (tenant,) = [
        p.tenant
        for p in stack.gateway.snapshots.current.principals.values()
        if p.tenant is not None and p.tenant.name == "acme"
    ]
    assert tenant.batch_limits.max_stored_bytes == 1000  # what the Batch API routes read


@pytest.mark.parametrize(
    "body", [{"max_files": -1}, {"max_files": 1.5}, {"max_files": "5"}, {"max_lines": 5}]
)
async def test_a_batch_bound_that_is_not_a_whole_number_from_0_is_a_422(stack, body):
    refused = await stack.client.patch("/admin/tenants/search-app", headers=ADMIN, json=body)
    assert refused.status_code == 422, refused.text


WRITES = [
    ("POST", "/admin/tenants", {"name": "x"}),
    ("PATCH", "/admin/tenants/search-app", {"tier": "batch"}),
    ("DELETE", "/admin/tenants/search-app", None),
    ("POST", "/admin/tenants/search-app/keys", {}),
    ("DELETE", "/admin/tenants/search-app/keys/0123456789abcdef", None),
    ("PUT", f"/admin/aliases/{SYNTHETIC_ALIAS}", {"version": SYNTHETIC_VERSION}),
    ("PUT", f"/admin/splits/{SYNTHETIC_ALIAS}", {"weights": {SYNTHETIC_VERSION: 1}}),
    ("DELETE", f"/admin/splits/{SYNTHETIC_ALIAS}", None),
    ("POST", "/admin/rollouts", {"alias": SYNTHETIC_ALIAS, "to": CANDIDATE}),
    ("POST", "/admin/rollouts/1/pause", None),
    ("PUT", f"/admin/models/{SYNTHETIC_VERSION}/gate", {"min_mean_cosine": 0.5}),
    ("DELETE", f"/admin/models/{SYNTHETIC_VERSION}/gate", None),
]


@pytest.mark.parametrize(("method", "path", "body"), WRITES)
async def test_an_admin_write_refuses_a_tenant_key_and_no_key_before_reading_the_body(
    stack, method, path, body
):
    for headers, status in ((TENANT, 403), ({}, 401)):
        # A body that would be a 422 shows the key is judged first.
        refused = await stack.client.request(method, path, headers=headers, json={"bad": []})
        assert refused.status_code == status, (headers, refused.text)
    audit = (await stack.client.get("/admin/audit", headers=ADMIN)).json()["data"]
    assert [e for e in audit if e["actor"] != "system"] == []  # nothing was written


@pytest.mark.parametrize("path", ["/admin/tenants", "/admin/audit", "/admin/models"])
async def test_an_admin_read_refuses_a_tenant_key(stack, path):
    assert (await stack.client.get(path, headers=TENANT)).status_code == 403
    assert (await stack.client.get(path)).status_code == 401


@pytest.mark.parametrize(
    ("method", "path", "body", "message"),
    [
        ("POST", "/admin/tenants", {"name": "a", "rate_texts_per_s": "x"},
         "`rate_texts_per_s`: expected a number"),
        ("POST", "/admin/tenants", {"name": "a", "colour": "red"}, "`colour`: unknown field"),
        ("POST", "/admin/tenants", {"name": "a", "rate_texts_per_s": -1}, "`rate_texts_per_s`"),
        ("POST", "/admin/tenants", {"tier": "batch"}, "`name`: required"),
        ("POST", "/admin/tenants", {"name": "a", "tier": "gold"}, "`tier`"),
        ("PATCH", "/admin/tenants/search-app", {"burst_texts": 0}, "`burst_texts`"),
        ("POST", "/admin/tenants/search-app/keys", {"overlap_s": -5}, "`overlap_s`"),
        ("PUT", "/admin/aliases/minilm", {"version": "not-a-hash"}, "`version`"),
        ("PUT", f"/admin/splits/{SYNTHETIC_ALIAS}", {"weights": {"c" * 64: 1}},
         f"`weights.{'c' * 64}`"),
        ("PUT", f"/admin/splits/{SYNTHETIC_ALIAS}",
         {"weights": {SYNTHETIC_VERSION: 1}, "pins": {"nobody": SYNTHETIC_VERSION}},
         "`pins.nobody`"),
        ("PUT", f"/admin/splits/{SYNTHETIC_ALIAS}", {"weights": {SYNTHETIC_VERSION: "1"}},
         "`weights[...]`: expected a number"),
        ("POST", "/admin/rollouts", {"alias": SYNTHETIC_ALIAS, "to": CANDIDATE, "steps": [0]},
         "`steps[0]`"),
    ],
)  # fmt: skip
async def test_a_bad_body_is_a_422_that_names_the_field(stack, method, path, body, message):
    refused = await stack.client.request(method, path, headers=ADMIN, json=body)
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["message"].startswith(message), refused.json()


async def test_every_write_is_audited_once_with_the_admin_key_and_the_request_id(stack):
    add_candidate(stack.registry)
    client = stack.client
    writes = [
        await client.post("/admin/tenants", headers=ADMIN, json={"name": "acme"}),
        await client.patch("/admin/tenants/acme", headers=ADMIN, json={"rate_texts_per_s": 3}),
        await client.post("/admin/tenants/acme/keys", headers=ADMIN, json={"overlap_s": 60}),
        await client.put("/admin/aliases/other", headers=ADMIN, json={"version": CANDIDATE}),
        await client.put(
            f"/admin/splits/{SYNTHETIC_ALIAS}",
            headers=ADMIN,
            json={"weights": {SYNTHETIC_VERSION: 3, CANDIDATE: 1}, "pins": {"acme": CANDIDATE}},
        ),
        await client.delete(f"/admin/splits/{SYNTHETIC_ALIAS}", headers=ADMIN),
        await client.post(
            "/admin/rollouts", headers=ADMIN, json={"alias": SYNTHETIC_ALIAS, "to": CANDIDATE}
        ),
        await client.post("/admin/rollouts/1/abort", headers=ADMIN),
        await client.delete("/admin/tenants/acme", headers=ADMIN),
    ]
    keys = (await client.get("/admin/tenants/search-app/keys", headers=ADMIN)).json()["data"]
    path = f"/admin/tenants/search-app/keys/{keys[0]['key_id']}"
    writes.append(await client.delete(path, headers=ADMIN))
    assert [w.status_code for w in writes] == [201, 200, 201, 200, 200, 200, 201, 200, 200, 200]
    entries = (await client.get("/admin/audit?limit=1000", headers=ADMIN)).json()["data"]
    for write in writes:
        mine = [e for e in entries if e["request_id"] == write.headers["x-request-id"]]
        assert len(mine) == 1, (write.request.url, mine)
        assert mine[0]["actor"] == ADMIN_KEY_ID
    actions = [e["action"] for e in entries if e["actor"] == ADMIN_KEY_ID]
    assert actions[0] == "key.revoke" and actions[-1] == "tenant.create"  # newest first
    tenant_writes = await client.get(
        f"/admin/audit?actor={ADMIN_KEY_ID}&target=tenant:acme&since=2020-01-01", headers=ADMIN
    )
    assert [e["action"] for e in tenant_writes.json()["data"]] == [
        "tenant.delete", "key.rotate", "tenant.update", "tenant.create"
    ]  # fmt: skip
    page = await client.get(f"/admin/audit?limit=2&before_id={entries[0]['id']}", headers=ADMIN)
    assert [e["id"] for e in page.json()["data"]] == [e["id"] for e in entries[1:3]]
    until_epoch = await client.get("/admin/audit?until=1970-01-02", headers=ADMIN)
    assert until_epoch.json()["data"] == []


@pytest.mark.parametrize(
    "query",
    ["limit=0", "limit=x", "since=yesterday", "colour=red", "before_id=-1", "limit=1&limit=2"],
)
async def test_an_audit_query_that_makes_no_sense_is_a_422(stack, query):
    assert (await stack.client.get(f"/admin/audit?{query}", headers=ADMIN)).status_code == 422


async def test_a_rotated_key_works_for_the_overlap_and_not_after_it(stack, tmp_path):
    first = (await create_tenant(stack.client))["key"]
    rotated = await stack.client.post(
        "/admin/tenants/acme/keys", headers=ADMIN, json={"overlap_s": 600}
    )
    assert rotated.status_code == 201
    second = rotated.json()["key"]
    assert rotated.json()["key_id"] == key_id_of(key_digest(second))
    assert (await embed(stack.client, first), await embed(stack.client, second)) == (200, 200)
    # What a gateway reads once the overlap is over (a registry whose clock is past it).
    later = FakeClock(time.time())
    later.advance(601)
    stack.gateway.snapshots.current = Registry(
        tmp_path / "registry.sqlite3", clock=later
    ).snapshot()
    assert (await embed(stack.client, first), await embed(stack.client, second)) == (401, 200)
    await stack.gateway.snapshots.refresh()
    # Rotation with no overlap: every other key is refused at once.
    third = await stack.client.post(
        "/admin/tenants/acme/keys", headers=ADMIN, json={"overlap_s": 0}
    )
    assert await embed(stack.client, second) == 401
    assert await embed(stack.client, third.json()["key"]) == 200
    keys = (await stack.client.get("/admin/tenants/acme/keys", headers=ADMIN)).json()["data"]
    assert keys[0]["key_id"] == third.json()["key_id"] and keys[0]["revoked_at"] is None
    assert all(k["revoked_at"] or k["expires_at"] for k in keys[1:])


async def test_the_default_overlap_is_an_hour(stack):
    await create_tenant(stack.client)
    rotated = await stack.client.post("/admin/tenants/acme/keys", headers=ADMIN, json={})
    assert rotated.json()["overlap_s"] == 3600


async def test_a_revoked_key_is_refused_on_the_same_gateway_at_once(stack):
    created = await create_tenant(stack.client)
    other = await create_tenant(stack.client, "other")
    # A key is revoked under its own tenant's path only.
    elsewhere = f"/admin/tenants/acme/keys/{other['key_id']}"
    assert (await stack.client.delete(elsewhere, headers=ADMIN)).status_code == 404
    revoked = await stack.client.delete(
        f"/admin/tenants/acme/keys/{created['key_id']}", headers=ADMIN
    )
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    assert await embed(stack.client, created["key"]) == 401
    assert await embed(stack.client, other["key"]) == 200


async def test_models_list_each_version_with_its_aliases_and_the_replicas_serving_it(stack):
    add_candidate(stack.registry)
    models = (await stack.client.get("/admin/models", headers=ADMIN)).json()["data"]
    by_version = {m["version"]: m for m in models}
    served = by_version[SYNTHETIC_VERSION]
    assert served["aliases"] == [SYNTHETIC_ALIAS] and served["served_by"] == sorted(WORKER_URLS)
    assert served["dimensions"] == SYNTHETIC.dimensions and served["kind"] == "embedding"
    candidate = by_version[CANDIDATE]
    assert candidate["served_by"] == [] and candidate["aliases"] == []
    assert candidate["max_tokens"] == 128
    assert candidate["matryoshka_dimensions"] == [SYNTHETIC.dimensions // 2]
    one = await stack.client.get(f"/admin/models/{SYNTHETIC_VERSION}", headers=ADMIN)
    assert one.json() == served
    assert (await stack.client.get("/admin/models/nope", headers=ADMIN)).status_code == 404


async def test_an_alias_is_pointed_at_a_version_by_its_hash(stack):
    add_candidate(stack.registry)
    put = await stack.client.put("/admin/aliases/next", headers=ADMIN, json={"version": CANDIDATE})
    assert put.status_code == 200
    aliases = (await stack.client.get("/admin/aliases", headers=ADMIN)).json()["data"]
    assert {"alias": "next", "version": CANDIDATE, "split": False} in aliases
    unknown = await stack.client.put(
        "/admin/aliases/next", headers=ADMIN, json={"version": "d" * 64}
    )
    assert unknown.status_code == 404
    assert stack.gateway.snapshots.current.resolve_model("next").version == CANDIDATE


async def test_a_split_is_set_read_and_removed(stack):
    add_candidate(stack.registry)
    body = {
        "weights": {SYNTHETIC_VERSION: 9, CANDIDATE: 1},
        "sticky": "user",
        "pins": {"search-app": SYNTHETIC_VERSION},
        "shadow": None,
    }
    path = f"/admin/splits/{SYNTHETIC_ALIAS}"
    put = await stack.client.put(path, headers=ADMIN, json=body)
    assert put.status_code == 200, put.text
    assert put.json() == {"alias": SYNTHETIC_ALIAS, **body}
    assert (await stack.client.get(path, headers=ADMIN)).json() == put.json()
    listed = (await stack.client.get("/admin/splits", headers=ADMIN)).json()["data"]
    assert listed == [put.json()]
    assert SYNTHETIC_ALIAS in stack.gateway.snapshots.current.splits  # refreshed at once
    aliases = (await stack.client.get("/admin/aliases", headers=ADMIN)).json()["data"]
    assert {"alias": SYNTHETIC_ALIAS, "version": SYNTHETIC_VERSION, "split": True} in aliases
    assert (await stack.client.delete(path, headers=ADMIN)).status_code == 200
    assert (await stack.client.get(path, headers=ADMIN)).status_code == 404
    assert (await stack.client.delete(path, headers=ADMIN)).status_code == 404
    nowhere = await stack.client.put("/admin/splits/nowhere", headers=ADMIN, json=body)
    assert nowhere.status_code == 404


async def test_a_rollout_is_started_moved_by_hand_and_shows_its_step(stack):
    add_candidate(stack.registry)
    body = {"alias": SYNTHETIC_ALIAS, "to": CANDIDATE, "steps": ["shadow", 50, 100]}
    started = await stack.client.post("/admin/rollouts", headers=ADMIN, json=body)
    assert started.status_code == 201, started.text
    rollout = started.json()
    assert (rollout["state"], rollout["step"], rollout["step_percent"]) == ("running", 0, 0)
    assert rollout["plan"]["steps"] == ["shadow", 50, 100]
    assert (rollout["primary"], rollout["candidate"]) == (SYNTHETIC_VERSION, CANDIDATE)
    assert rollout["started_by"] == ADMIN_KEY_ID and rollout["observed"] == {}
    again = await stack.client.post("/admin/rollouts", headers=ADMIN, json=body)
    assert again.status_code == 409
    one = f"/admin/rollouts/{rollout['id']}"
    for gateway, n, total in (("gw-a", 10, 9.0), ("gw-b", 30, 28.0)):
        stack.registry.record_observation(
            Observation(rollout["id"], 0, gateway, "shadow", requests=n, errors=1,
                        agreement_n=n, agreement_sum=total)
        )  # fmt: skip
    observed = (await stack.client.get(one, headers=ADMIN)).json()["observed"]
    assert observed == {"shadow": {"requests": 40, "errors": 2, "agreement": 37.0 / 40}}
    paused = await stack.client.post(f"{one}/pause", headers=ADMIN)
    assert paused.json()["state"] == "paused"
    assert (await stack.client.post(f"{one}/pause", headers=ADMIN)).status_code == 422
    assert (await stack.client.post(f"{one}/resume", headers=ADMIN)).json()["state"] == "running"
    active = await stack.client.get(
        f"/admin/rollouts?alias={SYNTHETIC_ALIAS}&active=true", headers=ADMIN
    )
    assert [r["id"] for r in active.json()["data"]] == [rollout["id"]]
    assert (await stack.client.post(f"{one}/abort", headers=ADMIN)).json()["state"] == "aborted"
    active = await stack.client.get("/admin/rollouts?active=true", headers=ADMIN)
    assert active.json()["data"] == []
    everything = await stack.client.get("/admin/rollouts", headers=ADMIN)
    assert [r["state"] for r in everything.json()["data"]] == ["aborted"]
    assert (await stack.client.get("/admin/rollouts/99", headers=ADMIN)).status_code == 404
    assert (await stack.client.get("/admin/rollouts/x", headers=ADMIN)).status_code == 404
    assert (
        await stack.client.get("/admin/rollouts?active=maybe", headers=ADMIN)
    ).status_code == 422


async def test_the_admin_routes_are_described_with_their_parameters_and_statuses(stack):
    spec = (await stack.client.get("/openapi.json")).json()
    tenant = spec["paths"]["/admin/tenants/{name}"]
    assert set(tenant) == {"get", "patch", "delete"}
    assert tenant["get"]["parameters"][0] == {
        "name": "name", "in": "path", "required": True, "schema": {"type": "string", "minLength": 1}
    }  # fmt: skip
    assert "201" in spec["paths"]["/admin/tenants"]["post"]["responses"]
    assert "409" in spec["paths"]["/admin/tenants"]["post"]["responses"]
    pause = spec["paths"]["/admin/rollouts/{id}/pause"]["post"]
    assert pause["parameters"][0]["schema"]["type"] == "integer"
    assert spec["components"]["schemas"]["TenantCreate"]["additionalProperties"] is False


async def test_a_versions_variant_gate_is_set_shown_and_removed(stack):
    client = stack.client
    path = f"/admin/models/{SYNTHETIC_VERSION}/gate"
    body = {"min_mean_cosine": 0.99, "min_nn_agreement": 0.9}
    gated = await client.put(path, headers=ADMIN, json=body)
    assert gated.status_code == 200, gated.text
    assert gated.json()["variant_gate"] == body
    assert SYNTHETIC_ALIAS in gated.json()["aliases"]
    shown = await client.get(f"/admin/models/{SYNTHETIC_VERSION}", headers=ADMIN)
    assert shown.json()["variant_gate"] == body and shown.json()["agreement"] is None
    (entry,) = (await client.get("/admin/audit?action=model.gate", headers=ADMIN)).json()["data"]
    assert entry["after"] == {"variant_gate": body}
    removed = await client.delete(path, headers=ADMIN)
    assert removed.status_code == 200 and removed.json()["variant_gate"] is None
    too_high = await client.put(path, headers=ADMIN, json={"min_mean_cosine": 1.5})
    assert too_high.status_code == 422 and "min_mean_cosine" in too_high.text
    unknown = await client.put(f"/admin/models/{'9' * 64}/gate", headers=ADMIN, json=body)
    assert unknown.status_code == 404
    refused = await client.put(path, headers=TENANT, json=body)
    assert refused.status_code == 403

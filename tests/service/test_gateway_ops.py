"""The client port serves no per-tenant figures to anyone but the admin key; /metrics is
on the operations listener only (``app/ops.py``).

Played as the hostile tenant and the anonymous client would: a victim tenant with a
distinctive name sends work and a batch; then every GET route of the client port is asked,
with no key, with another tenant's key and with the victim's own, and no answer (body or
header) names the victim except the victim's own and the admin key's.
"""

from __future__ import annotations

import httpx
import pytest

from headway.app.ops import OPS_PATHS, build_ops_app
from headway.http.router import parameters_of
from headway.registry.sqlite import DEMO_ADMIN_KEY
from tests.service.batch_helpers import BATCHES, create, embed_line, jsonl, upload
from tests.service.conftest import Stack, auth, make_stack

VICTIM = "victim-corp-7f3a"
VICTIM_KEY = "key-victim-corp-7f3a"
ATTACKER = auth("demo-key-search-app")


@pytest.fixture
async def stack(tmp_path):
    built = await make_stack(tmp_path, batches=BATCHES)
    built.registry.add_tenant(
        VICTIM, "interactive", rate_texts_per_s=100, burst_texts=100, key=VICTIM_KEY
    )
    await built.gateway.snapshots.refresh()
    yield built
    await built.close()


async def victim_works(stack: Stack) -> None:
    for texts in (["a private text"], ["another", "two"]):
        answer = await stack.client.post(
            "/v1/embeddings",
            headers=auth(VICTIM_KEY),
            json={"model": "synthetic", "input": texts},
        )
        assert answer.status_code == 200, answer.text
    uploaded = await upload(stack.client, jsonl(embed_line("c-1", "batched")), auth(VICTIM_KEY))
    assert uploaded.status_code == 200, uploaded.text
    batch = await create(stack.client, uploaded.json()["id"], auth(VICTIM_KEY))
    assert batch.status_code == 200, batch.text


def client_get_paths(stack: Stack) -> list[str]:
    """Every GET route of the client port that takes no path parameter."""
    router = stack.gateway_app.handler.router
    return sorted(
        route.path
        for route in router.routes()
        if route.method == "GET" and not parameters_of(route.path)
    )


def names_victim(answer: httpx.Response) -> bool:
    headers = " ".join(f"{name}: {value}" for name, value in answer.headers.items())
    return VICTIM in answer.text or VICTIM in headers


async def test_metrics_is_not_on_the_client_port_for_anyone(stack: Stack) -> None:
    await victim_works(stack)
    for headers in ({}, ATTACKER, auth(VICTIM_KEY), auth(DEMO_ADMIN_KEY)):
        for method in ("GET", "HEAD", "POST"):
            answer = await stack.client.request(method, "/metrics", headers=headers)
            assert answer.status_code == 404, (method, headers, answer.text)
            assert "headway_" not in answer.text
    spec = (await stack.client.get("/openapi.json")).json()
    assert "/metrics" not in spec["paths"]


async def test_the_operations_listener_serves_metrics_and_probes_and_no_api(stack: Stack) -> None:
    await victim_works(stack)
    exposition = (await stack.ops.get("/metrics")).text
    # Why it is not on the client port: its series name every tenant.
    assert f'tenant="{VICTIM}"' in exposition
    assert (await stack.ops.get("/healthz")).json() == {"status": "ok"}
    ready = await stack.ops.get("/readyz")
    assert ready.status_code == 200 and ready.json()["pools"]["embed"]["ready"] == 2
    served = build_ops_app(stack.gateway).handler.router.routes()  # type: ignore[attr-defined]
    assert {route.path for route in served} == set(OPS_PATHS)
    for path in ("/v1/embeddings", "/v1/models", "/admin/tenants", "/console"):
        assert (await stack.ops.get(path, headers=auth(DEMO_ADMIN_KEY))).status_code == 404
    # Its answers are counted with the gateway's, under their route names.
    again = (await stack.ops.get("/metrics")).text
    assert 'headway_requests_total{code="200",route="metrics"}' in again


async def test_no_client_port_answer_names_another_tenant(stack: Stack) -> None:
    await victim_works(stack)
    paths = client_get_paths(stack)
    assert {"/v1/models", "/v1/usage", "/v1/files", "/v1/batches", "/openapi.json"} <= set(paths)
    assert "/metrics" not in paths
    leaks = []
    for who, headers in (("anonymous", {}), ("another tenant", ATTACKER)):
        for path in paths:
            answer = await stack.client.get(path, headers=headers)
            assert answer.status_code < 500, (who, path, answer.text)
            if names_victim(answer) or "headway_" in answer.text:
                leaks.append(f"{who}: GET {path} {answer.status_code}")
    assert not leaks, "\n".join(leaks)
    # The sweep sees a name where one is shown: to the admin key.
    admin = await stack.client.get("/admin/tenants", headers=auth(DEMO_ADMIN_KEY))
    assert admin.status_code == 200 and names_victim(admin)

"""Per-tenant quotas in the request path: charged in texts up front, refunded on our failures."""

import asyncio

from headway.settings import AdmissionSettings
from tests.fakes import until
from tests.service.conftest import auth, make_stack
from tests.service.test_admission import Gate

TINY = "tiny-key"


async def embed(stack, n_texts, key=TINY):
    return await stack.client.post(
        "/v1/embeddings",
        headers=auth(key),
        json={"model": "synthetic", "input": [f"text {i}" for i in range(n_texts)]},
    )


async def tiny_stack(tmp_path, **kwargs):
    stack = await make_stack(tmp_path, **kwargs)
    stack.registry.add_tenant("tiny", "interactive", rate_texts_per_s=0.5, burst_texts=10, key=TINY)
    await stack.gateway.snapshots.refresh()
    return stack


async def test_texts_not_requests_are_counted_and_the_overflow_is_429(tmp_path):
    stack = await tiny_stack(tmp_path)
    try:
        first = await embed(stack, 6)
        assert first.status_code == 200
        assert first.headers["x-ratelimit-limit"] == "10"
        assert first.headers["x-ratelimit-remaining"] == "4"
        refused = await embed(stack, 6)  # 6 > 4 left: one request, but too many texts
        assert refused.status_code == 429
        assert refused.json()["error"]["type"] == "quota_exceeded"
        assert int(refused.headers["retry-after"]) >= 4  # 2 texts missing at 0.5 texts/s
        assert refused.headers["x-ratelimit-remaining"] == "4"
        assert (await embed(stack, 4)).status_code == 200  # what is left can still be used
        other = await embed(stack, 6, key="demo-key-search-app")
        assert other.status_code == 200  # other tenants are untouched
    finally:
        await stack.close()


async def test_a_request_larger_than_the_burst_can_never_pass(tmp_path):
    stack = await tiny_stack(tmp_path)
    try:
        response = await embed(stack, 11)
        assert response.status_code == 429
        assert "larger than the tenant's burst" in response.json()["error"]["message"]
        assert "retry-after" not in response.headers
    finally:
        await stack.close()


async def test_work_shed_after_charging_is_refunded(tmp_path):
    gate = Gate()
    stack = await tiny_stack(
        tmp_path, sleep=gate.sleep, admission=AdmissionSettings(static_limit_texts=4)
    )
    try:
        holder = asyncio.ensure_future(embed(stack, 3, key="demo-key-search-app"))
        pool = stack.gateway.pools["embed"]
        await until(lambda: pool.admission.outstanding == 3)
        # Room for one text passes the precheck; 8 are charged (of 10), then refused.
        shed = await embed(stack, 8)
        assert shed.status_code == 503
        gate.open.set()
        assert (await holder).status_code == 200
        assert (await embed(stack, 8)).status_code == 200  # the 8 came back
    finally:
        gate.open.set()
        await stack.close()


async def test_quotas_can_be_switched_off(tmp_path):
    from headway.settings import QuotaSettings

    stack = await tiny_stack(tmp_path, quota=QuotaSettings(enabled=False))
    try:
        assert [(await embed(stack, 10)).status_code for _ in range(3)] == [200, 200, 200]
    finally:
        await stack.close()


async def test_a_tenant_whose_bucket_is_empty_is_refused_before_its_body_is_parsed(tmp_path):
    stack = await tiny_stack(tmp_path)
    try:
        assert (await embed(stack, 10)).status_code == 200  # the whole burst
        assert (await embed(stack, 1)).status_code == 429  # found empty: remembered
        broken = await stack.client.post("/v1/embeddings", headers=auth(TINY), content=b"{")
        assert broken.status_code == 429  # not 400: refused before the JSON was read
        assert broken.json()["error"]["type"] == "quota_exceeded"
        assert broken.headers["x-ratelimit-remaining"] == "0"
        assert broken.headers["x-ratelimit-limit"] == "10"
        assert int(broken.headers["retry-after"]) >= 1  # one text back at 0.5 texts/s: 2 s
        other = await stack.client.post(
            "/v1/embeddings", headers=auth("demo-key-search-app"), content=b"{"
        )
        assert other.status_code == 400  # other tenants are parsed as ever
    finally:
        await stack.close()

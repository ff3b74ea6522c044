"""``GET /v1/usage`` and ``GET /admin/usage``: the ledger, per tenant, with strict queries."""

from __future__ import annotations

import pytest

from headway.billing.ledger.memory import MemoryLedger
from tests.builders import NOV_1, usage_event
from tests.service.conftest import auth, make_stack

ADMIN = "demo-admin-key"
HOUR = 3600
SEARCH_APP, SUPPORT_BOT = 1, 2
"""The registry's ids of the demo tenants (the stack's fixture checks them)."""


def search_app(request_id: str, **fields: object):
    return usage_event(request_id, tenant_id=SEARCH_APP, tenant="search-app", **fields)


@pytest.fixture
async def ledger():
    ledger = MemoryLedger()
    await ledger.apply(
        [
            search_app("a1", at=NOV_1 + 10, texts=2, tokens=10),
            search_app("a2", at=NOV_1 + 20, texts=3, tokens=30),
            search_app("a3", at=NOV_1 + HOUR + 5, texts=1, tokens=7),
            search_app("a4", at=NOV_1 + 86400, texts=4, tokens=40),
            search_app("a5", at=NOV_1 + 30, billable=False, texts=9),
            usage_event(
                "b1", tenant_id=SUPPORT_BOT, tenant="support-bot", at=NOV_1 + 10, texts=5, tokens=50
            ),
        ],
        [],
    )
    return ledger


@pytest.fixture
async def usage_stack(tmp_path, ledger):
    stack = await make_stack(tmp_path, ledger=ledger)
    tenants = stack.registry.snapshot().tenants
    assert (tenants["search-app"].id, tenants["support-bot"].id) == (SEARCH_APP, SUPPORT_BOT)
    yield stack
    await stack.close()


async def test_a_tenant_sees_its_own_usage_by_hour_and_never_anyone_elses(usage_stack):
    response = await usage_stack.client.get(
        "/v1/usage",
        params={"start": "2026-11-01", "end": "2026-11-03", "group_by": "hour"},
        headers=auth(),
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["start"] == "2026-11-01T00:00:00Z" and body["end"] == "2026-11-03T00:00:00Z"
    rows = [
        (r["tenant"], r["period_start"], r["requests"], r["texts"], r["tokens"])
        for r in body["data"]
    ]
    assert rows == [
        ("search-app", "2026-11-01T00:00:00Z", 2, 5, 40),  # the not-billable a5 is not in it
        ("search-app", "2026-11-01T01:00:00Z", 1, 1, 7),
        ("search-app", "2026-11-02T00:00:00Z", 1, 4, 40),
    ]


async def test_by_day_by_model_and_the_range_edges(usage_stack):
    async def get(**params):
        response = await usage_stack.client.get("/v1/usage", params=params, headers=auth())
        assert response.status_code == 200, response.text
        return response.json()["data"]

    by_day = await get(start="2026-11-01", end="2026-11-03")
    assert [(r["period_start"], r["requests"]) for r in by_day] == [
        ("2026-11-01T00:00:00Z", 3),
        ("2026-11-02T00:00:00Z", 1),
    ]
    by_model = await get(start="2026-11-01T00:00:00Z", end="2026-11-02T00:00:00Z", group_by="model")
    assert [(r["model"], r["requests"], r["tokens"]) for r in by_model] == [
        ("all-MiniLM-L6-v2", 3, 47)
    ]
    # end is exclusive; a start inside an hour takes that hour; offsets are honoured.
    assert await get(start="2026-11-01T00:30:00Z", end="2026-11-01T01:00:00Z", group_by="hour")
    shifted = await get(
        start="2026-11-01T02:00:00+01:00", end="2026-11-01T02:00:00Z", group_by="hour"
    )
    assert [r["period_start"] for r in shifted] == ["2026-11-01T01:00:00Z"]


async def test_the_operator_sees_every_tenant_or_one(usage_stack):
    client = usage_stack.client
    every = await client.get(
        "/admin/usage", params={"start": "2026-11-01", "end": "2026-11-02"}, headers=auth(ADMIN)
    )
    assert {r["tenant"] for r in every.json()["data"]} == {"search-app", "support-bot"}
    one = await client.get(
        "/admin/usage",
        params={"start": "2026-11-01", "end": "2026-11-02", "tenant": "support-bot"},
        headers=auth(ADMIN),
    )
    assert [(r["tenant"], r["texts"]) for r in one.json()["data"]] == [("support-bot", 5)]
    by_id = await client.get(
        "/admin/usage",
        params={"start": "2026-11-01", "end": "2026-11-02", "tenant_id": str(SUPPORT_BOT)},
        headers=auth(ADMIN),
    )
    assert [(r["tenant_id"], r["texts"]) for r in by_id.json()["data"]] == [(SUPPORT_BOT, 5)]
    assert (
        await client.get("/admin/usage", params={"start": "2026-11-01"}, headers=auth())
    ).status_code == 403
    assert (
        await client.get("/v1/usage", params={"start": "2026-11-01"}, headers=auth(ADMIN))
    ).status_code == 403
    assert (await client.get("/v1/usage", params={"start": "2026-11-01"})).status_code == 401


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({}, "start is required"),
        ({"start": "yesterday"}, "is not a date"),
        ({"start": "2026-13-01"}, "is not a date"),
        ({"start": "2026-11-01T10:00:00"}, "with an offset"),
        ({"start": "2026-11-02", "end": "2026-11-01"}, "end must be after start"),
        ({"start": "2026-11-01", "end": "2026-11-01"}, "end must be after start"),
        ({"start": "2025-01-01", "end": "2026-11-01"}, "longer than 366 days"),
        ({"start": "2026-11-01", "group_by": "week"}, "is not one of hour, day, model"),
        ({"start": "2026-11-01", "tenant": "support-bot"}, "unknown parameter 'tenant'"),
        ({"start": "2026-11-01", "tenant_id": "2"}, "unknown parameter 'tenant_id'"),
        ({"start": ["2026-11-01", "2026-11-02"]}, "given 2 times"),
        ({"start": "2026-11-01T25:00:00Z"}, "is not a date"),
        ({"start": "0001-01-01T00:00:00+01:00"}, "longer than 366 days"),
    ],
)
async def test_bad_dates_and_ranges_are_422_with_a_clear_message(usage_stack, params, says):
    response = await usage_stack.client.get("/v1/usage", params=params, headers=auth())
    assert response.status_code == 422, response.text
    assert response.json()["error"]["type"] == "validation_error"
    assert says in response.json()["error"]["message"]


async def test_without_a_ledger_usage_is_503(tmp_path):
    stack = await make_stack(tmp_path)
    try:
        response = await stack.client.get(
            "/v1/usage", params={"start": "2026-11-01"}, headers=auth()
        )
        assert response.status_code == 503
        assert response.json()["error"]["type"] == "usage_unavailable"
    finally:
        await stack.close()


async def test_a_ledger_that_cannot_open_does_not_stop_the_gateway(tmp_path):
    ledger, attempts = MemoryLedger(), []

    async def opened_second_time() -> MemoryLedger:
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionError("postgres is not up yet")
        return ledger

    stack = await make_stack(tmp_path, open_ledger=opened_second_time)
    try:
        assert attempts == [1]  # tried at start, and refused
        served = await stack.client.post(
            "/v1/embeddings", headers=auth(), json={"model": "synthetic", "input": ["a"]}
        )
        assert served.status_code == 200
        usage = await stack.client.get("/v1/usage", params={"start": "2026-11-01"}, headers=auth())
        assert usage.status_code == 503
        assert await stack.usage_ledger.try_open() is True  # the retry loop's step
        usage = await stack.client.get("/v1/usage", params={"start": "2026-11-01"}, headers=auth())
        assert usage.status_code == 200 and attempts == [1, 1]
    finally:
        await stack.close()

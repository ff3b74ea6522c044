"""The operator console in process: sign-in and its limits, the guard on every route,
CSRF, revocation."""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, replace

import httpx

from headway.billing.ledger.base import UsageQuery, UsageRow
from headway.billing.prices import parse_prices
from headway.catalog import SYNTHETIC_ALIAS
from headway.control.console import api, costs
from headway.control.console.auth import LOGIN_COOKIE, SECURITY_HEADERS, SESSION_COOKIE
from headway.control.console.pages import PAGES
from headway.control.console.routes import parts_of
from headway.registry.keys import key_digest
from headway.registry.model import SYSTEM, Actor, ModelRecord, key_id_of
from headway.registry.sqlite import DEMO_ADMIN_KEY
from headway.settings import FailedAuthSettings
from tests.fakes import FakeClock
from tests.service.conftest import SYNTHETIC, auth, make_stack

ADMIN_KEY_ID = key_id_of(key_digest(DEMO_ADMIN_KEY))
PARAMS = {"{name}": "support-bot", "{id}": "1"}
PUBLIC = {"/console/login", "/console/logout", "/console/static/{name}"}


async def call(
    client: httpx.AsyncClient, method: str, path: str, cookie: str = "", **kwargs
) -> httpx.Response:
    """One request with exactly ``cookie`` (the client's own jar is emptied first)."""
    client.cookies.clear()
    headers = dict(kwargs.pop("headers", {}))
    if cookie:
        headers["cookie"] = cookie
    return await client.request(method, path, headers=headers, **kwargs)


def set_cookie(response: httpx.Response) -> str:
    return response.headers.get("set-cookie", "")


def assert_secured(response: httpx.Response) -> None:
    for name, value in SECURITY_HEADERS.items():
        assert response.headers.get(name) == value, (response.request.url, name)


async def login(
    client: httpx.AsyncClient, key: str = DEMO_ADMIN_KEY, **headers: str
) -> httpx.Response:
    form = await call(client, "GET", "/console/login")
    assert form.status_code == 200
    token = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert token is not None
    login_cookie = set_cookie(form).split(";")[0]
    return await call(
        client,
        "POST",
        "/console/login",
        login_cookie,
        data={"key": key, "csrf": token[1]},
        headers=headers,
    )


async def session(client: httpx.AsyncClient, key: str = DEMO_ADMIN_KEY) -> tuple[str, str]:
    """The session cookie (``name=value``) and its CSRF token, from the page shell."""
    signed_in = await login(client, key)
    assert signed_in.status_code == 303, signed_in.text
    cookie = set_cookie(signed_in).split(";")[0]
    shell = await call(client, "GET", "/console/pools", cookie)
    assert shell.status_code == 200
    csrf = re.search(r'name="csrf-token" content="([^"]+)"', shell.text)
    assert csrf is not None
    return cookie, csrf[1]


def console_routes(stack) -> list[tuple[str, str]]:
    found = []
    for route in stack.gateway_app.handler.router.routes():
        if route.path.startswith("/console") and route.path not in PUBLIC:
            path = route.path
            for template, value in PARAMS.items():
                path = path.replace(template, value)
            found.append((route.method, path))
    return found


async def test_every_console_path_without_a_session_is_refused(stack):
    routes = console_routes(stack)
    assert len(routes) >= 2 * len(PAGES) + 3
    for method, path in routes:
        for cookie in ("", f"{SESSION_COOKIE}=forged.1.00.mac"):
            response = await call(stack.client, method, path, cookie, json={})
            assert_secured(response)
            if path.startswith("/console/api/"):
                assert response.status_code == 401, (method, path)
                assert response.json()["error"]["type"] == "unauthorized"
            else:
                assert (response.status_code, response.headers["location"]) == (
                    303,
                    "/console/login",
                ), path


async def test_a_tenant_key_or_a_wrong_key_gets_the_form_again_and_no_session(stack):
    tenant = await login(stack.client, "demo-key-search-app")
    assert tenant.status_code == 403 and "tenant" in tenant.text
    wrong = await login(stack.client, "not-a-key")
    assert wrong.status_code == 401 and "not valid" in wrong.text
    for answer in (tenant, wrong):
        assert_secured(answer)
        assert SESSION_COOKIE + "=" not in set_cookie(answer)
        assert 'name="key"' in answer.text  # the form again


async def test_signing_in_needs_the_forms_token_and_this_origin(stack):
    bare = await call(
        stack.client, "POST", "/console/login", data={"key": DEMO_ADMIN_KEY, "csrf": "x"}
    )
    assert bare.status_code == 403 and SESSION_COOKIE + "=" not in set_cookie(bare)
    elsewhere = await login(stack.client, origin="https://evil.example")
    assert elsewhere.status_code == 403 and SESSION_COOKIE + "=" not in set_cookie(elsewhere)
    cross_site = await login(stack.client, **{"sec-fetch-site": "cross-site"})
    assert cross_site.status_code == 403
    here = await login(stack.client, origin="http://gateway", **{"sec-fetch-site": "same-origin"})
    assert here.status_code == 303
    # Under Referrer-Policy: no-referrer a browser sends Origin: null for our own form.
    assert (await login(stack.client, origin="null")).status_code == 303


async def test_an_admin_key_opens_a_session_that_every_page_and_api_accepts(stack):
    signed_in = await login(stack.client)
    assert (signed_in.status_code, signed_in.headers["location"]) == (303, "/console/pools")
    attributes = [part.strip() for part in set_cookie(signed_in).split(";")]
    assert attributes[0].startswith(SESSION_COOKIE + "=")
    assert {"HttpOnly", "SameSite=Strict", "Path=/console", "Max-Age=28800"} <= set(attributes)
    assert "Secure" not in attributes  # plain http here
    cookie = attributes[0]
    assert (await call(stack.client, "GET", "/console", cookie)).headers["location"] == (
        "/console/pools"
    )
    for page in PAGES:
        shell = await call(stack.client, "GET", f"/console/{page}", cookie)
        assert shell.status_code == 200 and shell.headers["content-type"].startswith("text/html")
        assert '<script src="/console/static/console.js">' in shell.text
        assert ADMIN_KEY_ID in shell.text
        assert_secured(shell)
        answer = await call(stack.client, "GET", f"/console/api/{page}", cookie)
        assert answer.status_code == 200, (page, answer.text)
        assert_secured(answer)
    pools = (await call(stack.client, "GET", "/console/api/pools", cookie)).json()["pools"]
    assert [(p["name"], p["ready"], p["size"]) for p in pools] == [("embed", 2, 2)]
    assert {r["state"] for r in pools[0]["replicas"]} == {"ready"}


async def test_over_https_the_cookie_is_secure(stack):
    app = stack.gateway_app
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="https://gateway") as client:
        signed_in = await login(client)
    assert signed_in.status_code == 303
    assert "Secure" in [part.strip() for part in set_cookie(signed_in).split(";")]


async def test_each_page_reads_what_it_shows(stack):
    cookie, _ = await session(stack.client)
    await stack.client.post(
        "/v1/embeddings", headers=auth(), json={"model": SYNTHETIC_ALIAS, "input": ["a", "b"]}
    )

    async def view(page: str) -> dict:
        return (await call(stack.client, "GET", f"/console/api/{page}", cookie)).json()

    admission = await view("admission")
    for _ in range(100):  # the console's loop samples the pools every second
        if admission["pools"][0]["points"]:
            break
        await asyncio.sleep(0.05)
        admission = await view("admission")
    embed = admission["pools"][0]
    assert embed["name"] == "embed" and embed["limit"] > 0 and embed["points"]
    assert admission["columns"][2] == "outstanding"
    tenants = await view("tenants")
    assert tenants["ledger"] == "unavailable"
    names = [t["name"] for t in tenants["tenants"]]
    assert names == sorted(["search-app", "support-bot", "nightly-index"])
    search = next(t for t in tenants["tenants"] if t["name"] == "search-app")
    assert search["month"] is None and search["served"] == 1
    models = await view("models")
    assert any(v["aliases"] == [SYNTHETIC_ALIAS] and v["served"] for v in models["versions"])
    assert models["rollouts"] == []
    served_here = {v["version"] for v in models["versions"] if v["served"]}
    quality = models["quality"]  # the gateway's quality monitor: what it has seen
    assert quality is not None and {q["version"] for q in quality} <= served_here
    assert all(q["drifting"] is False and "mmd_p_value" in q for q in quality)
    assert all(q["traffic"] == "served" for q in quality)
    audit = await view("audit")
    assert audit["entries"] and len(audit["entries"]) <= 50
    economics = await view("economics")
    assert economics["machine_cost_per_hour"] == 0
    assert economics["pools"][0]["cost_per_1k"] is None
    assert "3600" in economics["formula"]


async def test_a_write_needs_the_sessions_csrf_token_and_is_audited_as_its_key(stack):
    cookie, csrf = await session(stack.client)
    path, body = "/console/api/tenants/support-bot", {"rate_texts_per_s": 7}
    for headers in (
        {},
        {"x-csrf-token": "wrong"},
        {"x-csrf-token": csrf, "origin": "https://evil.example"},
        {"x-csrf-token": csrf, "sec-fetch-site": "same-site"},
    ):
        refused = await call(stack.client, "POST", path, cookie, json=body, headers=headers)
        assert refused.status_code == 403, headers
        assert_secured(refused)
    _, other_csrf = await session(stack.client)
    another = await call(
        stack.client, "POST", path, cookie, json=body, headers={"x-csrf-token": other_csrf}
    )
    assert another.status_code == 403  # another session's token
    assert stack.registry.tenant("support-bot").rate_texts_per_s != 7
    done = await call(
        stack.client,
        "POST",
        path,
        cookie,
        json=body,
        headers={"x-csrf-token": csrf, "origin": "http://gateway"},
    )
    assert done.status_code == 200, done.text
    assert done.json()["rate_texts_per_s"] == 7
    assert stack.gateway.snapshots.current.tenants["support-bot"].rate_texts_per_s == 7
    audit = (await call(stack.client, "GET", "/console/api/audit", cookie)).json()["entries"]
    newest = audit[0]
    assert (newest["action"], newest["target"], newest["actor"]) == (
        "tenant.update",
        "tenant:support-bot",
        ADMIN_KEY_ID,
    )
    assert newest["request_id"] == done.headers["x-request-id"]
    unknown = await call(
        stack.client,
        "POST",
        "/console/api/tenants/nobody",
        cookie,
        json=body,
        headers={"x-csrf-token": csrf},
    )
    assert unknown.status_code == 404


async def test_a_rollout_is_paused_and_aborted_from_the_console(stack):
    candidate = "c" * 64
    record = ModelRecord(candidate, "synthetic-c", "embedding", SYNTHETIC.dimensions, "none")
    stack.registry.add_model(record, actor=Actor("test"))
    started = await stack.client.post(
        "/admin/rollouts",
        headers=auth(DEMO_ADMIN_KEY),
        json={"alias": SYNTHETIC_ALIAS, "to": candidate, "steps": [50, 100]},
    )
    assert started.status_code == 201, started.text
    rollout_id = started.json()["id"]
    cookie, csrf = await session(stack.client)
    token = {"x-csrf-token": csrf}
    shown = (await call(stack.client, "GET", "/console/api/models", cookie)).json()["rollouts"]
    assert [(r["id"], r["state"], r["percent"]) for r in shown] == [(rollout_id, "running", 50)]
    base = f"/console/api/rollouts/{rollout_id}"
    assert (await call(stack.client, "POST", f"{base}/pause", cookie)).status_code == 403
    paused = await call(stack.client, "POST", f"{base}/pause", cookie, headers=token)
    assert paused.status_code == 200 and paused.json()["state"] == "paused"
    again = await call(stack.client, "POST", f"{base}/pause", cookie, headers=token)
    assert again.status_code == 422  # not running: the admin API's refusal
    aborted = await call(stack.client, "POST", f"{base}/abort", cookie, headers=token)
    assert aborted.status_code == 200 and aborted.json()["state"] == "aborted"
    audit = (await call(stack.client, "GET", "/console/api/audit", cookie)).json()["entries"]
    assert [(e["action"], e["actor"]) for e in audit[:2]] == [
        ("rollout.abort", ADMIN_KEY_ID),
        ("rollout.pause", ADMIN_KEY_ID),
    ]


async def test_revoking_the_key_ends_its_sessions_at_once(stack):
    record, key = stack.registry.add_admin_key(actor=SYSTEM)
    await stack.gateway.snapshots.refresh()
    cookie, _ = await session(stack.client, key)
    assert (await call(stack.client, "GET", "/console/api/pools", cookie)).status_code == 200
    revoked = await stack.client.delete(
        f"/admin/tenants/x/keys/{record.key_id}", headers=auth(DEMO_ADMIN_KEY)
    )
    assert revoked.status_code == 404  # the admin API revokes tenants' keys only
    stack.registry.revoke_key(record.key_id, actor=SYSTEM)
    await stack.gateway.snapshots.refresh()
    assert (await call(stack.client, "GET", "/console/api/pools", cookie)).status_code == 401
    page = await call(stack.client, "GET", "/console/pools", cookie)
    assert (page.status_code, page.headers["location"]) == (303, "/console/login")


async def test_signing_out_needs_the_token_and_clears_the_cookie(stack):
    cookie, csrf = await session(stack.client)
    refused = await call(stack.client, "POST", "/console/logout", cookie, data={"csrf": "x"})
    assert refused.status_code == 403
    out = await call(stack.client, "POST", "/console/logout", cookie, data={"csrf": csrf})
    assert (out.status_code, out.headers["location"]) == (303, "/console/login")
    assert set_cookie(out).startswith(f"{SESSION_COOKIE}=;") and "Max-Age=0" in set_cookie(out)
    nobody = await call(stack.client, "POST", "/console/logout")
    assert nobody.status_code == 303


async def test_the_static_files_are_served_with_the_headers_and_nothing_else(stack):
    script = await call(stack.client, "GET", "/console/static/console.js")
    assert script.status_code == 200 and script.headers["content-type"].startswith(
        "text/javascript"
    )
    assert ".innerHTML" not in script.text and "insertAdjacentHTML" not in script.text
    assert_secured(script)
    style = await call(stack.client, "GET", "/console/static/console.css")
    assert style.status_code == 200 and style.headers["content-type"].startswith("text/css")
    missing = await call(stack.client, "GET", "/console/static/..%2Fsession.py")
    assert missing.status_code == 404


async def test_the_console_is_not_in_the_openapi_document(stack):
    spec = (await stack.client.get("/openapi.json")).json()
    assert not [path for path in spec["paths"] if path.startswith("/console")]
    assert "/v1/embeddings" in spec["paths"]


class MonthLedger:
    """Just enough of a ledger: this month's usage, grouped by model."""

    def __init__(self, rows: list[UsageRow], broken: bool = False) -> None:
        self.rows, self.broken, self.queries = rows, broken, []

    async def usage(self, query: UsageQuery) -> list[UsageRow]:
        self.queries.append(query)
        if self.broken:
            raise OSError("disk gone")
        return self.rows

    async def close(self) -> None:
        pass


PRICES = """
currency = "USD"
[[price]]
alias = "synthetic"
unit = "tokens"
per = 1000
amount = "0.50"
effective_from = 2026-01-01
"""


async def test_a_tenants_month_is_its_ids_not_a_deleted_namesakes(tmp_path):
    ledger = MonthLedger(
        [
            UsageRow(1, "search-app", 0, SYNTHETIC_ALIAS, "v", requests=2, texts=2, tokens=2),
            UsageRow(99, "search-app", 0, SYNTHETIC_ALIAS, "v", requests=7, texts=7, tokens=7),
        ]
    )
    stack = await make_stack(tmp_path, ledger=ledger)
    try:
        assert stack.registry.tenant("search-app").id == 1
        cookie, _ = await session(stack.client)
        tenants = (await call(stack.client, "GET", "/console/api/tenants", cookie)).json()
        search = next(t for t in tenants["tenants"] if t["name"] == "search-app")
        assert search["month"] == {"requests": 2, "texts": 2, "tokens": 2}
    finally:
        await stack.close()


async def test_usage_this_month_and_revenue_come_from_the_ledger(tmp_path):
    rows = [
        UsageRow(1, "search-app", 0, SYNTHETIC_ALIAS, "v", requests=10, texts=40, tokens=400),
        UsageRow(1, "search-app", 0, "other-alias", "w", requests=5, texts=5, tokens=50),
    ]
    ledger = MonthLedger(rows)
    stack = await make_stack(tmp_path, ledger=ledger)
    try:
        cookie, _ = await session(stack.client)
        tenants = (await call(stack.client, "GET", "/console/api/tenants", cookie)).json()
        assert tenants["ledger"] == "ok"
        search = next(t for t in tenants["tenants"] if t["name"] == "search-app")
        assert search["month"] == {"requests": 15, "texts": 45, "tokens": 450}
        query = ledger.queries[-1]
        assert (query.group_by, query.tenant_id) == ("model", None)
        assert tenants["month_start"].endswith("-01T00:00:00Z")
        parts = parts_of(stack.gateway, stack.usage_ledger, parse_prices(PRICES, "test"))
        parts = replace(
            parts, settings=parts.settings.model_copy(update={"machine_cost_per_hour": 1.0})
        )
        for pool in stack.gateway.pools:
            pool.admission.throughput = 100.0  # as if measured under load
        economics = await costs.economics_view(parts)
        embed = economics["pools"][0]
        assert embed["capacity_requests_per_s"] == 100.0  # one text a request: none served
        assert embed["cost_per_1k"] == 1.0 * 2 / (3600 * 100.0) * 1000
        [revenue] = embed["revenue"]
        # 0.50 per 1000 tokens, 40 tokens a request (400 over 10): 20 per 1k requests.
        assert (revenue["alias"], revenue["source"]) == (SYNTHETIC_ALIAS, "ledger")
        assert revenue["units_per_request"] == 40.0 and revenue["revenue_per_1k"] == 20.0
        ledger.broken = True
        failed = (await call(stack.client, "GET", "/console/api/tenants", cookie)).json()
        assert failed["ledger"] == "failed" and failed["tenants"][0]["month"] is None
    finally:
        await stack.close()


class Drifted:
    """A quality source with one drifting version."""

    def summary(self):
        return [
            VersionQualityRow("f" * 64, "embedding", 256, 256, 1.0, 0.4, 0.02, 0.001, None, True)
        ]


@dataclass(frozen=True)
class VersionQualityRow:
    version: str
    kind: str
    reference_rows: int
    window_rows: int
    mean_norm: float | None
    centroid_drift: float | None
    mmd: float | None
    mmd_p_value: float | None
    score_ks_p_value: float | None
    drifting: bool
    traffic: str = "shadow"


async def test_the_models_page_shows_a_drifting_version(stack):
    parts = replace(parts_of(stack.gateway, stack.usage_ledger), quality=Drifted())
    [shown] = (await api.models_view(parts))["quality"]
    assert (shown["version"], shown["drifting"], shown["mmd_p_value"]) == ("f" * 12, True, 0.001)
    assert shown["traffic"] == "shadow"  # a candidate: no client has had its answers yet
    assert (await api.models_view(replace(parts, quality=None)))["quality"] is None


def client_at(stack, address: str) -> httpx.AsyncClient:
    """A client whose requests come from ``address`` (the ASGI scope's ``client``)."""
    transport = httpx.ASGITransport(app=stack.gateway_app, client=(address, 40000))
    return httpx.AsyncClient(transport=transport, base_url="http://gateway")


def signins(stack, outcome: str) -> float | None:
    return stack.gateway.metrics.registry.get_sample_value(
        "headway_console_signin_total", {"outcome": outcome}
    )


FIVE_PER_15_MIN = FailedAuthSettings(address_failures=5, address_window_s=900)


async def test_wrong_keys_lock_their_address_out_but_not_a_key_signed_in_from_it(tmp_path, caplog):
    clock = FakeClock()
    stack = await make_stack(tmp_path, clock=clock, failed_auth=FIVE_PER_15_MIN)
    try:
        await session(stack.client)  # the operator signed in from here before the guessing
        for _ in range(5):
            assert (await login(stack.client, "hw_guess")).status_code == 401
        new_here = await login(stack.client, "demo-key-search-app")  # a key new to the address
        assert new_here.status_code == 429
        assert int(new_here.headers["retry-after"]) == 180  # one failure back every 900/5 s
        assert "Too many failed key checks from your address" in new_here.text
        assert SESSION_COOKIE + "=" not in set_cookie(new_here)
        assert set_cookie(new_here).startswith(LOGIN_COOKIE + "=")  # the form, signed again
        assert 'name="key"' in new_here.text
        assert_secured(new_here)
        # The operator's own key, accepted from this address before: still signs in.
        assert (await login(stack.client)).status_code == 303
        async with client_at(stack, "10.0.0.2") as elsewhere:  # another address: unaffected
            assert (await login(elsewhere, "hw_guess")).status_code == 401
        lockouts = [r.getMessage() for r in caplog.records if "failed key checks" in r.msg]
        assert lockouts == ["failed key checks: 5 within 900 s; refusing 127.0.0.1 for 180 s"]
        assert "hw_guess" not in caplog.text
        clock.advance(180)
        assert (await login(stack.client, "hw_guess")).status_code == 401  # one more, then
        assert (await login(stack.client, "hw_guess")).status_code == 429  # locked again
        counts = {o: signins(stack, o) for o in ("ok", "bad_key", "not_admin", "throttled")}
        assert counts == {"ok": 2, "bad_key": 7, "not_admin": 0, "throttled": 2}
    finally:
        await stack.close()


async def test_failures_from_many_addresses_lock_out_only_those_addresses(tmp_path):
    clock = FakeClock()
    stack = await make_stack(tmp_path, clock=clock, failed_auth=FIVE_PER_15_MIN)
    try:
        cookie, _ = await session(stack.client)  # signed in before the flood
        for number in range(30):  # 150 failures a minute, from 30 addresses
            async with client_at(stack, f"10.0.1.{number}") as guesser:
                for _ in range(5):
                    assert (await login(guesser, f"hw_guess{number}")).status_code == 401
                assert (await login(guesser, "hw_again")).status_code == 429
        async with client_at(stack, "10.0.2.1") as operator:  # no gateway-wide lockout
            assert (await login(operator)).status_code == 303
        async with client_at(stack, "10.0.2.2") as tenant:  # a tenant's key is no guess
            assert (await login(tenant, "demo-key-search-app")).status_code == 403
            assert (await login(tenant, "demo-key-search-app")).status_code == 403
        assert (await call(stack.client, "GET", "/console/api/pools", cookie)).status_code == 200
        assert signins(stack, "not_admin") == 2 and signins(stack, "throttled") == 30
    finally:
        await stack.close()

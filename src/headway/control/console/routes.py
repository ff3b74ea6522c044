"""Every route of the console, each behind its guard (``auth.py``), none in the OpenAPI
document: the console is for people, and its JSON is no contract.

    GET  /console                    → 303 to the first page (or the sign-in form)
    GET  /console/login, POST        the sign-in form, signing in
    POST /console/logout             signing out
    GET  /console/static/{name}      console.js, console.css (no session needed)
    GET  /console/{page}             the shell of each page of ``pages.PAGES``
    GET  /console/api/{page}         the JSON it polls
    POST /console/api/tenants/{name}             a tenant's tier or quota
    POST /console/api/rollouts/{id}/{verb}       pause, resume, abort
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

from headway.billing.prices import PriceBook, default_prices
from headway.control.console import api, costs, writes
from headway.control.console.auth import (
    HOME,
    HTML,
    ConsoleAuth,
    ConsoleHandler,
    redirect,
    sign_in_first,
)
from headway.control.console.history import PoolHistory, pool_reader
from headway.control.console.pages import PAGES, page_html
from headway.control.console.parts import ConsoleParts, QualitySource
from headway.control.console.session import Session, SessionSigner, new_secret
from headway.control.console.signin import SignInOutcome
from headway.control.ledger import LedgerOf
from headway.errors import NotFound
from headway.gateway.auth.checks import KeyChecks
from headway.gateway.openapi import DocumentedRoute, Operation
from headway.gateway.service import GatewayService
from headway.http.asgi import Request, Response, json_response
from headway.http.router import Check, Route

__all__ = ["CONSOLE_SESSION", "ConsoleParts", "parts_of", "routes"]

CONSOLE_SESSION = "console_session"
"""A console session cookie → ``Session``; without one, 401 (a page: the sign-in form)."""

HIDDEN = Operation("The operator console (not part of the API)", "text/html", hidden=True)
FORM_BYTES = 4096
STATIC = {"console.js": "text/javascript; charset=utf-8", "console.css": "text/css; charset=utf-8"}


def parts_of(
    service: GatewayService,
    usage_ledger: LedgerOf,
    prices: PriceBook | None = None,
    history: PoolHistory | None = None,
    count_signin: Callable[[SignInOutcome], None] = lambda outcome: None,
) -> ConsoleParts:
    """The console's parts of ``service``; ``prices``: the price book (default: the
    packaged example prices); ``history``: the pools' samples (default: none yet)."""
    quality: QualitySource | None = service.quality
    return ConsoleParts(
        settings=service.observability.console,
        snapshots=service.snapshots,
        store=service.registry,
        pools=service.pools,
        metrics=service.metrics.registry,
        usage_ledger=usage_ledger,
        history=history
        or PoolHistory(pool_reader(service.pools, service.metrics.shed), service.clock),
        quality=quality,
        prices=prices if prices is not None else default_prices(),
        latency_budget_s=service.settings.admission.latency_budget_ms / 1000,
        wall_clock=service.meter.wall_clock,
        clock=service.clock,
        count_signin=count_signin,
    )


def routes(parts: ConsoleParts, keys: KeyChecks) -> tuple[list[DocumentedRoute], Check]:
    """The console's routes and its session check (``console_session``); a sign-in's key
    goes through ``keys``."""
    settings = parts.settings
    secret = settings.session_secret.encode() or new_secret()
    signer = SessionSigner(secret, settings.session_ttl_s, parts.wall_clock)
    auth = ConsoleAuth(signer, parts.snapshots, keys, parts.wall_clock, parts.count_signin)
    views: dict[str, Callable[[], Awaitable[dict[str, Any]]]] = {
        "pools": _now(lambda: api.pools_view(parts.pools)),
        "admission": _now(lambda: api.admission_view(parts)),
        "tenants": lambda: api.tenants_view(parts),
        "models": lambda: api.models_view(parts),
        "audit": lambda: api.audit_view(parts),
        "economics": lambda: costs.economics_view(parts),
    }
    page: dict[str, Any] = {"auth": CONSOLE_SESSION, "render_error": sign_in_first}
    served = [
        Route("GET", "/console", "console", auth.page(_home), **page),
        Route("GET", "/console/login", "console_login_form", auth.login_form),
        Route("POST", "/console/login", "console_login", auth.login, FORM_BYTES),
        Route("POST", "/console/logout", "console_logout", auth.logout, FORM_BYTES),
        Route("GET", "/console/static/{name}", "console_static", auth.public(_static())),
        *(
            Route("GET", f"/console/{name}", f"console_{name}", auth.page(_shell(name)), **page)
            for name in PAGES
        ),
        *(
            Route(
                "GET",
                f"/console/api/{name}",
                f"console_api_{name}",
                auth.api(_json(view)),
                auth=CONSOLE_SESSION,
            )
            for name, view in views.items()
        ),
        Route(
            "POST",
            "/console/api/tenants/{name}",
            "console_tenant_update",
            auth.write(writes.update_tenant(parts)),
            FORM_BYTES,
            auth=CONSOLE_SESSION,
        ),
        *(
            Route(
                "POST",
                f"/console/api/rollouts/{{id}}/{verb}",
                f"console_rollout_{verb}",
                auth.write(writes.move_rollout(parts, verb)),
                FORM_BYTES,
                auth=CONSOLE_SESSION,
            )
            for verb in writes.MOVES
        ),
    ]
    return [DocumentedRoute(route, HIDDEN) for route in served], auth.session


async def _home(request: Request, session: Session) -> Response:
    return redirect(HOME)


def _shell(page: str) -> ConsoleHandler:
    async def handle(request: Request, session: Session) -> Response:
        return Response(page_html(page, session.key_id, session.csrf), 200, HTML)

    return handle


def _json(view: Callable[[], Awaitable[dict[str, Any]]]) -> ConsoleHandler:
    async def handle(request: Request, session: Session) -> Response:
        return json_response(await view())

    return handle


def _now(view: Callable[[], dict[str, Any]]) -> Callable[[], Awaitable[dict[str, Any]]]:
    async def read() -> dict[str, Any]:
        return view()

    return read


def _static() -> Callable[[Request], Awaitable[Response]]:
    """The console's two files, read once from the package."""
    folder = resources.files("headway.control.console").joinpath("static")
    files = {name: (folder.joinpath(name).read_bytes(), media) for name, media in STATIC.items()}

    async def handle(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in files:
            raise NotFound(f"no console file {name[:40]!r}")
        body, media = files[name]
        return Response(body, 200, media)

    return handle

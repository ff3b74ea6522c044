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
from headway.errors import NotFound
from headway.gateway.console import api, costs, writes
from headway.gateway.console.attempts import SignInAttempts
from headway.gateway.console.auth import HOME, HTML, ConsoleAuth, ConsoleHandler, redirect
from headway.gateway.console.pages import PAGES, page_html
from headway.gateway.console.parts import ConsoleParts, QualitySource
from headway.gateway.console.session import Session, SessionSigner, new_secret
from headway.gateway.openapi import DocumentedRoute, Operation
from headway.gateway.service import GatewayService
from headway.http.asgi import Request, Response, json_response
from headway.http.router import Route

__all__ = ["ConsoleParts", "parts_of", "routes"]

HIDDEN = Operation("The operator console (not part of the API)", "text/html", hidden=True)
FORM_BYTES = 4096
STATIC = {"console.js": "text/javascript; charset=utf-8", "console.css": "text/css; charset=utf-8"}


def parts_of(service: GatewayService, prices: PriceBook | None = None) -> ConsoleParts:
    """The console's parts of ``service``; ``prices``: the price book (default: the
    packaged example prices)."""
    history = service.console_history
    if history is None:
        raise ValueError("the console is off in these settings (observability.console)")
    quality: QualitySource | None = service.quality
    return ConsoleParts(
        settings=service.observability.console,
        snapshots=service.snapshots,
        store=service.registry,
        pools=service.pools,
        metrics=service.metrics.registry,
        usage_ledger=service.usage_ledger,
        history=history,
        quality=quality,
        prices=prices if prices is not None else default_prices(),
        latency_budget_s=service.settings.admission.latency_budget_ms / 1000,
        wall_clock=service.meter.wall_clock,
        clock=service.clock,
        count_signin=service.metrics.console_signin,
    )


def routes(parts: ConsoleParts) -> list[DocumentedRoute]:
    settings = parts.settings
    secret = settings.session_secret.encode() or new_secret()
    signer = SessionSigner(secret, settings.session_ttl_s, parts.wall_clock)
    attempts = SignInAttempts(
        address_failures=settings.signin_address_failures,
        address_window_s=settings.signin_address_window_s,
        gateway_failures=settings.signin_gateway_failures_per_minute,
        max_addresses=settings.signin_tracked_addresses,
        clock=parts.clock,
    )
    auth = ConsoleAuth(signer, parts.snapshots, parts.wall_clock, attempts, parts.count_signin)
    views: dict[str, Callable[[], Awaitable[dict[str, Any]]]] = {
        "pools": _now(lambda: api.pools_view(parts.pools)),
        "admission": _now(lambda: api.admission_view(parts)),
        "tenants": lambda: api.tenants_view(parts),
        "models": lambda: api.models_view(parts),
        "audit": lambda: api.audit_view(parts),
        "economics": lambda: costs.economics_view(parts),
    }
    served = [
        Route("GET", "/console", "console", auth.page(_home)),
        Route("GET", "/console/login", "console_login_form", auth.login_form),
        Route("POST", "/console/login", "console_login", auth.login, FORM_BYTES),
        Route("POST", "/console/logout", "console_logout", auth.logout, FORM_BYTES),
        Route("GET", "/console/static/{name}", "console_static", auth.public(_static())),
        *(
            Route("GET", f"/console/{page}", f"console_{page}", auth.page(_shell(page)))
            for page in PAGES
        ),
        *(
            Route("GET", f"/console/api/{page}", f"console_api_{page}", auth.api(_json(view)))
            for page, view in views.items()
        ),
        Route(
            "POST",
            "/console/api/tenants/{name}",
            "console_tenant_update",
            auth.write(writes.update_tenant(parts)),
            FORM_BYTES,
        ),
        *(
            Route(
                "POST",
                f"/console/api/rollouts/{{id}}/{verb}",
                f"console_rollout_{verb}",
                auth.write(writes.move_rollout(parts, verb)),
                FORM_BYTES,
            )
            for verb in writes.MOVES
        ),
    ]
    return [DocumentedRoute(route, HIDDEN) for route in served]


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
    folder = resources.files("headway.gateway.console").joinpath("static")
    files = {name: (folder.joinpath(name).read_bytes(), media) for name, media in STATIC.items()}

    async def handle(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in files:
            raise NotFound(f"no console file {name[:40]!r}")
        body, media = files[name]
        return Response(body, 200, media)

    return handle

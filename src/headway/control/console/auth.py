"""Signing in and out of the console, and the guard in front of everything else.

``POST /console/login`` checks an admin API key as the API does (``authenticate``: digest,
constant-time compare, expiry) and answers a session cookie that is ``HttpOnly``,
``SameSite=Strict``, ``Path=/console``, and ``Secure`` when the request came over https (TLS, or
a trusted proxy's ``X-Forwarded-Proto``); a tenant key (403) or a wrong one (401) gets no
cookie. The key goes through the gateway's one failed-key limiter (``gateway/auth/``), per
client address and per key prefix, never for the whole gateway, so a flood of wrong keys from
elsewhere never locks an operator out; refused, it gets 429 before its key is checked, and the
limiter logs the lockout once, with the address, never the key.

Every other console route declares ``console_session``: the edge runs ``session`` before the
body is read, which sets the security headers (error answers get them too) and refuses a
request without a valid session; ``write`` also requires a same-site request (``same_origin``)
and the session's CSRF token (403). A session is valid while its signature checks, it has not
expired, and its key id is a live admin key of the current registry snapshot: revoking the key
ends its sessions (here at the snapshot reload, on other gateways within ``registry_poll_s``).
There is no session table: signing out clears the cookie; a copy stays good until it expires.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from urllib.parse import parse_qs, urlsplit

from headway.control.console.pages import login_html
from headway.control.console.session import Session, SessionSigner
from headway.control.console.signin import SignInOutcome
from headway.errors import AuthThrottled, Forbidden, HeadwayError, InvalidRequest, Unauthorized
from headway.gateway.auth.checks import KeyChecks
from headway.gateway.snapshots import Snapshots
from headway.http.asgi import Handler, Request, Response, error_response
from headway.http.client_address import request_scheme
from headway.registry.model import Snapshot

log = logging.getLogger(__name__)

SESSION_COOKIE = "headway_console"
LOGIN_COOKIE = "headway_console_login"
HOME = "/console/pools"
LOGIN = "/console/login"
FORM = "application/x-www-form-urlencoded"
HTML = "text/html; charset=utf-8"

SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; "
        "object-src 'none'"
    ),
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
    "x-content-type-options": "nosniff",
}

ConsoleHandler = Callable[[Request, Session], Awaitable[Response]]


class ConsoleAuth:
    def __init__(
        self,
        signer: SessionSigner,
        snapshots: Snapshots,
        keys: KeyChecks,
        clock: Callable[[], float] = time.time,
        count: Callable[[SignInOutcome], None] = lambda outcome: None,
    ) -> None:
        """``keys``: the gateway's key checks (a sign-in's key goes through their limiter);
        ``clock``: wall-clock seconds (key expiry); ``count``: told how each sign-in ended."""
        self.signer = signer
        self._snapshots = snapshots
        self._keys = keys
        self._clock = clock
        self._count = count
        self._admins: tuple[Snapshot, frozenset[str]] | None = None

    # the check the edge runs, and the guards ---------------------------------------

    async def session(self, request: Request) -> Session:
        """``console_session``: the request's session, before its body is read."""
        request.response_headers.update(SECURITY_HEADERS)
        session = self.session_of(request)
        if session is None:
            raise Unauthorized(f"no console session: sign in at {LOGIN}")
        return session

    def public(self, handler: Handler) -> Handler:
        async def handle(request: Request) -> Response:
            request.response_headers.update(SECURITY_HEADERS)
            return await handler(request)

        return handle

    def page(self, handler: ConsoleHandler) -> Handler:
        async def handle(request: Request) -> Response:
            return await handler(request, session_found(request))

        return handle

    api = page

    def write(self, handler: ConsoleHandler) -> Handler:
        async def handle(request: Request) -> Response:
            session = session_found(request)
            if not same_origin(request):
                raise Forbidden("the request's Origin is not this console's")
            if not self.signer.csrf_ok(session, csrf_of(request)):
                raise Forbidden("missing or wrong CSRF token: reload the page")
            return await handler(request, session)

        return handle

    def session_of(self, request: Request) -> Session | None:
        value = cookies(request).get(SESSION_COOKIE)
        session = None if value is None else self.signer.verify(value)
        if session is None or session.key_id not in self._live_admins():
            return None
        return session

    def _live_admins(self) -> frozenset[str]:
        """The ids of the admin keys the current snapshot accepts (kept per snapshot)."""
        snapshot, now = self._snapshots.current, self._clock()
        cached = self._admins
        if cached is None or cached[0] is not snapshot:
            ids = frozenset(
                p.key_id
                for p in snapshot.principals.values()
                if p.role == "admin" and (p.expires_at is None or p.expires_at > now)
            )
            cached = self._admins = (snapshot, ids)
        return cached[1]

    # sign-in and sign-out -------------------------------------------------------

    async def login_form(self, request: Request) -> Response:
        request.response_headers.update(SECURITY_HEADERS)
        if self.session_of(request) is not None:
            return redirect(HOME)
        return self._form(request, 200)

    async def login(self, request: Request) -> Response:
        request.response_headers.update(SECURITY_HEADERS)
        form = form_of(request)
        if not same_origin(request) or not self.signer.login_ok(
            cookies(request).get(LOGIN_COOKIE), _one(form, "csrf")
        ):
            self._count("bad_form")
            return self._form(request, 403, "The sign-in form expired or came from elsewhere.")
        key = _one(form, "key")
        if not key:  # no key guesses nothing: not a failure
            self._count("bad_key")
            return self._form(request, 401, "That key is not valid.")
        try:
            principal = await self._keys.principal(request, key)
        except AuthThrottled as refused:
            self._count("throttled")
            return self._throttled(request, refused)
        except HeadwayError:
            self._count("bad_key")
            return self._form(request, 401, "That key is not valid.")
        if principal.role != "admin":
            self._count("not_admin")
            return self._form(request, 403, "A tenant's key cannot sign in: use an admin key.")
        self._count("ok")
        value = self.signer.issue(principal.key_id)
        cookie = self._cookie(request, SESSION_COOKIE, value, "/console", self.signer.ttl_s)
        return redirect(HOME, cookie)

    async def logout(self, request: Request) -> Response:
        request.response_headers.update(SECURITY_HEADERS)
        session = self.session_of(request)
        if session is not None and not (
            same_origin(request) and self.signer.csrf_ok(session, csrf_of(request))
        ):
            raise Forbidden("missing or wrong CSRF token: reload the page")
        return redirect(LOGIN, self._cookie(request, SESSION_COOKIE, "", "/console", 0))

    def _form(self, request: Request, status: int, error: str = "") -> Response:
        """The form with a fresh login token, its cookie beside it."""
        value, token = self.signer.issue_login()
        cookie = self._cookie(request, LOGIN_COOKIE, value, LOGIN, 600)
        return Response(login_html(token, error), status, HTML, {"set-cookie": cookie})

    def _throttled(self, request: Request, refused: AuthThrottled) -> Response:
        """429: the form again, saying when to come back."""
        retry_after = max(1, round((refused.retry_after_s or 1) + 0.499))
        error = f"Too many failed key checks from your address: try again in {_wait(retry_after)}."
        answer = self._form(request, 429, error)
        answer.headers["retry-after"] = str(retry_after)
        return answer

    def _cookie(self, request: Request, name: str, value: str, path: str, max_age: int) -> str:
        """``Secure`` when the client came over https (to us, or to a trusted proxy)."""
        scheme = request_scheme(request.scope, request.headers, self._keys.trusted)
        secure = "; Secure" if scheme == "https" else ""
        return f"{name}={value}; Path={path}; Max-Age={max_age}; HttpOnly; SameSite=Strict{secure}"


def session_found(request: Request) -> Session:
    """The session the edge found (``console_session``)."""
    session = request.caller
    if not isinstance(session, Session):
        raise TypeError(f"route {request.route!r} declares no console session")
    return session


def sign_in_first(exc: HeadwayError) -> Response:
    """A page's errors: without a session, the sign-in form (303); others as JSON."""
    if isinstance(exc, Unauthorized):
        return redirect(LOGIN)
    return error_response(exc)


def redirect(location: str, cookie: str | None = None) -> Response:
    headers = {"location": location}
    if cookie is not None:
        headers["set-cookie"] = cookie
    return Response(b"", 303, HTML, headers)


def cookies(request: Request) -> dict[str, str]:
    """The request's cookies by name (the first of a repeated name)."""
    found: dict[str, str] = {}
    for pair in request.headers.get("cookie", "").split(";"):
        name, sep, value = pair.strip().partition("=")
        if sep:
            found.setdefault(name, value.strip('"'))
    return found


MAX_FORM_FIELDS = 20


def form_of(request: Request) -> dict[str, list[str]]:
    """A form-encoded body's fields (nothing for another media type)."""
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media != FORM:
        return {}
    try:
        return parse_qs(request.body.decode("utf-8", "replace"), max_num_fields=MAX_FORM_FIELDS)
    except ValueError:  # parse_qs's way of saying there were more fields
        raise InvalidRequest(
            f"the form has more than {MAX_FORM_FIELDS} fields; the console's have a few"
        ) from None


def csrf_of(request: Request) -> str | None:
    header = request.headers.get("x-csrf-token")
    return header if header is not None else _one(form_of(request), "csrf")


def same_origin(request: Request) -> bool:
    """Not sent from another site, as far as the browser says.

    ``Sec-Fetch-Site``, where sent (Chromium and Firefox, to https and localhost), must be
    ``same-origin``. ``Origin``, where sent with a value, must be this host. Under
    ``Referrer-Policy: no-referrer`` browsers send ``Origin: null`` for this console's own
    forms and fetches, so ``null`` decides nothing: the token does.
    """
    site = request.headers.get("sec-fetch-site")
    if site is not None and site != "same-origin":
        return False
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return True
    host = request.headers.get("host", "")
    try:
        netloc = urlsplit(origin).netloc
    except ValueError:  # not a URL at all ("http://[::1", say)
        return False
    return bool(host) and netloc == host


def _wait(seconds: int) -> str:
    """``seconds`` for people: "42 s", "15 minutes"."""
    if seconds < 60:
        return f"{seconds} s"
    minutes = -(-seconds // 60)
    return f"{minutes} minute{'s' if minutes > 1 else ''}"


def _one(form: dict[str, list[str]], name: str) -> str | None:
    values = form.get(name)
    return values[0] if values and len(values) == 1 else None

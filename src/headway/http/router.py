"""Routes by path, each with a name: the label its answers are counted under.

A route's path is exact (``/v1/embeddings``) or a template whose ``{name}`` segments
each match one non-empty path segment without a NUL (``/admin/tenants/{name}/keys``; no id
or name holds one, and a lookup of one fails in Postgres, which cannot store it). Exact paths
are one dict lookup, so the model endpoints pay nothing for templates; only a path
that is not exact is matched against the templates, segment by segment, among those
with as many segments, literal segments preferred over parameters from the left
(``/admin/rollouts/active`` would win over ``/admin/rollouts/{id}``). A route's name
is fixed by its template, never by the values in a path: metrics labels stay bounded.

An unknown path is a 404 and a known path with another method a 405; both are
raised here, inside the edge, so they are answered and counted like any other.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field

from headway.errors import HeadwayError, MethodNotAllowed, NotFound
from headway.http.asgi import NO_PARAMS, Handler, Request, Response

UNMATCHED = "unmatched"
"""The route label of a request whose path matches no route (bounded, unlike the path)."""

Check = Callable[[Request], Awaitable[object]]
"""How a route's caller is identified from the headers alone: what it answers becomes
``request.caller``; a refusal is raised (401, 403, 429)."""
HeaderCheck = Callable[[Mapping[str, str]], None]
"""A check of the request's headers alone (the media type: 415)."""


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    path: str
    """Exact, or a template with ``{parameter}`` segments."""
    name: str
    handler: Handler
    max_body_bytes: int | None = None
    """The largest body this route reads (a file upload's); None: the edge's default."""
    streams_body: bool = False
    """The handler reads the body itself as it arrives (``asgi.body_chunks``: an upload
    streamed to disk, its limits enforced as it reads); the edge reads none of it."""
    render_error: Callable[[HeadwayError], Response] | None = None
    """How this route's errors are written (another API's error format: TEI's, the
    console's sign-in page for its 401); None: the one table's JSON
    (``asgi.error_response``)."""
    auth: str | None = None
    """How its caller is identified: the name of a ``Check`` the edge was given (a tenant's
    key, an admin key, a token, a console session), run before anything of the body is
    read; None: anyone may call it."""
    accepts: HeaderCheck | None = None
    """Its body's media type, checked before the body is read (None: not checked there)."""


def parameters_of(path: str) -> list[str]:
    """The parameter names of a template, in order (none for an exact path)."""
    return [segment[1:-1] for segment in path.split("/") if _is_parameter(segment)]


def _is_parameter(segment: str) -> bool:
    return len(segment) > 2 and segment[0] == "{" and segment[-1] == "}"


@dataclass(frozen=True, slots=True)
class _Template:
    segments: tuple[str | None, ...]
    """A literal segment, or None where a parameter goes."""
    names: tuple[str, ...]
    methods: dict[str, Route] = field(default_factory=dict)

    def match(self, parts: list[str]) -> dict[str, str] | None:
        values: list[str] = []
        for literal, part in zip(self.segments, parts, strict=True):
            if literal is None:
                if not part or "\x00" in part:
                    return None
                values.append(part)
            elif literal != part:
                return None
        return dict(zip(self.names, values, strict=True))


class Router:
    def __init__(self, routes: Iterable[Route] = ()) -> None:
        self._exact: dict[str, dict[str, Route]] = {}
        self._templates: dict[str, _Template] = {}
        self._by_length: dict[int, list[_Template]] = {}
        for route in routes:
            self.add(route)

    def add(self, route: Route) -> None:
        names = parameters_of(route.path)
        if not names:
            self._exact.setdefault(route.path, {})[route.method] = route
            return
        template = self._templates.get(route.path)
        if template is None:
            segments = tuple(
                None if _is_parameter(segment) else segment for segment in route.path.split("/")
            )
            template = _Template(segments, tuple(names))
            self._templates[route.path] = template
            same_length = self._by_length.setdefault(len(segments), [])
            same_length.append(template)
            # Literal segments before parameters, from the left: the most specific wins.
            same_length.sort(key=lambda t: tuple(s is None for s in t.segments))
        template.methods[route.method] = route

    def routes(self) -> list[Route]:
        tables = [*self._exact.values(), *(t.methods for t in self._templates.values())]
        return [route for methods in tables for route in methods.values()]

    def match(self, method: str, path: str) -> tuple[Route, Mapping[str, str]]:
        """The route for ``method path`` and its path parameters; ``NotFound`` or
        ``MethodNotAllowed`` (with the path's name on it, so a 405 is counted under the
        route it was aimed at)."""
        methods, params = self._methods(path)
        if methods is None:
            raise NotFound(f"no route for {path}")
        route = methods.get(method)
        if route is None:
            allowed = ", ".join(sorted(methods))
            raise MethodNotAllowed(f"{method} is not allowed on {path}", headers={"allow": allowed})
        return route, params

    def resolve(self, method: str, path: str) -> Route:
        return self.match(method, path)[0]

    def name_of(self, path: str) -> str:
        """The label for answers about ``path``, whatever the method."""
        methods, _ = self._methods(path)
        return next(iter(methods.values())).name if methods else UNMATCHED

    def _methods(self, path: str) -> tuple[dict[str, Route] | None, Mapping[str, str]]:
        methods = self._exact.get(path)
        if methods is not None or not self._templates:
            return methods, NO_PARAMS
        parts = path.split("/")
        for template in self._by_length.get(len(parts), ()):
            params = template.match(parts)
            if params is not None:
                return template.methods, params
        return None, NO_PARAMS

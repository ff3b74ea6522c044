"""Exact-path routes, each with a name: the label its answers are counted under.

An unknown path is a 404 and a known path with another method a 405; both are
raised here, inside the edge, so they are answered and counted like any other.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from headway.errors import MethodNotAllowed, NotFound
from headway.http.asgi import Handler

UNMATCHED = "unmatched"
"""The route label of a request whose path matches no route (bounded, unlike the path)."""


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    path: str
    name: str
    handler: Handler


class Router:
    def __init__(self, routes: Iterable[Route] = ()) -> None:
        self._routes: dict[str, dict[str, Route]] = {}
        for route in routes:
            self.add(route)

    def add(self, route: Route) -> None:
        self._routes.setdefault(route.path, {})[route.method] = route

    def routes(self) -> list[Route]:
        return [route for methods in self._routes.values() for route in methods.values()]

    def resolve(self, method: str, path: str) -> Route:
        """The route for ``method path``; ``NotFound`` or ``MethodNotAllowed`` (with the path's
        name on it, so a 405 is counted under the route it was aimed at)."""
        methods = self._routes.get(path)
        if methods is None:
            raise NotFound(f"no route for {path}")
        route = methods.get(method)
        if route is None:
            allowed = ", ".join(sorted(methods))
            raise MethodNotAllowed(f"{method} is not allowed on {path}", headers={"allow": allowed})
        return route

    def name_of(self, path: str) -> str:
        """The label for answers about ``path``, whatever the method."""
        methods = self._routes.get(path)
        return next(iter(methods.values())).name if methods else UNMATCHED

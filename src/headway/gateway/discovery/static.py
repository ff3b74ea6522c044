"""A pool whose replicas are a fixed list of base URLs (``--embed-urls``)."""

from __future__ import annotations

from collections.abc import Iterable


class StaticDiscovery:
    def __init__(self, urls: Iterable[str]) -> None:
        self._urls = [url.rstrip("/") for url in urls]

    async def addresses(self) -> list[str]:
        return list(self._urls)

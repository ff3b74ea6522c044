"""The seam between the gateway and its replicas.

A transport sends one ``UpstreamRequest`` and returns the ``Reply``, whatever its
status; it raises only when no reply came: ``ConnectFailed`` (no connection could be
made: the replica is down or gone), ``TransportTimeout`` (no reply in time), or
``TransportError`` itself (the connection broke mid-call).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class TransportError(Exception):
    """The replica could not be reached, or the connection broke mid-call."""


class ConnectFailed(TransportError):
    """No connection could be made: the replica is down or gone."""


class TransportTimeout(TransportError):
    """The call did not finish within its timeout."""


@dataclass(slots=True)
class UpstreamRequest:
    """One call to a replica: ``base_url`` names the replica, ``path`` the endpoint."""

    method: str
    base_url: str
    path: str
    timeout_s: float
    body: bytes = b""
    content_type: str = ""
    traceparent: str | None = None
    """W3C ``traceparent`` to send: the caller's span in the request's trace."""

    @property
    def url(self) -> str:
        return self.base_url + self.path


@dataclass(slots=True)
class Reply:
    status: int
    body: bytes
    headers: dict[str, str]
    """Names in lower case."""


class Transport(Protocol):
    async def send(self, request: UpstreamRequest) -> Reply: ...

    async def close(self) -> None: ...

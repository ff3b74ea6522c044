"""Open connections counted per process and per client address; a refusal beyond a cap.

``admit`` either counts a new connection against both caps or names the cap it would
break; ``release`` gives the slot back when the connection closes. Invariants: ``open``
is the sum of every client's count and never exceeds ``max_connections``; no client's
count exceeds ``max_per_client`` but an exempt one's (a trusted proxy speaks for many
clients and enforces its own per-client limits); a client appears in the table only while
it has a connection open, so the table is bounded by the open connections, not by every
address ever seen.
"""

from __future__ import annotations

from typing import Literal

Refusal = Literal[
    "max_connections",
    "max_connections_per_client",
    "max_header_bytes",
    "tls_handshake",
    "tls_identity",
]
"""Why the edge refused a connection: a cap here, or (``http/guard.py``) headers too large,
or a TLS handshake that failed (not TLS, a protocol or certificate the server refuses, or
a client that left in the middle), or a client certificate of a role the listener does not
serve (``tls_identity``)."""
REFUSALS: tuple[Refusal, ...] = (
    "max_connections",
    "max_connections_per_client",
    "max_header_bytes",
    "tls_handshake",
    "tls_identity",
)


class ConnectionCaps:
    def __init__(self, max_connections: int, max_per_client: int) -> None:
        if max_connections < 1 or max_per_client < 1:
            raise ValueError("connection caps must be at least 1")
        self.max_connections = max_connections
        self.max_per_client = max_per_client
        self._open = 0
        self._by_client: dict[str, int] = {}

    @property
    def open(self) -> int:
        """Connections admitted and not yet released."""
        return self._open

    def open_from(self, client: str) -> int:
        return self._by_client.get(client, 0)

    @property
    def clients(self) -> int:
        """Addresses with at least one connection open."""
        return len(self._by_client)

    def admit(self, client: str, *, exempt: bool = False) -> Refusal | None:
        """Count a new connection from ``client``; or, over a cap, the cap (nothing counted).
        ``exempt``: only the process cap applies (a trusted proxy).

        The process cap is checked first: when the process is full, that is the reason,
        whoever asks."""
        if self._open >= self.max_connections:
            return "max_connections"
        held = self._by_client.get(client, 0)
        if held >= self.max_per_client and not exempt:
            return "max_connections_per_client"
        self._by_client[client] = held + 1
        self._open += 1
        return None

    def release(self, client: str) -> None:
        """Give back a slot ``admit`` granted to ``client``."""
        held = self._by_client.get(client, 0)
        if held < 1:
            raise ValueError("release without a matching admit")
        if held == 1:
            del self._by_client[client]
        else:
            self._by_client[client] = held - 1
        self._open -= 1

"""What the edge guard reports: connections refused by cap, timed out by phase, and open.

``ConnectionObserver`` is the seam; ``NoConnectionObserver`` the default where a process
has no /metrics, ``ConnectionMetrics`` the Prometheus one, registered in the process's
own registry so it shows on that process's /metrics.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge

from headway.http.connection_caps import REFUSALS, Refusal

TimeoutPhase = Literal["handshake", "headers", "body", "idle"]
TIMEOUT_PHASES: tuple[TimeoutPhase, ...] = ("handshake", "headers", "body", "idle")


class ConnectionObserver(Protocol):
    def refused(self, reason: Refusal) -> None: ...

    def timed_out(self, phase: TimeoutPhase) -> None: ...


class NoConnectionObserver:
    def refused(self, reason: Refusal) -> None:
        pass

    def timed_out(self, phase: TimeoutPhase) -> None:
        pass


class ConnectionMetrics:
    """``headway_connections_refused_total{reason}``, ``headway_connections_timed_out_total
    {phase}`` and ``headway_open_connections`` (read from ``open_connections`` at scrape
    time). Every label value is there from the start, at zero."""

    def __init__(self, registry: CollectorRegistry, open_connections: Callable[[], int]) -> None:
        refused = Counter(
            "headway_connections_refused_total",
            "Connections closed at once, by the limit they would have broken "
            "(max_connections: the process; max_connections_per_client: the client address; "
            "max_header_bytes: a request line and headers larger than allowed, answered 431; "
            "tls_handshake: a TLS handshake that failed; tls_identity: a client certificate "
            "of a role this listener does not serve).",
            ["reason"],
            registry=registry,
        )
        timed_out = Counter(
            "headway_connections_timed_out_total",
            "Connections closed by the server for taking too long, by phase (handshake: TLS "
            "not done within header_timeout_s; headers: the request line and headers not in "
            "within header_timeout_s; body: a request body slower than body_min_rate_bytes_s "
            "after body_timeout_s, answered 408; idle: kept alive longer than idle_timeout_s "
            "without a request).",
            ["phase"],
            registry=registry,
        )
        self._refused = {reason: refused.labels(reason) for reason in REFUSALS}
        self._timed_out = {phase: timed_out.labels(phase) for phase in TIMEOUT_PHASES}
        gauge = Gauge(
            "headway_open_connections",
            "Client connections this process holds open.",
            registry=registry,
        )
        gauge.set_function(lambda: float(open_connections()))

    def refused(self, reason: Refusal) -> None:
        self._refused[reason].inc()

    def timed_out(self, phase: TimeoutPhase) -> None:
        self._timed_out[phase].inc()

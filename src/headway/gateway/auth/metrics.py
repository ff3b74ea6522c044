"""What the failed-authentication limiter reports, on the gateway's /metrics."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from headway.gateway.auth.store import SUBJECT_KINDS, SubjectKind

MODES = ("embedded", "redis", "local")


class AuthMetrics:
    """``headway_auth_failures_total``, ``headway_auth_refused_total{subject}``,
    ``headway_auth_lockouts_total{subject}`` and ``headway_auth_limiter_mode{mode}``. Every
    label value is there from the start, at zero."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._failures = Counter(
            "headway_auth_failures_total",
            "Key and token checks that failed (a key that matches nothing or has expired), "
            "each counted against its client address and its key prefix.",
            registry=registry,
        )
        refused = Counter(
            "headway_auth_refused_total",
            "Requests refused (429) before their key was checked, by the lockout that refused "
            "them: address (too many failures from the client address) or key_prefix (from "
            "any address, for keys beginning alike).",
            ["subject"],
            registry=registry,
        )
        locked = Counter(
            "headway_auth_lockouts_total",
            "Failures that locked a subject out (address or key_prefix).",
            ["subject"],
            registry=registry,
        )
        self._mode = Gauge(
            "headway_auth_limiter_mode",
            "1 for where failed key checks are counted now: embedded (this gateway, no Redis "
            "configured), redis (shared), local (Redis configured but away: this gateway alone).",
            ["mode"],
            registry=registry,
        )
        self._refused = {kind: refused.labels(kind) for kind in SUBJECT_KINDS}
        self._locked = {kind: locked.labels(kind) for kind in SUBJECT_KINDS}

    def failed(self) -> None:
        self._failures.inc()

    def refused(self, subject: SubjectKind) -> None:
        self._refused[subject].inc()

    def locked(self, subject: SubjectKind) -> None:
        self._locked[subject].inc()

    def mode(self, mode: str) -> None:
        for each in MODES:
            self._mode.labels(each).set(1 if each == mode else 0)

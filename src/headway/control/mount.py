"""What one part of the control plane adds to the gateway's app, and nothing else.

The composition root (``headway/app/build.py``) lists the mounts; the data plane
(``headway/gateway/``) knows none of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from headway.background import Step
from headway.gateway.openapi import DocumentedRoute
from headway.http.asgi import Hook
from headway.http.router import Check


@dataclass(frozen=True, slots=True)
class Loop:
    """A periodic step, run (and stopped) with the gateway service's own loops."""

    name: str
    interval_s: float
    step: Step


@dataclass(frozen=True, slots=True)
class Mount:
    routes: Sequence[DocumentedRoute]
    checks: Mapping[str, Check] = field(default_factory=dict)
    """The caller checks its routes declare beyond the gateway's own (a console session)."""
    loops: Sequence[Loop] = ()
    on_startup: Sequence[Hook] = ()
    """Run once the service has started, in order."""
    on_shutdown: Sequence[Hook] = ()
    """Run after the service has stopped."""

"""What the console reads, and nothing else: the parts of the gateway it is built from."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from prometheus_client import CollectorRegistry

from headway.billing.prices import PriceBook
from headway.control.console.history import PoolHistory
from headway.control.console.signin import SignInOutcome
from headway.control.ledger import LedgerOf
from headway.gateway.pools import Pools
from headway.gateway.snapshots import Snapshots
from headway.registry.store import RegistryStore
from headway.settings import ConsoleSettings


class VersionQuality(Protocol):
    """One version's output quality, as the quality monitor summarises it."""

    @property
    def version(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def reference_rows(self) -> int: ...
    @property
    def window_rows(self) -> int: ...
    @property
    def mean_norm(self) -> float | None: ...
    @property
    def centroid_drift(self) -> float | None: ...
    @property
    def mmd(self) -> float | None: ...
    @property
    def mmd_p_value(self) -> float | None: ...
    @property
    def score_ks_p_value(self) -> float | None: ...
    @property
    def drifting(self) -> bool: ...
    @property
    def traffic(self) -> str:
        """Where its rows came from: served, shadow (a candidate's copies), or both."""


class QualitySource(Protocol):
    def summary(self) -> Sequence[VersionQuality]: ...


@dataclass(frozen=True, slots=True)
class ConsoleParts:
    settings: ConsoleSettings
    snapshots: Snapshots
    store: RegistryStore
    pools: Pools
    metrics: CollectorRegistry
    usage_ledger: LedgerOf
    history: PoolHistory
    quality: QualitySource | None = None
    """None: no quality monitor in this gateway (the Models page says so)."""
    prices: PriceBook | None = None
    """The price book revenue is read from (None: the Economics page shows cost only)."""
    latency_budget_s: float = 0.5
    wall_clock: Callable[[], float] = time.time
    clock: Callable[[], float] = time.monotonic
    """Monotonic seconds: the windows failed sign-ins are counted in."""
    count_signin: Callable[[SignInOutcome], None] = lambda outcome: None
    """Told how each ``POST /console/login`` ended (the gateway's metrics)."""

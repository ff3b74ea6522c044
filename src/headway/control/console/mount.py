"""The console as one mount: its routes and session check, its sign-in counter, and the
loop that samples each pool's admission state for its charts."""

from __future__ import annotations

from headway.billing.prices import PriceBook
from headway.control.console.history import INTERVAL_S, PoolHistory, pool_reader
from headway.control.console.routes import CONSOLE_SESSION, parts_of, routes
from headway.control.console.signin import SignInCounter
from headway.control.ledger import LedgerOf
from headway.control.mount import Loop, Mount
from headway.gateway.auth.checks import KeyChecks
from headway.gateway.service import GatewayService


def console_mount(
    service: GatewayService, keys: KeyChecks, ledger: LedgerOf, prices: PriceBook | None = None
) -> Mount:
    history = PoolHistory(pool_reader(service.pools, service.metrics.shed), service.clock)
    signins = SignInCounter(service.metrics.registry)
    parts = parts_of(service, ledger, prices, history, signins.count)
    documented, session = routes(parts, keys)
    return Mount(
        documented,
        {CONSOLE_SESSION: session},
        loops=[Loop("console_history", INTERVAL_S, history.sample)],
    )

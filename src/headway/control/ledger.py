"""The usage ledger that ``/v1/usage``, ``/admin/usage`` and the console read, opened in the
background: serving does not need it, and its database may come up after the gateway, so
its readers answer 503 until it opens (``LedgerOf`` is None until then)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from headway.billing.ledger.base import Ledger
from headway.control.mount import Loop, Mount

log = logging.getLogger(__name__)

RETRY_S = 5.0

LedgerOf = Callable[[], Ledger | None]
"""The ledger when the gateway has one open (None: not configured, or not yet open)."""


class UsageLedger:
    """``open_ledger`` None: no ledger configured (its readers always answer 503)."""

    def __init__(self, open_ledger: Callable[[], Awaitable[Ledger]] | None = None) -> None:
        self._open = open_ledger
        self._ledger: Ledger | None = None

    def __call__(self) -> Ledger | None:
        return self._ledger

    async def try_open(self) -> bool:
        """Open it if it is not; False while its database refuses (logged each time)."""
        if self._ledger is not None or self._open is None:
            return True
        try:
            self._ledger = await self._open()
        except Exception as exc:
            log.warning("usage ledger not open (%s); /v1/usage answers 503 until it is", exc)
            return False
        log.info("usage ledger open")
        return True

    async def close(self) -> None:
        ledger, self._ledger = self._ledger, None
        if ledger is not None:
            await ledger.close()


def ledger_mount(ledger: UsageLedger) -> Mount:
    """Tried at start, then every ``RETRY_S`` until it opens (a no-op once open)."""

    async def first_try() -> None:
        await ledger.try_open()

    return Mount(
        [],
        loops=[Loop("usage_ledger_open", RETRY_S, ledger.try_open)],
        on_startup=[first_try],
        on_shutdown=[ledger.close],
    )

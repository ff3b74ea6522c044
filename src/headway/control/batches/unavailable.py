"""The Batch API's answer while its store is away: 503 ``store_unavailable``, at one place.

Every route of ``/v1/files`` and ``/v1/batches`` reads or writes the batch store, and the
store turns its database's failures (Postgres refusing connections or lost mid-call,
psycopg's ``OperationalError``; the SQLite file locked past its timeout) into
``BatchStoreUnavailable`` at its own boundary (``batches/sql.py``). Here that becomes the
one client error for it, ``StoreUnavailable`` (503 with ``Retry-After``), for every route
at once (``guarded``, applied where the routes are listed), so no route answers a 500
while Postgres restarts, and a route added later is covered without a line of its own.
Nothing was changed by a call refused this way: the store's writes are transactions.
"""

from __future__ import annotations

from dataclasses import replace

from headway.batches.store import BatchStoreUnavailable
from headway.errors import StoreUnavailable
from headway.gateway.openapi import DocumentedRoute
from headway.http.asgi import Handler, Request, Response

RETRY_AFTER_S = 2.0
"""What a client is told to wait: a Postgres restart or failover takes seconds."""


def guarded(documented: DocumentedRoute) -> DocumentedRoute:
    """The route, answering ``StoreUnavailable`` when its store is away, and documented so."""
    route, operation = documented.route, documented.operation
    errors = operation.errors
    if StoreUnavailable not in errors:
        errors = (*errors, StoreUnavailable)
    return DocumentedRoute(
        replace(route, handler=_answering_503(route.handler)),
        replace(operation, errors=errors),
    )


def _answering_503(handler: Handler) -> Handler:
    async def handle(request: Request) -> Response:
        try:
            return await handler(request)
        except BatchStoreUnavailable as exc:
            # The message names no input and no database detail (an address, a user);
            # the store's own error stays the cause, for the log.
            raise StoreUnavailable(
                "the batch store cannot be reached now; nothing was changed, retry later",
                retry_after_s=RETRY_AFTER_S,
            ) from exc

    return handle

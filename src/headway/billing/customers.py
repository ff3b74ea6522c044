"""The export's customers, read from the registry once a run (``export.Customers``).

The registry is a synchronous store (SQLite or psycopg), so it is read on a thread:
the consumer's event loop keeps consuming meanwhile.
"""

from __future__ import annotations

import asyncio

from headway.billing.export import Customers
from headway.settings import Settings


def read_customers(settings: Settings) -> Customers:
    from headway.registry.open import open_registry

    registry = open_registry(settings)
    try:
        ids = registry.billing_customers()
    finally:
        registry.close()
    return Customers(ids, fall_back_to_name=settings.billing.export_unmapped == "tenant_name")


async def customers_of(settings: Settings) -> Customers:
    return await asyncio.to_thread(read_customers, settings)

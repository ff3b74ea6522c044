"""What every admin route shares: the admin key, the store off the event loop, refreshes.

Every admin route declares ``admin_key`` (``gateway/auth/``): the edge refuses a tenant's
key (403), no key or a wrong one (401, counted by the failed-key limiter) and a locked-out
address (429) before anything else is looked at, the body included. Registry calls are
synchronous (SQLite, Postgres) and run in a thread; a refusal comes back as the client
error ``refusals`` maps it to.
After a write this gateway reloads its snapshot at once, so a revoked key is refused
on the next request here; other gateways see the change counter move and reload.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from headway.control.admin.refusals import refusal
from headway.errors import (
    Forbidden,
    HeadwayError,
    InvalidRequest,
    NotFound,
    RegistryUnavailable,
    Unauthorized,
    UnsupportedMediaType,
    ValidationFailed,
)
from headway.gateway.query import decimal, one_each
from headway.gateway.snapshots import Snapshots
from headway.gateway.stages.authenticate import key_principal
from headway.http.asgi import Request
from headway.registry.errors import RegistryError
from headway.registry.model import Actor, TenantDeletion
from headway.registry.store import RegistryStore

T = TypeVar("T")

MAX_ID = 2**63 - 1
"""The largest id a registry table holds (a 64-bit signed integer, SQLite's and Postgres's)."""

ADMIN_ONLY: tuple[type[HeadwayError], ...] = (Unauthorized, Forbidden, RegistryUnavailable)
"""What any admin route may answer: the key's refusals, and a registry that is away."""
WITH_BODY: tuple[type[HeadwayError], ...] = (
    InvalidRequest,
    *ADMIN_ONLY,
    UnsupportedMediaType,
    ValidationFailed,
)


async def _nothing_else(deletion: TenantDeletion) -> bool:
    return False


@dataclass(frozen=True, slots=True)
class AdminParts:
    snapshots: Snapshots
    store: RegistryStore
    finish_deletion: Callable[[TenantDeletion], Awaitable[bool]] = _nothing_else
    """Deletes what a deleted tenant left outside the registry (files, batches, cache);
    False: some is left, for the gateways' ``tenant_deletions`` loop
    (``control/tenants.py``)."""


def admin_actor(request: Request) -> Actor:
    """Who is writing, for the audit log: the admin key's id and this request's id."""
    return Actor(key_principal(request).key_id, request.id)


async def read(parts: AdminParts, request: Request, call: Callable[[RegistryStore], T]) -> T:
    """``call`` the store in a thread (the edge has checked the admin key)."""
    return await in_thread(parts.store, call)


async def write(parts: AdminParts, call: Callable[[RegistryStore], T]) -> T:
    """``call`` the store, then reload this gateway's snapshot before answering."""
    result = await in_thread(parts.store, call)
    await parts.snapshots.refresh()
    return result


async def in_thread(store: RegistryStore, call: Callable[[RegistryStore], T]) -> T:
    """``call`` the store in a thread; a refusal becomes the client error it maps to."""
    try:
        return await asyncio.to_thread(call, store)
    except RegistryError as exc:
        error = refusal(exc)
        if error is None:
            raise
        raise error from exc


def path_id(request: Request, name: str = "id") -> int:
    """A numeric path parameter; anything else names no object (404)."""
    value = request.path_params[name]
    number = decimal(value, cap=MAX_ID + 1)
    if number is None or number > MAX_ID:
        raise NotFound(f"no {name} {value[:40]!r}: ids are whole numbers up to {MAX_ID}")
    return number


def query_values(request: Request, allowed: frozenset[str]) -> dict[str, str]:
    """The query's parameters, each given at most once and each one ``allowed`` (else 422)."""
    return one_each(request.query(), allowed)

"""The demo tenants and keys: printed in the README, so anyone who reads it has them.

``headway up`` seeds them into a new embedded data dir only (``SqlRegistry.seed_demo``
refuses a registry that ever held a tenant or a key, and ``up`` never asks a shared
registry), so a first request works in a minute; ``live_demo_keys`` lets every gateway
say loudly at start-up that they still work, until ``headway tenants demo --remove``
removes all four.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from headway.registry.keys import key_digest
from headway.registry.model import ApiKey, Snapshot, Tier, key_id_of
from headway.registry.queries import is_live

DEMO_TENANTS: tuple[tuple[str, Tier, str], ...] = (
    ("search-app", "interactive", "demo-key-search-app"),
    ("support-bot", "interactive", "demo-key-support-bot"),
    ("nightly-index", "batch", "demo-key-nightly-index"),
)
DEMO_ADMIN_KEY = "demo-admin-key"
DEMO_KEYS: tuple[str, ...] = (*(key for _, _, key in DEMO_TENANTS), DEMO_ADMIN_KEY)
"""Every published key: the three tenants' and the operator's."""
DEMO_ADMIN_KEY_ID = key_id_of(key_digest(DEMO_ADMIN_KEY))


def live_demo_keys(snapshot: Snapshot) -> list[str]:
    """The published keys this snapshot still accepts (expired ones are refused anyway)."""
    return [key for key in DEMO_KEYS if key_digest(key) in snapshot.principals]


def demo_key_warning(live: list[str]) -> str:
    """The start-up line while published keys work: which, and how to remove them."""
    return (
        f"{len(live)} demo key(s) from the README are live ({', '.join(live)}): anyone who "
        "read it can call this system with them; remove them with `headway tenants demo "
        "--remove` before it is reachable from outside"
    )


@dataclass(frozen=True, slots=True)
class DemoRemoval:
    """What removing the demo rows takes, decided from the keys each demo name holds."""

    delete_tenants: tuple[str, ...] = ()
    """Demo tenants whose only key is their demo key: deleted with their data."""
    revoke_keys: tuple[str, ...] = ()
    """Ids of live demo keys to revoke: the admin one, and those of demo tenants that
    have keys of their own as well (the tenant is kept: someone uses it)."""
    kept: tuple[str, ...] = ()
    """Tenants with a demo name that never held the demo key: not the demo's, untouched."""
    needs_admin_key: bool = False
    """The demo admin key is the last live admin key: make another before revoking it."""


def plan_removal(
    tenant_keys: Mapping[str, Sequence[ApiKey]], admin_keys: Sequence[ApiKey], now: float
) -> DemoRemoval:
    """``tenant_keys``: the keys of each demo tenant name that exists; ``admin_keys``: every
    admin key. Nothing a real operator made is removed: a tenant is deleted only if its one
    key ever is the published one, and only published keys are revoked."""
    delete: list[str] = []
    revoke: list[str] = []
    kept: list[str] = []
    for name, _, key in DEMO_TENANTS:
        keys = tenant_keys.get(name)
        if keys is None:
            continue
        demo_id = key_id_of(key_digest(key))
        demo = [k for k in keys if k.key_id == demo_id]
        if not demo:
            kept.append(name)
        elif len(keys) == 1:
            delete.append(name)
        elif is_live(demo[0], now):
            revoke.append(demo_id)
    live_admin = [k for k in admin_keys if is_live(k, now)]
    demo_admin_live = any(k.key_id == DEMO_ADMIN_KEY_ID for k in live_admin)
    if demo_admin_live:
        revoke.append(DEMO_ADMIN_KEY_ID)
    return DemoRemoval(
        tuple(delete), tuple(revoke), tuple(kept), demo_admin_live and len(live_admin) == 1
    )

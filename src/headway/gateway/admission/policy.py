"""Who may add work to a pool now (pure).

Limits are counted in texts, the unit that costs; ``outstanding`` is the texts admitted and not
yet finished, and ``limit`` comes from Little's law.

- **batch** work is admitted only while ``outstanding + texts <= batch_share x limit``,
  counting both tiers, so batch work is refused first as the pool fills;
- **interactive** work only needs the *interactive* outstanding work to fit the whole limit.
  Workers serve earliest deadline first and batch deadlines are longer, so queued batch work
  delays interactive work by at most the batch being computed; counting it would refuse
  interactive requests to protect batch ones. Outstanding work can therefore pass the limit, by
  at most the batch share, only while both tiers are saturated;
- **within a tier no tenant crowds out the others**: past ``crowding`` of what the tier may
  use, a tenant holding more than an equal share (the tier's allowance ÷ its active tenants) is
  refused while tenants under theirs still get in; below that mark the rule costs nothing;
- an idle pool always admits one request, however large, so nothing starves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from headway.registry.model import Tier

RefusalReason = Literal["pool_full", "batch_share", "tenant_share"]


@dataclass(frozen=True, slots=True)
class Occupancy:
    """Outstanding texts, as the pool sees them at one instant."""

    total: int
    tier: int
    tenant: int
    active_tenants_in_tier: int


@dataclass(frozen=True, slots=True)
class Shares:
    """How a limit is shared: the share batch work may fill, the fill of a tier past
    which a tenant holding more than an equal share of it is refused, and the fill below
    which shadow copies may run."""

    batch: float = 0.7
    crowding: float = 0.8
    shadow: float = 0.5


def tier_allowance(tier: Tier, limit: int, batch_share: float) -> int:
    return limit if tier == "interactive" else int(limit * batch_share)


def refusal(
    texts: int,
    tier: Tier,
    occupancy: Occupancy,
    limit: int,
    shares: Shares = Shares(),
) -> RefusalReason | None:
    """Why this request may not be admitted now, or None if it may."""
    if occupancy.total == 0 or (tier == "interactive" and occupancy.tier == 0):
        return None
    allowance = tier_allowance(tier, limit, shares.batch)
    counted = occupancy.tier if tier == "interactive" else occupancy.total
    if counted + texts > allowance:
        return "pool_full" if tier == "interactive" else "batch_share"
    crowded = occupancy.tier + texts > shares.crowding * allowance
    if occupancy.active_tenants_in_tier > 1 and crowded:
        fair_share = allowance / occupancy.active_tenants_in_tier
        if occupancy.tenant + texts > fair_share:
            return "tenant_share"
    return None

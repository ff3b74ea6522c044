import pytest

from headway.gateway.admission.policy import Occupancy, Shares, refusal


def occ(total, tier=None, tenant=0, active=1):
    return Occupancy(total, total if tier is None else tier, tenant, active)


def test_interactive_may_fill_the_whole_limit_batch_only_its_share():
    assert refusal(10, "interactive", occ(90), limit=100) is None
    assert refusal(11, "interactive", occ(90), limit=100) == "pool_full"
    assert refusal(1, "batch", occ(69), limit=100) is None
    assert refusal(2, "batch", occ(69), limit=100) == "batch_share"


def test_batch_is_refused_before_interactive_as_the_pool_fills():
    for total in range(0, 100):
        if refusal(1, "interactive", occ(total), limit=100) is not None:
            assert refusal(1, "batch", occ(total), limit=100) is not None


def test_an_idle_pool_admits_any_single_request():
    assert refusal(10_000, "batch", occ(0), limit=100) is None


def test_a_tenant_over_its_share_is_refused_only_under_contention():
    # Two active interactive tenants, tier 85% full: the one holding 60 is over half.
    crowded = Occupancy(total=85, tier=85, tenant=60, active_tenants_in_tier=2)
    assert refusal(1, "interactive", crowded, limit=100) == "tenant_share"
    # The other tenant, holding 25, still gets in.
    other = Occupancy(total=85, tier=85, tenant=25, active_tenants_in_tier=2)
    assert refusal(1, "interactive", other, limit=100) is None
    # Without contention (alone in the tier) the same occupancy is fine.
    alone = Occupancy(total=85, tier=85, tenant=85, active_tenants_in_tier=1)
    assert refusal(1, "interactive", alone, limit=100) is None
    # Below the crowding mark anyone may use the room.
    roomy = Occupancy(total=50, tier=50, tenant=45, active_tenants_in_tier=3)
    assert refusal(1, "interactive", roomy, limit=100) is None


@pytest.mark.parametrize("share", [0.5, 0.7, 0.9])
def test_batch_share_is_configurable(share):
    limit = 100
    boundary = int(limit * share)
    assert refusal(1, "batch", occ(boundary - 1), limit, Shares(batch=share)) is None
    assert refusal(1, "batch", occ(boundary), limit, Shares(batch=share)) == "batch_share"


def test_batch_work_does_not_count_against_interactive():
    # Batch holds 70 of a 100-text limit; interactive still has its whole limit.
    assert refusal(100, "interactive", Occupancy(70, 0, 0, 1), limit=100) is None
    assert refusal(40, "interactive", Occupancy(120, 50, 50, 1), limit=100) is None
    assert refusal(51, "interactive", Occupancy(120, 50, 50, 1), limit=100) == "pool_full"
    # ...while interactive work does count against batch.
    assert refusal(1, "batch", Occupancy(70, 0, 0, 1), limit=100) == "batch_share"

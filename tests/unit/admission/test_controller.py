from headway.gateway.admission.controller import (
    AdmissionConfig,
    AdmissionController,
    Permit,
    Refusal,
)
from tests.fakes import FakeClock


def controller(clock, replicas=1, **config):
    """Mean latency aimed at the whole 0.5 s budget unless a test says otherwise."""
    config = {"mean_latency_share": 1.0} | config
    return AdmissionController(
        AdmissionConfig(latency_budget_s=0.5, floor_texts_per_replica=10, **config),
        ready_replicas=lambda: replicas,
        clock=clock,
    )


def saturate(ctl, clock, completed_per_window, windows):
    """Drive the controller at a fixed completion rate while work is being refused."""
    for _ in range(windows):
        permits = []
        while isinstance(p := ctl.try_admit("t", "interactive", 1), Permit):
            permits.append(p)
        clock.advance(0.25)
        for permit in permits[:completed_per_window]:
            ctl.release(permit, completed=True)
        for permit in permits[completed_per_window:]:
            ctl.release(permit, completed=False)


def test_limit_starts_at_the_floor_and_grows_to_littles_law():
    clock = FakeClock()
    ctl = controller(clock, replicas=2)
    assert ctl.limit == 20
    saturate(ctl, clock, completed_per_window=50, windows=12)  # 200 texts/s
    assert 195 < ctl.throughput < 205
    assert ctl.limit == int(ctl.throughput * 0.5)


def test_refusal_carries_retry_after_from_backlog_over_drain_rate():
    clock = FakeClock()
    ctl = controller(clock)
    ctl.throughput = 40.0  # limit 20
    held = [ctl.try_admit("t", "interactive", 5) for _ in range(4)]
    assert all(isinstance(p, Permit) for p in held)
    refused = ctl.try_admit("t", "interactive", 1)
    assert isinstance(refused, Refusal)
    assert refused.reason == "pool_full"
    assert refused.retry_after_s == 20 / 40.0
    assert isinstance(ctl.precheck("interactive"), Refusal)


def test_release_returns_room_and_batch_is_shed_first():
    clock = FakeClock()
    ctl = controller(clock)
    ctl.throughput = 40.0  # limit 20, batch allowance 14
    first = ctl.try_admit("a", "interactive", 14)
    assert isinstance(first, Permit)
    assert isinstance(ctl.try_admit("b", "batch", 1), Refusal)
    assert isinstance(ctl.try_admit("c", "interactive", 1), Permit)
    ctl.release(first, completed=True)
    assert ctl.outstanding == 1
    assert isinstance(ctl.try_admit("b", "batch", 1), Permit)


def test_disabled_admission_admits_everything_but_still_counts():
    clock = FakeClock()
    ctl = controller(clock, enabled=False)
    permits = [ctl.try_admit("t", "batch", 100) for _ in range(5)]
    assert all(isinstance(p, Permit) for p in permits)
    assert ctl.outstanding == 500
    assert ctl.precheck("batch") is None


def test_the_limit_aims_the_mean_latency_at_a_share_of_the_budget():
    ctl = controller(FakeClock(), mean_latency_share=0.6)
    ctl.throughput = 1000.0
    assert ctl.limit == 300  # 1000 texts/s x (0.6 x 0.5 s)


def test_static_limit_overrides_the_estimate():
    clock = FakeClock()
    ctl = controller(clock, static_limit=3)
    ctl.throughput = 1000.0
    assert ctl.limit == 3


def test_shadow_work_takes_only_room_below_its_share_and_none_at_capacity():
    clock = FakeClock()
    ctl = controller(clock, static_limit=20)  # shadow share 0.5: 10 texts of room
    assert ctl.try_spare(6)
    assert not ctl.try_spare(5)  # 6 + 5 > 10: shadow work counts against itself
    ctl.release_spare(6)
    permit = ctl.try_admit("t", "interactive", 8)
    assert isinstance(permit, Permit)
    assert ctl.try_spare(2) and not ctl.try_spare(1)  # 8 real + 2 shadow fill the share
    ctl.release_spare(2)
    assert ctl.outstanding == 8  # shadow work was never in the real work's count
    more = ctl.try_admit("t", "interactive", 12)  # the pool at its limit
    assert isinstance(more, Permit)
    assert not ctl.try_spare(1)
    ctl.release(permit, completed=True)
    ctl.release(more, completed=True)
    assert ctl.try_spare(10)


def test_admission_switched_off_still_keeps_shadow_work_to_spare_room():
    ctl = controller(FakeClock(), enabled=False, static_limit=20)
    assert isinstance(ctl.try_admit("t", "interactive", 15), Permit)
    assert not ctl.try_spare(1)

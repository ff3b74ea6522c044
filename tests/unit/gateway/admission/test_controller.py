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


def test_gateways_sharing_a_pool_split_its_floor_instead_of_each_taking_it_whole():
    # three gateways on one pool of 2 replicas (floor 10 texts each), lightly loaded: each
    # completes 3 texts a window, so Little's law (24 texts/s x 0.5 s = 12 in all) is below
    # the floor, and the workers' counters say the pool completed 9
    clock = FakeClock()
    gateways = [controller(clock, replicas=2) for _ in range(3)]
    assert sum(g.limit for g in gateways) == 60  # before any counter: a whole floor each
    for _ in range(8):
        permits = [(g, g.try_admit("t", "interactive", 3)) for g in gateways]
        clock.advance(0.25)
        for g, permit in permits:
            assert isinstance(permit, Permit)
            g.pool_completed(9)
            g.release(permit, completed=True)
    assert all(abs(g.share - 1 / 3) < 0.01 for g in gateways)
    assert sum(g.limit for g in gateways) == 3 * 7  # one floor of 20, rounded up per gateway


def test_an_idle_gateway_keeps_its_share_of_what_the_pool_does_while_the_others_work():
    clock = FakeClock()
    ctl = controller(clock, replicas=2)
    ctl.share = 0.5
    for _ in range(4):
        ctl.pool_completed(100)  # 400 texts/s, all of it another gateway's
        clock.advance(0.25)
        ctl.precheck("interactive")  # rolls the window
    assert ctl.share == 0.5
    assert ctl.throughput == 400
    assert ctl.limit == 100  # half of the pool's 400 x 0.5 s
    assert ctl.retry_after_s() == 0.0


def test_the_pools_throughput_comes_from_the_counters_once_heard():
    # a gateway alone with its pool: its own completions are the pool's until a counter is
    # heard, and then the counters say the same
    clock = FakeClock()
    ctl = controller(clock, replicas=2)
    saturate(ctl, clock, completed_per_window=50, windows=12)
    assert 195 < ctl.throughput < 205
    for _ in range(4):
        permit = ctl.try_admit("t", "interactive", 60)
        assert isinstance(permit, Permit)
        ctl.pool_completed(60)
        clock.advance(0.25)
        ctl.release(permit, completed=True)
    # its first sample (50 own of 60 in the window of the switch) is smoothed away toward 1
    assert 0.97 < ctl.share < 1.0
    assert ctl.throughput == 240
    assert 116 <= ctl.limit <= 120

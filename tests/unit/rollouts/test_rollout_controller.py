"""The rollout loop every gateway runs: watch, count, judge, move once (controller.py)."""

from __future__ import annotations

from headway.registry.model import SHADOW_STEP, Actor, RolloutPlan
from headway.rollouts import operations
from headway.rollouts.compare import Agreement
from headway.rollouts.controller import RolloutController
from headway.rollouts.recorder import VersionRecorder
from tests.fakes import FakeClock, FakeRegistryStore

OLD, NEW = "a" * 64, "b" * 64
PLAN = RolloutPlan(steps=(SHADOW_STEP, 50, 100), interval_s=10.0, min_requests=5)


class Gateway:
    """One gateway's recorder and controller, on a shared store and clock."""

    def __init__(self, store: FakeRegistryStore, clock: FakeClock, name: str, served) -> None:
        self.recorder = VersionRecorder()
        self.changes = 0

        async def changed() -> None:
            self.changes += 1

        self.controller = RolloutController(
            store, self.recorder, lambda: served, name, on_change=changed, wall_clock=clock
        )


def setup(served=frozenset({OLD, NEW})):
    clock = FakeClock()
    store = FakeRegistryStore(clock)
    store.add_version(OLD, "minilm")
    store.add_version(NEW)
    rollout = operations.start(store, "minilm", NEW, PLAN, actor=Actor("ops"))
    return clock, store, rollout.id, Gateway(store, clock, "gw-1", served)


async def test_the_interval_begins_once_the_candidate_is_served():
    clock, store, rid, gateway = setup(served=frozenset({OLD}))
    await gateway.controller.tick()
    assert store.rollout(rid).step_started_at is None
    gateway.controller._served = lambda: frozenset({OLD, NEW})  # its replica is ready now
    await gateway.controller.tick()
    assert store.rollout(rid).step_started_at == clock.now
    assert store.actions[-1] == ("rollout.watch", "rollout:gw-1")


async def test_a_candidate_never_served_halts_after_three_intervals():
    clock, store, rid, gateway = setup(served=frozenset({OLD}))
    clock.advance(29)
    await gateway.controller.tick()
    assert store.rollout(rid).state == "running"
    clock.advance(1)
    await gateway.controller.tick()
    assert store.rollout(rid).state == "halted"
    assert "no replica served" in store.rollout(rid).reason


async def test_agreeing_shadow_copies_advance_and_counts_are_per_gateway():
    clock, store, rid, gateway = setup()
    await gateway.controller.tick()  # watched from now
    for _ in range(6):
        gateway.recorder.shadow_compared(OLD, NEW, 0.01, Agreement(0.99, None))
    await gateway.controller.tick()
    (shadow,) = [o for o in store.observations(rid, 0) if o.role == "shadow"]
    assert (shadow.gateway_id, shadow.requests, shadow.agreement_n) == ("gw-1", 6, 6)
    clock.advance(10)
    await gateway.controller.tick()
    moved = store.rollout(rid)
    assert (moved.state, moved.step) == ("running", 1)
    assert [w for w in store.split_by_alias["minilm"].weights] == [(OLD, 50.0), (NEW, 50.0)]
    assert gateway.changes == 2  # the watch, then the advance: the snapshot reloaded each time


async def test_failing_candidate_requests_roll_back_and_idle_ones_halt():
    clock, store, rid, gateway = setup()
    for _ in range(2):  # watch; then counts reach the shadow step's interval
        await gateway.controller.tick()
    for _ in range(6):
        gateway.recorder.shadow_compared(OLD, NEW, 0.01, Agreement(0.99, None))
    clock.advance(10)
    await gateway.controller.tick()  # advanced to 50%
    for i in range(10):
        gateway.recorder.outcome(NEW, i % 2 == 0, 0.02)
        gateway.recorder.outcome(OLD, True, 0.02)
    clock.advance(10)
    await gateway.controller.tick()
    rolled = store.rollout(rid)
    assert rolled.state == "rolled_back" and "failed" in rolled.reason
    assert "minilm" not in store.split_by_alias

    clock, store, rid, gateway = setup()
    await gateway.controller.tick()
    clock.advance(10)
    await gateway.controller.tick()
    halted = store.rollout(rid)
    assert halted.state == "halted" and "fewer than" in halted.reason


async def test_two_gateways_judging_at_once_move_the_rollout_once():
    clock, store, rid, first = setup()
    second = Gateway(store, clock, "gw-2", frozenset({OLD, NEW}))
    await first.controller.tick()
    await second.controller.tick()  # each gateway counts only once it knows the rollout
    for gateway in (first, second):
        for _ in range(3):  # 3 each: only the sum of both gateways reaches min_requests
            gateway.recorder.shadow_compared(OLD, NEW, 0.01, Agreement(0.99, None))
        await gateway.controller.tick()
    clock.advance(10)

    def other_gateway_moves_first() -> None:
        stale = store.rollout(rid)
        store.transition(
            rid,
            expect=(stale.state, stale.step),
            state="running",
            step=1,
            step_started_at=clock.now,
            reason="moved by gw-2",
            split=store.split_by_alias["minilm"],
            action="rollout.advance",
            actor=Actor("rollout:gw-2"),
        )

    store.before_transition = other_gateway_moves_first
    await first.controller.tick()
    assert [a for a, _ in store.actions].count("rollout.advance") == 1
    assert store.rollout(rid).reason == "moved by gw-2"
    assert first.changes == 1  # only its watch: it lost the race and wrote nothing

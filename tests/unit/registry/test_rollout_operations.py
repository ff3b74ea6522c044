from dataclasses import replace

import pytest

from headway.registry.errors import InvalidRollout, RolloutActive, UnknownModel, UnknownRollout
from headway.registry.model import SHADOW_STEP, Actor, RolloutPlan, Shadow, Split
from headway.rollouts import operations
from tests.fakes import FakeRegistryStore

ANA = Actor("cli:ana")
BEA = Actor("cli:bea")
PLAN = RolloutPlan(steps=(SHADOW_STEP, 50, 100), shadow_share=0.5, approval=True)


@pytest.fixture
def store():
    fake = FakeRegistryStore()
    fake.add_version("a" * 64, "minilm")
    fake.add_version("b" * 64, "minilm-next")
    return fake


def test_start_shadows_the_candidate_named_by_alias(store):
    rollout = operations.start(store, "minilm", "minilm-next", PLAN, actor=ANA)
    assert (rollout.state, rollout.step, rollout.candidate) == ("running", 0, "b" * 64)
    assert rollout.started_by == "cli:ana"
    assert store.splits() == [
        Split("minilm", (("a" * 64, 1.0),), sticky="none", shadow=Shadow("b" * 64, 0.5)),
    ]


def test_start_keeps_existing_pins_and_stickiness(store):
    store.split_by_alias["minilm"] = Split(
        "minilm", (("a" * 64, 1.0),), sticky="user", pins=(("acme", "a" * 64),)
    )
    operations.start(store, "minilm", "b" * 64, PLAN, actor=ANA)
    (split,) = store.splits()
    assert (split.sticky, split.pins) == ("user", (("acme", "a" * 64),))


def test_start_refuses_unknown_names_and_the_same_version(store):
    with pytest.raises(UnknownModel, match="nope"):
        operations.start(store, "nope", "minilm-next", PLAN, actor=ANA)
    with pytest.raises(UnknownModel, match="missing"):
        operations.start(store, "minilm", "missing", PLAN, actor=ANA)
    with pytest.raises(InvalidRollout, match="already"):
        operations.start(store, "minilm", "a" * 64, PLAN, actor=ANA)
    operations.start(store, "minilm", "minilm-next", PLAN, actor=ANA)
    with pytest.raises(RolloutActive):
        operations.start(store, "minilm", "minilm-next", PLAN, actor=ANA)


def test_pause_resume_abort(store):
    started = operations.start(store, "minilm", "minilm-next", PLAN, actor=ANA)
    shadowed = store.splits()

    paused = operations.pause(store, started.id, actor=BEA)
    assert (paused.state, paused.reason) == ("paused", "paused by cli:bea")
    assert store.splits() == shadowed

    # The controller had stamped the interval's start; resuming must restart it.
    store.by_id[started.id] = replace(paused, step_started_at=1234.0)
    resumed = operations.resume(store, started.id, actor=BEA)
    assert (resumed.state, resumed.step_started_at) == ("running", None)
    assert store.splits() == shadowed

    aborted = operations.abort(store, started.id, actor=ANA)
    assert (aborted.state, aborted.reason) == ("aborted", "aborted by cli:ana")
    assert store.splits() == []
    assert store.resolve_model("minilm").version == "a" * 64
    assert [action for action, _ in store.actions] == [
        "rollout.start",
        "rollout.pause",
        "rollout.resume",
        "rollout.abort",
    ]


def test_abort_keeps_pins_on_a_primary_only_split(store):
    pins = (("acme", "a" * 64),)
    store.split_by_alias["minilm"] = Split("minilm", (("a" * 64, 1.0),), pins=pins)
    started = operations.start(store, "minilm", "minilm-next", PLAN, actor=ANA)
    operations.abort(store, started.id, actor=ANA)
    assert store.splits() == [Split("minilm", (("a" * 64, 1.0),), pins=pins)]


def test_moves_the_state_forbids_are_refused_naming_the_state(store):
    started = operations.start(store, "minilm", "minilm-next", PLAN, actor=ANA)
    with pytest.raises(InvalidRollout, match="is running; only a rollout paused or halted"):
        operations.resume(store, started.id, actor=ANA)
    with pytest.raises(InvalidRollout, match="is running; only a rollout awaiting approval"):
        operations.approve(store, started.id, actor=BEA)
    operations.abort(store, started.id, actor=ANA)
    for move in (operations.pause, operations.resume, operations.abort):
        with pytest.raises(InvalidRollout, match="is aborted"):
            move(store, started.id, actor=ANA)
    with pytest.raises(UnknownRollout):
        operations.pause(store, 99, actor=ANA)


def test_approval_needs_a_second_person(store):
    started = operations.start(store, "minilm", "minilm-next", PLAN, actor=ANA)
    store.by_id[started.id] = replace(started, state="awaiting_approval", step=1)

    with pytest.raises(InvalidRollout, match="started by cli:ana; someone else must approve"):
        operations.approve(store, started.id, actor=ANA)
    assert store.rollout(started.id).state == "awaiting_approval"

    approved = operations.approve(store, started.id, actor=BEA)
    assert (approved.state, approved.step, approved.step_started_at) == ("running", 2, None)
    assert approved.reason == "approved by cli:bea"
    assert store.splits() == [Split("minilm", (("b" * 64, 1.0),), sticky="none")]
    assert store.actions[-1] == ("rollout.approve", "cli:bea")


def test_a_rollout_moved_meanwhile_is_not_moved_again(store):
    started = operations.start(store, "minilm", "minilm-next", PLAN, actor=ANA)
    store.before_transition = lambda: operations.abort(store, started.id, actor=BEA)
    with pytest.raises(InvalidRollout, match=f"rollout {started.id} changed meanwhile"):
        operations.pause(store, started.id, actor=ANA)
    assert store.rollout(started.id).state == "aborted"
    assert [action for action, _ in store.actions] == ["rollout.start", "rollout.abort"]

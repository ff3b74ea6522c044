"""A variant below its source's gate is neither started nor promoted (rollouts/gate.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from headway.models.agreement import Agreement
from headway.registry.errors import InvalidRollout
from headway.registry.model import SHADOW_STEP, Actor, RolloutPlan, VariantGate
from headway.rollouts import operations
from headway.rollouts.compare import Agreement as ShadowAgreement
from headway.rollouts.gate import gate_refusal
from tests.fakes import FakeClock, FakeRegistryStore
from tests.unit.rollouts.test_rollout_controller import Gateway

SOURCE, INT8 = "a" * 64, "b" * 64
MEASURED = Agreement(SOURCE, 40, mean_cosine=0.9912, min_cosine=0.95, nn_agreement=0.925)
PLAN = RolloutPlan(steps=(SHADOW_STEP, 100), interval_s=10.0, min_requests=5)


def store_with(gate: VariantGate | None) -> FakeRegistryStore:
    store = FakeRegistryStore(FakeClock())
    source = store.add_version(SOURCE, "minilm")
    store.versions[SOURCE] = replace(source, variant_gate=gate)
    int8 = store.add_version(INT8, "minilm-int8")
    store.versions[INT8] = replace(int8, agreement=MEASURED)
    return store


@pytest.mark.parametrize(
    ("gate", "refused"),
    [
        (None, None),
        (VariantGate(0.99, 0.9), None),
        (VariantGate(0.995, 0.9), "mean cosine 0.9912 < 0.9950"),
        (VariantGate(0.99, 0.95), "nearest-neighbour agreement 0.9250 < 0.9500"),
    ],
)
def test_the_gate_compares_the_recorded_agreement(gate, refused):
    store = store_with(gate)
    reason = gate_refusal(store.model(INT8), store.model(SOURCE))
    assert reason is None if refused is None else refused in reason


def test_a_version_that_is_no_variant_always_passes():
    store = store_with(VariantGate(1.0, 1.0))
    assert gate_refusal(store.model(SOURCE), store.model(SOURCE)) is None


def test_a_rollout_to_a_variant_below_its_gate_is_refused_at_start():
    store = store_with(VariantGate(0.995, 0.9))
    with pytest.raises(InvalidRollout, match=r"agrees with its source aaaaaaaaaaaa less"):
        operations.start(store, "minilm", "minilm-int8", PLAN, actor=Actor("ops"))
    assert store.rollouts() == []


async def test_a_gate_set_after_the_start_halts_the_rollout_before_100_percent():
    store = store_with(None)
    rollout = operations.start(store, "minilm", "minilm-int8", PLAN, actor=Actor("ops"))
    clock = store.clock
    gateway = Gateway(store, clock, "gw-1", frozenset({SOURCE, INT8}))
    await gateway.controller.tick()  # watched from now
    for _ in range(6):
        gateway.recorder.shadow_compared(SOURCE, INT8, 0.01, ShadowAgreement(0.999, None))
    store.versions[SOURCE] = replace(store.versions[SOURCE], variant_gate=VariantGate(0.995, 0))
    clock.advance(10)
    await gateway.controller.tick()
    halted = store.rollout(rollout.id)
    assert (halted.state, halted.step) == ("halted", 0)
    assert "mean cosine 0.9912 < 0.9950" in halted.reason

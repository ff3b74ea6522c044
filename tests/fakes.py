"""Fakes shared by unit and service tests."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from headway.models.backend import Encoded, ModelKind
from headway.registry.errors import RolloutActive, UnknownRollout
from headway.registry.model import (
    ACTIVE_STATES,
    Actor,
    ModelRecord,
    Observation,
    Rollout,
    RolloutPlan,
    RolloutState,
    Split,
)
from headway.wire import Token


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class RecordingBackend:
    """Embeds a text as [first token id, token count]; records every model call.

    ``gate`` (when set) makes ``run`` wait until the test releases it, so a test
    can hold the inference thread busy while it queues more work.
    """

    def __init__(
        self, *, fail: bool = False, gated: bool = False, fail_on: frozenset[int] = frozenset()
    ) -> None:
        """``fail_on``: a call holding a text whose first token id is one of these fails."""
        self.calls: list[list[int]] = []
        self.fail = fail
        self.fail_on = fail_on
        self.gate = threading.Event()
        if not gated:
            self.gate.set()
        self.entered = threading.Event()

    @property
    def kind(self) -> ModelKind:
        return "embedding"

    @property
    def dimensions(self) -> int:
        return 2

    @property
    def call_overhead_tokens(self) -> int:
        return 64

    def encode_texts(self, texts: Sequence[str], truncation: str = "right") -> list[Encoded]:
        return [Encoded(tuple(int(word) for word in text.split())) for text in texts]

    def encode_pairs(
        self, query: str, documents: Sequence[str], truncation: str = "right"
    ) -> list[Encoded]:
        raise NotImplementedError

    def tokens(self, texts: Sequence[str], add_special_tokens: bool) -> list[list[Token]]:
        raise NotImplementedError

    def decode(self, ids: Sequence[Sequence[int]], skip_special_tokens: bool) -> list[str]:
        raise NotImplementedError

    def run(self, batch: Sequence[Encoded]) -> np.ndarray:
        self.entered.set()
        assert self.gate.wait(10), "test never released the gate"
        self.calls.append([item.ids[0] for item in batch])
        if self.fail or any(item.ids[0] in self.fail_on for item in batch):
            raise RuntimeError("model exploded")
        return np.array([[item.ids[0], item.n_tokens] for item in batch], dtype=np.float32)


async def until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Wait for a condition on the event loop, failing after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.001)


class FakeRegistryStore:
    """The rollout part of ``RegistryStore`` in memory: aliases, splits, rollouts,
    observations, and the audit actions written. ``transition`` is compare-and-set as the
    real stores' is; ``before_transition`` (run once) lets a test move the rollout first,
    as another gateway or operator would."""

    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        self.clock = clock or FakeClock()
        self.versions: dict[str, ModelRecord] = {}
        self.aliases: dict[str, str] = {}
        self.split_by_alias: dict[str, Split] = {}
        self.by_id: dict[int, Rollout] = {}
        self.observed: dict[tuple[int, int, str, str], Observation] = {}
        self.actions: list[tuple[str, str]] = []
        """(action, actor) of every write, oldest first."""
        self.before_transition: Callable[[], None] | None = None

    def add_version(self, version: str, *aliases: str, kind: str = "embedding") -> ModelRecord:
        record = ModelRecord(version, f"model-{version[:4]}", kind, 384, "fp32")
        self.versions[version] = record
        self.aliases.update(dict.fromkeys(aliases, version))
        return record

    def resolve_model(self, name: str) -> ModelRecord | None:
        return self.versions.get(self.aliases.get(name, name))

    def model(self, version: str) -> ModelRecord:
        return self.versions[version]

    def splits(self) -> list[Split]:
        return list(self.split_by_alias.values())

    def rollouts(self, alias: str | None = None, *, active: bool = False) -> list[Rollout]:
        return [
            rollout
            for rollout in sorted(self.by_id.values(), key=lambda r: -r.id)
            if (alias is None or rollout.alias == alias)
            and (not active or rollout.state in ACTIVE_STATES)
        ]

    def rollout(self, rollout_id: int) -> Rollout:
        if rollout_id not in self.by_id:
            raise UnknownRollout(f"no rollout {rollout_id}")
        return self.by_id[rollout_id]

    def observations(self, rollout_id: int, step: int) -> list[Observation]:
        return [o for o in self.observed.values() if (o.rollout_id, o.step) == (rollout_id, step)]

    def record_observation(self, observation: Observation) -> None:
        o = observation
        self.observed[(o.rollout_id, o.step, o.gateway_id, o.role)] = o

    def start_rollout(
        self, alias: str, candidate: str, plan: RolloutPlan, *, actor: Actor, split: Split
    ) -> Rollout:
        if self.rollouts(alias, active=True):
            raise RolloutActive(f"{alias} is in a rollout already")
        now = self.clock()
        rollout = Rollout(
            id=len(self.by_id) + 1,
            alias=alias,
            primary=self.aliases[alias],
            candidate=candidate,
            plan=plan,
            state="running",
            step=0,
            step_started_at=None,
            reason="",
            started_by=actor.who,
            created_at=now,
            updated_at=now,
        )
        self.by_id[rollout.id] = rollout
        self.split_by_alias[alias] = split
        self.actions.append(("rollout.start", actor.who))
        return rollout

    def transition(
        self,
        rollout_id: int,
        *,
        expect: tuple[RolloutState, int],
        state: RolloutState,
        step: int,
        step_started_at: float | None,
        reason: str,
        split: Split | None,
        alias_version: str | None = None,
        action: str,
        actor: Actor,
    ) -> Rollout | None:
        if self.before_transition is not None:
            interfere, self.before_transition = self.before_transition, None
            interfere()
        current = self.rollout(rollout_id)
        if (current.state, current.step) != expect:
            return None
        moved = replace(
            current,
            state=state,
            step=step,
            step_started_at=step_started_at,
            reason=reason,
            updated_at=self.clock(),
        )
        self.by_id[rollout_id] = moved
        if split is None:
            self.split_by_alias.pop(current.alias, None)
        else:
            self.split_by_alias[current.alias] = split
        if alias_version is not None:
            self.aliases[current.alias] = alias_version
        self.actions.append((action, actor.who))
        return moved

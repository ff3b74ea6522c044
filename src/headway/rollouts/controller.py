"""The automated rollout loop, run by every gateway every ``rollout_tick_s``.

Each tick adds this gateway's counts since the last one (``VersionRecorder``) to the step
they belong to, written as its ``Observation`` rows (candidate, primary, shadow). A running
rollout's interval begins once some replica serves the candidate (``rollout.watch``); a
candidate no replica serves for ``NOT_SERVED_INTERVALS`` intervals halts the rollout. Once
the interval has passed, every gateway's observations for the step are summed and judged
(``analysis.judge``), and the move (``analysis.next_move``) is written with ``transition``,
compare-and-set on the (state, step) it was judged in: every gateway may judge, the first
write wins and the others find the rollout moved, so each step happens once, with no leader
to elect. Other gateways' last tick of counts (under ``rollout_tick_s``) may miss the
judgement.

A move takes effect on this gateway at once (``on_change`` reloads the snapshot), on the
others through the registry's change counter.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from headway.registry.errors import InvalidRollout
from headway.registry.model import Actor, ObservedRole, Rollout, RolloutState, Split
from headway.registry.store import RegistryStore
from headway.rollouts.analysis import judge, next_move, promotes
from headway.rollouts.gate import gate_refusal
from headway.rollouts.move import Move, apply_move
from headway.rollouts.operations import source_of
from headway.rollouts.recorder import VersionRecorder
from headway.rollouts.stats import VersionCounts, merged
from headway.rollouts.steps import step_label

log = logging.getLogger(__name__)

NOT_SERVED_INTERVALS = 3
ROLES: tuple[ObservedRole, ...] = ("primary", "candidate", "shadow")


@dataclass(slots=True)
class _StepCounts:
    """This gateway's counts for one watched interval of one rollout step."""

    started_at: float | None
    roles: dict[ObservedRole, VersionCounts] = field(
        default_factory=lambda: {role: VersionCounts() for role in ROLES}
    )


class RolloutController:
    def __init__(
        self,
        store: RegistryStore,
        recorder: VersionRecorder,
        served: Callable[[], frozenset[str]],
        gateway_id: str,
        *,
        on_change: Callable[[], Awaitable[None]],
        wall_clock: Callable[[], float],
    ) -> None:
        """``served``: the versions some ready replica serves now."""
        self._store = store
        self._recorder = recorder
        self._served = served
        self._gateway_id = gateway_id
        self._actor = Actor(f"rollout:{gateway_id}")
        self._on_change = on_change
        self._clock = wall_clock
        self._steps: dict[tuple[int, int], _StepCounts] = {}

    async def tick(self) -> None:
        rollouts = await asyncio.to_thread(self._store.rollouts, active=True)
        self._recorder.watch(v for r in rollouts for v in (r.primary, r.candidate))
        served, shadows = self._recorder.drain()
        steps: dict[tuple[int, int], _StepCounts] = {}
        moved = False
        for rollout in rollouts:
            key = (rollout.id, rollout.step)
            counts = self._steps.get(key)
            if counts is None or counts.started_at != rollout.step_started_at:
                counts = _StepCounts(rollout.step_started_at)  # a new interval: count afresh
            steps[key] = counts
            if rollout.step_started_at is not None:
                await self._observe(rollout, counts, served, shadows)
            if rollout.state == "running":
                moved |= await self._decide(rollout)
        self._steps = steps
        if moved:
            await self._on_change()

    async def _observe(
        self,
        rollout: Rollout,
        counts: _StepCounts,
        served: dict[str, VersionCounts],
        shadows: dict[tuple[str, str], VersionCounts],
    ) -> None:
        fresh: dict[ObservedRole, VersionCounts | None] = {
            "primary": served.get(rollout.primary),
            "candidate": served.get(rollout.candidate),
            "shadow": shadows.get((rollout.primary, rollout.candidate)),
        }
        for role, more in fresh.items():
            if more is not None:
                counts.roles[role].add(more)
        for role, total in counts.roles.items():
            observation = total.to_observation(rollout.id, rollout.step, self._gateway_id, role)
            await asyncio.to_thread(self._store.record_observation, observation)

    async def _decide(self, rollout: Rollout) -> bool:
        now = self._clock()
        interval = rollout.plan.interval_s
        if rollout.step_started_at is None:
            if rollout.candidate in self._served():
                label = step_label(rollout.plan.steps[rollout.step])
                reason = f"the candidate is served; the {label} step is watched for {interval:g}s"
                return await self._move(rollout, "running", now, reason, "rollout.watch")
            if now - rollout.updated_at >= NOT_SERVED_INTERVALS * interval:
                reason = (
                    f"no replica served the candidate {rollout.candidate[:12]} within "
                    f"{NOT_SERVED_INTERVALS * interval:g}s; nothing to judge it on"
                )
                return await self._move(rollout, "halted", None, reason, "rollout.halt")
            return False
        if now < rollout.step_started_at + interval:
            return False
        observations = await asyncio.to_thread(self._store.observations, rollout.id, rollout.step)
        totals = merged(observations)
        verdict = judge(
            rollout.plan,
            rollout.plan.steps[rollout.step],
            totals["candidate"],
            totals["primary"],
            totals["shadow"],
        )
        split = await asyncio.to_thread(self._split_of, rollout.alias)
        move = next_move(rollout, verdict, now, split=split)
        if promotes(rollout, move):  # a gate set since the start is heeded before 100%
            refusal = await asyncio.to_thread(self._gate_refusal, rollout.candidate)
            if refusal is not None:
                move = Move(
                    "halted", rollout.step, rollout.step_started_at, refusal, split, "rollout.halt"
                )
        return await self._write(rollout, move)

    def _gate_refusal(self, version: str) -> str | None:
        candidate = self._store.model(version)
        return gate_refusal(candidate, source_of(self._store, candidate))

    def _split_of(self, alias: str) -> Split | None:
        return next((s for s in self._store.splits() if s.alias == alias), None)

    async def _move(
        self,
        rollout: Rollout,
        state: RolloutState,
        step_started_at: float | None,
        reason: str,
        action: str,
    ) -> bool:
        """A move within the step that leaves the alias's traffic as it is."""
        split = await asyncio.to_thread(self._split_of, rollout.alias)
        move = Move(state, rollout.step, step_started_at, reason, split, action)
        return await self._write(rollout, move)

    async def _write(self, rollout: Rollout, move: Move) -> bool:
        try:
            await asyncio.to_thread(apply_move, self._store, rollout, move, actor=self._actor)
        except InvalidRollout:
            return False  # another gateway (or an operator) moved it first
        log.info("rollout %d of %s: %s (%s)", rollout.id, rollout.alias, move.state, move.reason)
        return True

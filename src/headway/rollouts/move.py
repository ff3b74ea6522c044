"""One move of a rollout from one state to the next, and the one way it is written.

A ``Move`` is a value: everything ``RolloutStore.transition`` needs besides the
rollout and the actor. ``apply_move`` writes it compare-and-set on the (state, step)
the move was chosen from, so of two gateways (or a gateway and an operator) deciding
at once, exactly one move happens and the other hears that the rollout changed.
"""

from __future__ import annotations

from dataclasses import dataclass

from headway.registry.errors import InvalidRollout
from headway.registry.model import Actor, Rollout, RolloutState, Split
from headway.registry.store import RolloutStore


@dataclass(frozen=True, slots=True)
class Move:
    state: RolloutState
    step: int
    step_started_at: float | None
    reason: str
    split: Split | None
    """The alias's split after the move (None: no split, the alias serves one version)."""
    action: str
    """The audit action: ``rollout.advance``, ``rollout.promote``, ``rollout.pause``, ..."""
    alias_version: str | None = None
    """On promotion, the alias's new primary."""


def apply_move(store: RolloutStore, rollout: Rollout, move: Move, *, actor: Actor) -> Rollout:
    moved = store.transition(
        rollout.id,
        expect=(rollout.state, rollout.step),
        state=move.state,
        step=move.step,
        step_started_at=move.step_started_at,
        reason=move.reason,
        split=move.split,
        alias_version=move.alias_version,
        action=move.action,
        actor=actor,
    )
    if moved is None:
        raise InvalidRollout(f"rollout {rollout.id} changed meanwhile, look again")
    return moved

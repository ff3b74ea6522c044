"""The moves an operator makes by hand: start, pause, resume, abort, approve.

Each reads the rollout, checks that its state allows the move (``InvalidRollout``
naming the state when not), and writes with one store call: ``start_rollout``, or
``transition`` compare-and-set on the (state, step) it read, so a move that races the
controller or another operator is refused ("changed meanwhile") rather than applied to
a rollout that is no longer the one its author looked at.

Approval follows the two-person rule: whoever started a rollout cannot approve its
promotion to 100%.
"""

from __future__ import annotations

from headway.registry.errors import InvalidRollout, UnknownModel
from headway.registry.model import (
    ACTIVE_STATES,
    Actor,
    ModelRecord,
    Rollout,
    RolloutPlan,
    RolloutState,
    Split,
)
from headway.registry.store import RegistryStore
from headway.rollouts.gate import gate_refusal
from headway.rollouts.move import Move, apply_move
from headway.rollouts.steps import rollback_split, split_for


def start(
    store: RegistryStore, alias: str, candidate_name: str, plan: RolloutPlan, *, actor: Actor
) -> Rollout:
    """Start moving ``alias`` to ``candidate_name`` (an alias or a version) by ``plan``."""
    primary = store.resolve_model(alias)
    if primary is None:
        raise UnknownModel(f"no alias {alias!r}")
    candidate = store.resolve_model(candidate_name)
    if candidate is None:
        raise UnknownModel(f"no alias or version {candidate_name!r}")
    if candidate.version == primary.version:
        raise InvalidRollout(f"{alias} serves {candidate.version[:12]} already")
    if not plan.steps:
        raise InvalidRollout("a rollout plan needs at least one step")
    refusal = gate_refusal(candidate, source_of(store, candidate))
    if refusal is not None:
        raise InvalidRollout(refusal)
    split = split_for(
        alias, primary.version, candidate.version, plan.steps[0], plan, _split_of(store, alias)
    )
    return store.start_rollout(alias, candidate.version, plan, actor=actor, split=split)


def source_of(store: RegistryStore, candidate: ModelRecord) -> ModelRecord | None:
    """The version ``candidate`` was derived from, if it is a variant the registry holds."""
    if candidate.agreement is None:
        return None
    return store.resolve_model(candidate.agreement.source)


def pause(store: RegistryStore, rollout_id: int, *, actor: Actor) -> Rollout:
    """Stop judging, keep traffic as it is."""
    rollout = _in(store, rollout_id, ("running",), "paused")
    move = Move(
        "paused",
        rollout.step,
        rollout.step_started_at,
        f"paused by {actor.who}",
        _split_of(store, rollout.alias),
        "rollout.pause",
    )
    return apply_move(store, rollout, move, actor=actor)


def resume(store: RegistryStore, rollout_id: int, *, actor: Actor) -> Rollout:
    """Judge again, on a fresh interval: what was counted before the pause or halt is
    not held against (or for) the candidate."""
    rollout = _in(store, rollout_id, ("paused", "halted"), "resumed")
    move = Move(
        "running",
        rollout.step,
        None,
        f"resumed by {actor.who}",
        _split_of(store, rollout.alias),
        "rollout.resume",
    )
    return apply_move(store, rollout, move, actor=actor)


def abort(store: RegistryStore, rollout_id: int, *, actor: Actor) -> Rollout:
    """End the rollout and send all traffic back to the primary."""
    rollout = _in(store, rollout_id, tuple(sorted(ACTIVE_STATES)), "aborted")
    move = Move(
        "aborted",
        rollout.step,
        rollout.step_started_at,
        f"aborted by {actor.who}",
        rollback_split(rollout.alias, rollout.primary, _split_of(store, rollout.alias)),
        "rollout.abort",
    )
    return apply_move(store, rollout, move, actor=actor)


def approve(store: RegistryStore, rollout_id: int, *, actor: Actor) -> Rollout:
    """Let a rollout waiting for approval go on to its 100% step."""
    rollout = _in(store, rollout_id, ("awaiting_approval",), "approved")
    if actor.who == rollout.started_by:
        raise InvalidRollout(
            f"rollout {rollout.id} was started by {actor.who}; someone else must approve it"
        )
    candidate = store.model(rollout.candidate)
    refusal = gate_refusal(candidate, source_of(store, candidate))
    if refusal is not None:
        raise InvalidRollout(refusal)
    step = rollout.step + 1
    split = split_for(
        rollout.alias,
        rollout.primary,
        rollout.candidate,
        rollout.plan.steps[step],
        rollout.plan,
        _split_of(store, rollout.alias),
    )
    move = Move("running", step, None, f"approved by {actor.who}", split, "rollout.approve")
    return apply_move(store, rollout, move, actor=actor)


def _in(
    store: RegistryStore, rollout_id: int, allowed: tuple[RolloutState, ...], verb: str
) -> Rollout:
    rollout = store.rollout(rollout_id)
    if rollout.state not in allowed:
        raise InvalidRollout(
            f"rollout {rollout_id} is {rollout.state.replace('_', ' ')}; only a rollout "
            f"{' or '.join(state.replace('_', ' ') for state in allowed)} can be {verb}"
        )
    return rollout


def _split_of(store: RegistryStore, alias: str) -> Split | None:
    return next((split for split in store.splits() if split.alias == alias), None)

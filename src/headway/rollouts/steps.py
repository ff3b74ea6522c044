"""The traffic split each step of a rollout puts on its alias.

A shadow step (``SHADOW_STEP``) serves every answer from the primary and copies
``plan.shadow_share`` of requests to the candidate; a step of p percent weighs the
primary 100-p against the candidate's p; 100 serves the candidate alone. Every split
keeps the operator's pins and stickiness from the split the alias had before, so a
tenant pinned to a version stays there throughout. An alias with no split before gets
one that draws each request (``sticky="none"``): a canary of 5% then sees 5% of the
requests, where sticky by tenant would give it all of some tenants' traffic or none
(with one tenant, nothing to judge it on).

When the rollout ends, the alias goes back to one version: the primary on a rollback,
the candidate on promotion. Without pins that needs no split at all (None); with pins
it is a one-version split that still carries them.
"""

from __future__ import annotations

from headway.registry.errors import InvalidRollout
from headway.registry.model import SHADOW_STEP, RolloutPlan, Shadow, Split


def split_for(
    alias: str,
    primary: str,
    candidate: str,
    percent: int,
    plan: RolloutPlan,
    previous: Split | None,
) -> Split:
    sticky = previous.sticky if previous is not None else "none"
    pins = previous.pins if previous is not None else ()
    if percent == SHADOW_STEP:
        return Split(
            alias,
            ((primary, 1.0),),
            sticky=sticky,
            pins=pins,
            shadow=Shadow(candidate, plan.shadow_share),
        )
    if percent == 100:
        return Split(alias, ((candidate, 1.0),), sticky=sticky, pins=pins)
    if not 0 < percent < 100:
        raise InvalidRollout(f"a rollout step is a percentage from 0 to 100, not {percent}")
    return Split(
        alias,
        ((primary, float(100 - percent)), (candidate, float(percent))),
        sticky=sticky,
        pins=pins,
    )


def rollback_split(alias: str, primary: str, previous: Split | None) -> Split | None:
    return _only(alias, primary, previous)


def promoted_split(alias: str, candidate: str, previous: Split | None) -> Split | None:
    return _only(alias, candidate, previous)


def _only(alias: str, version: str, previous: Split | None) -> Split | None:
    if previous is None or not previous.pins:
        return None
    return Split(alias, ((version, 1.0),), sticky=previous.sticky, pins=previous.pins)


def step_label(percent: int) -> str:
    """How people read a step: ``shadow`` or ``25%``."""
    return "shadow" if percent == SHADOW_STEP else f"{percent}%"

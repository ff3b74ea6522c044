"""``/admin/rollouts``: move an alias from its version to a candidate, step by step.

``POST /admin/rollouts`` starts one (201): the candidate's share at each step
(``"shadow"``: a copy of traffic only, no answers), how long each step is watched and
what it must show. ``…/{id}/pause``, ``resume``, ``abort`` and ``approve`` (promotion
to 100% when the plan asks for a second admin) move it by hand; the controller
(``headway.rollouts``) moves it otherwise. An answer shows the plan, where the
rollout is and why, and what the current step has seen so far, summed over every
gateway's observations.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Literal

import msgspec

from headway.control.admin.access import (
    ADMIN_ONLY,
    MAX_ID,
    WITH_BODY,
    AdminParts,
    admin_actor,
    path_id,
    query_values,
    read,
    write,
)
from headway.control.admin.body import decode_body
from headway.errors import Conflict, NotFound, ValidationFailed
from headway.gateway.auth.kinds import ADMIN_KEY
from headway.gateway.openapi import DocumentedRoute, Operation
from headway.http.asgi import Handler, Request, Response, json_response
from headway.http.router import Route
from headway.registry.model import SHADOW_STEP, Observation, Rollout, RolloutPlan
from headway.registry.store import RegistryStore
from headway.utc import rfc3339

SHADOW: Literal["shadow"] = "shadow"
Step = Annotated[int, msgspec.Meta(ge=1, le=100)] | Literal["shadow"]
Share = Annotated[float, msgspec.Meta(gt=0, le=1)]
Fraction = Annotated[float, msgspec.Meta(ge=0, le=1)]
_DEFAULT = RolloutPlan()
_MOVES = ("pause", "resume", "abort", "approve")


class PlanBody(msgspec.Struct, forbid_unknown_fields=True):
    steps: Annotated[list[Step], msgspec.Meta(min_length=1)] = msgspec.field(
        default_factory=lambda: _steps_out(_DEFAULT.steps)
    )
    """The candidate's percent at each step; ``"shadow"``: a shadow copy, no answers."""
    interval_s: Annotated[float, msgspec.Meta(gt=0)] = _DEFAULT.interval_s
    max_error_rate: Fraction = _DEFAULT.max_error_rate
    max_latency_ratio: Annotated[float, msgspec.Meta(gt=0)] = _DEFAULT.max_latency_ratio
    min_agreement: Annotated[float, msgspec.Meta(ge=-1, le=1)] = _DEFAULT.min_agreement
    min_requests: Annotated[int, msgspec.Meta(ge=1)] = _DEFAULT.min_requests
    shadow_share: Share = _DEFAULT.shadow_share
    approval: bool = _DEFAULT.approval
    """Promotion to 100% waits for an approval by a second admin key."""


class RolloutStart(PlanBody, forbid_unknown_fields=True, kw_only=True):
    """Move ``alias`` to the version ``to`` (a hash or an alias naming one) by ``steps``."""

    alias: str
    to: str


class RoleCounts(msgspec.Struct):
    requests: int
    errors: int
    agreement: float | None
    """Mean agreement with the primary (shadow comparisons); None before the first."""


class RolloutAnswer(msgspec.Struct):
    id: int
    alias: str
    primary: str
    candidate: str
    plan: PlanBody
    state: str
    step: int
    """Index into ``plan.steps``."""
    step_percent: int
    """The candidate's share of answers now (0 on a shadow step)."""
    step_started_at: str | None
    reason: str
    started_by: str
    created_at: str
    updated_at: str
    observed: dict[str, RoleCounts]
    """The current step so far, summed over every gateway, by role."""


class RolloutList(msgspec.Struct):
    data: list[RolloutAnswer]


_start = msgspec.json.Decoder(RolloutStart)


def _steps_out(steps: Sequence[int]) -> list[int | Literal["shadow"]]:
    return [SHADOW if step == SHADOW_STEP else step for step in steps]


def plan_of(body: PlanBody) -> RolloutPlan:
    return RolloutPlan(
        steps=tuple(step if isinstance(step, int) else SHADOW_STEP for step in body.steps),
        interval_s=body.interval_s,
        max_error_rate=body.max_error_rate,
        max_latency_ratio=body.max_latency_ratio,
        min_agreement=body.min_agreement,
        min_requests=body.min_requests,
        shadow_share=body.shadow_share,
        approval=body.approval,
    )


def plan_body(plan: RolloutPlan) -> PlanBody:
    return PlanBody(
        _steps_out(plan.steps),
        plan.interval_s,
        plan.max_error_rate,
        plan.max_latency_ratio,
        plan.min_agreement,
        plan.min_requests,
        plan.shadow_share,
        plan.approval,
    )


def merged(observations: Sequence[Observation]) -> dict[str, RoleCounts]:
    """Every gateway's counts summed by role (they are cumulative within a step)."""
    sums: dict[str, list[float]] = {}
    for seen in observations:
        total = sums.setdefault(seen.role, [0, 0, 0, 0.0])
        total[0] += seen.requests
        total[1] += seen.errors
        total[2] += seen.agreement_n
        total[3] += seen.agreement_sum
    return {
        role: RoleCounts(int(requests), int(errors), agreement_sum / n if n else None)
        for role, (requests, errors, n, agreement_sum) in sorted(sums.items())
    }


def rollout_answer(rollout: Rollout, observations: Sequence[Observation]) -> RolloutAnswer:
    return RolloutAnswer(
        rollout.id,
        rollout.alias,
        rollout.primary,
        rollout.candidate,
        plan_body(rollout.plan),
        rollout.state,
        rollout.step,
        rollout.plan.steps[rollout.step],
        None if rollout.step_started_at is None else rfc3339(rollout.step_started_at),
        rollout.reason,
        rollout.started_by,
        rfc3339(rollout.created_at),
        rfc3339(rollout.updated_at),
        merged(observations),
    )


def answer_of(store: RegistryStore, rollout: Rollout) -> RolloutAnswer:
    return rollout_answer(rollout, store.observations(rollout.id, rollout.step))


def list_rollouts(parts: AdminParts) -> Handler:
    async def handle(request: Request) -> Response:
        query = query_values(request, frozenset({"alias", "active"}))
        active = query.get("active", "false")
        if active not in ("true", "false"):
            raise ValidationFailed(f"active {active[:20]!r} is not true or false")

        def answers(store: RegistryStore) -> list[RolloutAnswer]:
            found = store.rollouts(query.get("alias") or None, active=active == "true")
            return [answer_of(store, rollout) for rollout in found]

        return json_response(RolloutList(await read(parts, request, answers)))

    return handle


def get_rollout(parts: AdminParts) -> Handler:
    async def handle(request: Request) -> Response:
        rollout_id = path_id(request)
        answer = await read(parts, request, lambda s: answer_of(s, s.rollout(rollout_id)))
        return json_response(answer)

    return handle


def start_rollout(parts: AdminParts) -> Handler:
    async def handle(request: Request) -> Response:
        from headway.rollouts import operations

        actor = admin_actor(request)
        body = decode_body(request, _start)
        plan = plan_of(body)

        def start(store: RegistryStore) -> RolloutAnswer:
            rollout = operations.start(store, body.alias, body.to, plan, actor=actor)
            return answer_of(store, rollout)

        return json_response(await write(parts, start), 201)

    return handle


def move_rollout(parts: AdminParts, verb: str) -> Handler:
    async def handle(request: Request) -> Response:
        from headway.rollouts import operations

        moves: dict[str, Callable[..., Rollout]] = {
            "pause": operations.pause,
            "resume": operations.resume,
            "abort": operations.abort,
            "approve": operations.approve,
        }
        move = moves[verb]
        actor = admin_actor(request)
        rollout_id = path_id(request)

        def apply(store: RegistryStore) -> RolloutAnswer:
            return answer_of(store, move(store, rollout_id, actor=actor))

        return json_response(await write(parts, apply))

    return handle


def routes(parts: AdminParts) -> list[DocumentedRoute]:
    numeric = {"id": {"type": "integer", "minimum": 0, "maximum": MAX_ID}}
    found = (*ADMIN_ONLY, NotFound)
    documented = [
        DocumentedRoute(
            Route(
                "GET",
                "/admin/rollouts",
                "admin_rollouts_list",
                list_rollouts(parts),
                auth=ADMIN_KEY,
            ),
            Operation(
                "Rollouts, newest first; ?alias= one alias's, ?active=true only those under "
                "way (admin key)",
                RolloutList,
                errors=(*ADMIN_ONLY, ValidationFailed),
                authenticated=True,
                query=_QUERY,
            ),
        ),
        DocumentedRoute(
            Route(
                "POST",
                "/admin/rollouts",
                "admin_rollout_start",
                start_rollout(parts),
                auth=ADMIN_KEY,
            ),
            Operation(
                "Start moving an alias to a candidate version by steps (admin key)",
                RolloutAnswer,
                RolloutStart,
                (*WITH_BODY, NotFound, Conflict),
                authenticated=True,
                status=201,
            ),
        ),
        DocumentedRoute(
            Route(
                "GET",
                "/admin/rollouts/{id}",
                "admin_rollout_get",
                get_rollout(parts),
                auth=ADMIN_KEY,
            ),
            Operation(
                "One rollout, with what its current step has seen (admin key)",
                RolloutAnswer,
                errors=found,
                authenticated=True,
                path=numeric,
            ),
        ),
    ]
    for verb in _MOVES:
        documented.append(
            DocumentedRoute(
                Route(
                    "POST",
                    f"/admin/rollouts/{{id}}/{verb}",
                    f"admin_rollout_{verb}",
                    move_rollout(parts, verb),
                    auth=ADMIN_KEY,
                ),
                Operation(
                    f"{verb.capitalize()} a rollout (admin key)",
                    RolloutAnswer,
                    errors=(*found, ValidationFailed, Conflict),
                    authenticated=True,
                    path=numeric,
                ),
            )
        )
    return documented


_QUERY = (
    {"name": "alias", "in": "query", "required": False, "schema": {"type": "string"}},
    {
        "name": "active",
        "in": "query",
        "required": False,
        "schema": {"type": "string", "enum": ["true", "false"], "default": "false"},
    },
)

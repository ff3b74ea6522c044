"""headway rollouts: start a rollout, watch it, and pause, resume, abort or approve it.

Every command writes through the registry the settings name (SQLite, or Postgres in
shared mode) as ``cli:<user>``; running gateways pick the change up within
``registry_poll_s``. A registry refusal (an unknown alias, a move the rollout's state
forbids, a rollout that changed meanwhile) exits 1 with its message; a bad flag exits 2.
"""

from __future__ import annotations

import getpass
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from headway.cli.datadir import existing_settings, registry_of
from headway.cli.options import ConfigOpt, DataDirOpt
from headway.cli.output import JsonOpt, emit_json, renamed

if TYPE_CHECKING:
    from headway.registry.model import Actor, Rollout
    from headway.registry.store import RegistryStore

rollout_app = typer.Typer(
    no_args_is_help=True, help="Move an alias to a new version by steps, judged on traffic."
)

IdArg = Annotated[int, typer.Argument(help="The rollout's id (see `headway rollouts list`).")]
_INTERVAL_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}


def parse_steps(text: str) -> tuple[int, ...]:
    """``shadow,5,25,50,100`` → (0, 5, 25, 50, 100)."""
    from headway.registry.model import SHADOW_STEP

    steps: list[int] = []
    for part in (item.strip() for item in text.split(",")):
        if part == "shadow":
            steps.append(SHADOW_STEP)
        elif part.isdigit() and 0 < int(part) <= 100:
            steps.append(int(part))
        else:
            raise typer.BadParameter(
                f"{part!r} is not a step: say shadow or a percentage from 1 to 100",
                param_hint="--steps",
            )
    return tuple(steps)


def parse_interval(text: str) -> float:
    """``90``, ``90s``, ``2m`` or ``1h`` → seconds."""
    value, unit = (text[:-1], text[-1]) if text[-1:] in _INTERVAL_UNITS else (text, "s")
    try:
        seconds = float(value) * _INTERVAL_UNITS[unit]
    except ValueError:
        seconds = float("nan")
    if not seconds > 0 or seconds == float("inf"):
        raise typer.BadParameter(
            f"{text!r} is not a duration: say seconds (60, 60s) or minutes (2m)",
            param_hint="--interval",
        )
    return seconds


def _within(
    low: float, high: float, *, low_open: bool = False
) -> Callable[[float | None], float | None]:
    """A flag check: a finite number from ``low`` to ``high`` (NaN, which click's ranges
    let through, is refused like any number out of range)."""
    shown = f"{'(' if low_open else '['}{low:g}, {high:g}]"

    def check(value: float | None) -> float | None:
        if value is None:
            return None
        above = value > low if low_open else value >= low
        if not (above and value <= high and math.isfinite(value)):
            raise typer.BadParameter(f"{value:g} is not in {shown}")
        return value

    return check


@contextmanager
def _registry(config: Path | None, data_dir: Path | None) -> Iterator[RegistryStore]:
    """The registry, with its refusals turned into exit 1 and their message."""
    settings = existing_settings(config, data_dir)
    from headway.registry.errors import RegistryError

    try:
        yield registry_of(settings)
    except RegistryError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(1) from exc


def _actor() -> Actor:
    from headway.registry.model import Actor

    return Actor(f"cli:{getpass.getuser()}")


def _table(rollouts: list[Rollout]) -> str:
    from headway.rollouts.steps import step_label

    rows = [("ID", "ALIAS", "PRIMARY", "CANDIDATE", "STATE", "STEP", "REASON")]
    rows += [
        (
            str(r.id),
            r.alias,
            r.primary[:12],
            r.candidate[:12],
            r.state,
            step_label(r.plan.steps[r.step]),
            r.reason,
        )
        for r in rollouts
    ]
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]) - 1)]
    return "\n".join(
        "  ".join([*map(str.ljust, row[:-1], widths), row[-1]]).rstrip() for row in rows
    )


@rollout_app.command("start")
def start(
    alias: Annotated[str, typer.Argument(help="The alias to move.")],
    to: Annotated[str, typer.Option("--to", help="The candidate: a version or an alias.")],
    steps: Annotated[
        str | None,
        typer.Option(help="The candidate's share per step, e.g. shadow,5,25,50,100."),
    ] = None,
    interval: Annotated[
        str | None, typer.Option(help="How long each step is watched: 60, 60s, 2m, 1h.")
    ] = None,
    max_error_rate: Annotated[
        float | None,
        typer.Option(
            callback=_within(0, 1), help="Most failed requests allowed, a share in [0, 1]."
        ),
    ] = None,
    max_latency_ratio: Annotated[
        float | None,
        typer.Option(
            callback=_within(0, math.inf, low_open=True),
            help="Most candidate p95 over primary p95, above 0.",
        ),
    ] = None,
    min_agreement: Annotated[
        float | None,
        typer.Option(
            callback=_within(-1, 1), help="Shadow steps: least mean agreement, in [-1, 1]."
        ),
    ] = None,
    min_requests: Annotated[
        int | None, typer.Option(min=1, help="Fewer in a step: halt, too little to judge.")
    ] = None,
    shadow_share: Annotated[
        float | None,
        typer.Option(
            callback=_within(0, 1, low_open=True), help="Share of requests shadowed, in (0, 1]."
        ),
    ] = None,
    approval: Annotated[
        bool, typer.Option("--approval", help="Wait for a second person before 100%.")
    ] = False,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Start moving ALIAS to the --to version, one step per interval.

    Examples:

      headway rollouts start embed --to 3f2a9c...        # the default steps and checks
      headway rollouts start embed --to embed-int8 --steps shadow,5,50,100 --interval 2m
      headway rollouts start embed --to 3f2a9c... --approval   # a second person at 100%
    """
    from headway.registry.model import RolloutPlan
    from headway.rollouts import operations

    given: dict[str, Any] = {
        "steps": parse_steps(steps) if steps is not None else None,
        "interval_s": parse_interval(interval) if interval is not None else None,
        "max_error_rate": max_error_rate,
        "max_latency_ratio": max_latency_ratio,
        "min_agreement": min_agreement,
        "min_requests": min_requests,
        "shadow_share": shadow_share,
        "approval": approval,
    }
    plan = replace(RolloutPlan(), **{name: v for name, v in given.items() if v is not None})
    with _registry(config, data_dir) as store:
        rollout = operations.start(store, alias, to, plan, actor=_actor())
    typer.echo(_table([rollout]))


def old_group(ctx: typer.Context) -> None:
    """The old group name, headway rollout: the notice, naming the new command."""
    command = ctx.invoked_subcommand or ""
    new = "show" if command == "status" else command
    renamed(f"rollout {command}".strip(), f"rollouts {new}".strip())


def _document(rollout: Rollout) -> dict[str, Any]:
    from dataclasses import asdict

    from headway.rollouts.steps import step_label

    return {
        "id": rollout.id,
        "alias": rollout.alias,
        "primary": rollout.primary,
        "candidate": rollout.candidate,
        "state": rollout.state,
        "step": step_label(rollout.plan.steps[rollout.step]),
        "reason": rollout.reason,
        "plan": asdict(rollout.plan),
    }


def _print(rollouts: list[Rollout], as_json: bool) -> None:
    if as_json:
        emit_json({"data": [_document(r) for r in rollouts]})
    else:
        typer.echo(_table(rollouts) if rollouts else "no rollouts")


@rollout_app.command("list")
def list_rollouts(
    alias: Annotated[str | None, typer.Option(help="Only this alias's rollouts.")] = None,
    as_json: JsonOpt = False,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Rollouts, newest first: their versions, state, step and why."""
    with _registry(config, data_dir) as store:
        rollouts = store.rollouts(alias)
    _print(rollouts, as_json)


@rollout_app.command("show")
def show(
    which: Annotated[
        str | None,
        typer.Argument(help="A rollout's id, or an alias (its rollouts, newest first)."),
    ] = None,
    as_json: JsonOpt = False,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """One rollout by its id, or an alias's rollouts: versions, state, step and why."""
    with _registry(config, data_dir) as store:
        if which is not None and which.isdigit():
            rollout = store.rollout(int(which))
            if as_json:
                emit_json(_document(rollout))
            else:
                typer.echo(_table([rollout]))
            return
        rollouts = store.rollouts(which)
    _print(rollouts, as_json)


@rollout_app.command("status", hidden=True)
def status(
    alias: Annotated[str | None, typer.Argument(help="Only this alias's rollouts.")] = None,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """The old name of headway rollouts show."""
    renamed("rollouts status", "rollouts show")
    with _registry(config, data_dir) as store:
        rollouts = store.rollouts(alias)
    _print(rollouts, False)


@rollout_app.command("pause")
def pause(rollout_id: IdArg, config: ConfigOpt = None, data_dir: DataDirOpt = None) -> None:
    """Stop judging a running rollout; traffic stays as it is."""
    from headway.rollouts import operations

    with _registry(config, data_dir) as store:
        typer.echo(_table([operations.pause(store, rollout_id, actor=_actor())]))


@rollout_app.command("resume")
def resume(rollout_id: IdArg, config: ConfigOpt = None, data_dir: DataDirOpt = None) -> None:
    """Judge a paused or halted rollout again, from a fresh interval."""
    from headway.rollouts import operations

    with _registry(config, data_dir) as store:
        typer.echo(_table([operations.resume(store, rollout_id, actor=_actor())]))


@rollout_app.command("abort")
def abort(rollout_id: IdArg, config: ConfigOpt = None, data_dir: DataDirOpt = None) -> None:
    """End a rollout and send all traffic back to the primary."""
    from headway.rollouts import operations

    with _registry(config, data_dir) as store:
        typer.echo(_table([operations.abort(store, rollout_id, actor=_actor())]))


@rollout_app.command("approve")
def approve(rollout_id: IdArg, config: ConfigOpt = None, data_dir: DataDirOpt = None) -> None:
    """Let a rollout waiting for approval go to 100% (not by whoever started it)."""
    from headway.rollouts import operations

    with _registry(config, data_dir) as store:
        typer.echo(_table([operations.approve(store, rollout_id, actor=_actor())]))

"""What commands share in how they talk: ``--json``, ``--yes`` and its question, and the
line an old command name prints.

``--json`` prints one JSON document on stdout (an object, or ``{"data": [...]}`` for a
list), its keys stable: scripts read it, not the table. A destructive command asks on
a terminal and, anywhere else, needs ``--yes``: a script that forgot it stops with one
line instead of waiting for an answer nobody types.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from functools import wraps
from typing import Annotated, Any, TypeVar

import typer

from headway.cli.failures import CliError

JsonOpt = Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")]
YesOpt = Annotated[
    bool, typer.Option("--yes", "-y", help="Do it without asking (needed off a terminal).")
]

F = TypeVar("F", bound=Callable[..., Any])


def emit_json(document: object) -> None:
    typer.echo(json.dumps(document, indent=2, sort_keys=True))


def on_terminal() -> bool:
    return sys.stdin.isatty()


def confirm(question: str, yes: bool) -> None:
    """Go on if ``yes`` or the user answers y; else exit (1 when refused, 2 off a tty)."""
    if yes:
        return
    if not on_terminal():
        raise CliError(f"{question.rstrip('?')}: not confirmed", "pass --yes to do it", code=2)
    if not typer.confirm(question, default=False, err=True):
        typer.echo("nothing done", err=True)
        raise typer.Exit(1)


_told: list[str] = []
"""The notices this invocation printed (the root command clears it): one per command."""


def fresh_invocation() -> None:
    _told.clear()


def renamed(old: str, new: str) -> None:
    """Say on stderr, once, that ``headway <old>`` is now ``headway <new>``."""
    if _told:
        return
    _told.append(old)
    typer.echo(
        f"`headway {old}` is now `headway {new}`; the old name goes in the next release",
        err=True,
    )


def alias_of(command: F, old: str, new: str) -> F:
    """``command`` under its old name: the same parameters, the notice first."""

    @wraps(command)
    def old_name(*args: Any, **kwargs: Any) -> Any:
        renamed(old, new)
        return command(*args, **kwargs)

    return old_name  # type: ignore[return-value]

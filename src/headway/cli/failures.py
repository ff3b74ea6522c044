"""How a command fails: one line, ``error: <what>; <the fix>``, on stderr, and exit 1.

The root group (``HeadwayGroup``) runs every command inside one handler, so nothing a
command raises reaches the user as a traceback unless they asked with ``--debug``. A
command says what went wrong by raising ``CliError``; anything else is named by
``explain``, one table from exception to message, most specific first. A usage error
(an unknown option, a bad value) is one line too, pointing at the command's ``-h``, and
exits 2; click's exits (``typer.Exit``, ``typer.Abort``) pass through untouched. A reader
that closed the pipe (``| head -1``) ends the command quietly, as SIGPIPE would (141).
"""

from __future__ import annotations

import os
import sqlite3
import sys
from typing import Any

import typer
from typer.core import TyperGroup

UsageError: type[Exception] = typer.BadParameter.__mro__[1]
"""Click's (typer vendors its own copy of click and exports only this subclass)."""

DEBUG = "headway.debug"
"""The root context's ``meta`` key: whether ``--debug`` was given."""


class CliError(Exception):
    """A command's refusal: what is wrong, how to fix it, and the exit status."""

    def __init__(self, what: str, fix: str, code: int = 1) -> None:
        super().__init__(f"{what}; {fix}")
        self.code = code


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _os_error(exc: OSError) -> str:
    where = f" {exc.filename}" if exc.filename else ""
    cause = exc.strerror or str(exc)
    if isinstance(exc, PermissionError):
        return f"cannot write{where}: {cause}; give this user access to it or pass --data-dir"
    if isinstance(exc, NotADirectoryError | FileExistsError):
        return (
            f"{cause}:{where} (a file stands where headway needs a folder); move it away or"
            " pass --data-dir to a folder"
        )
    if isinstance(exc, IsADirectoryError):
        return f"{cause}:{where} (a folder stands where headway needs a file); move it away"
    return f"{cause}:{where}; check the path, or run again with --debug for the traceback"


def report(exc: Exception) -> int:
    """Say ``exc`` in its one line on stderr; the exit status it calls for."""
    typer.echo(f"error: {explain(exc)}", err=True)
    return exc.code if isinstance(exc, CliError) else 1


def explain(exc: BaseException) -> str:
    """``exc`` as ``<what>; <the fix>``, on one line."""
    from headway.models.errors import ModelError
    from headway.registry.errors import RegistryError, RegistryUnavailable, SchemaTooNew

    if isinstance(exc, CliError):
        line = str(exc)
    elif isinstance(exc, sqlite3.DatabaseError):
        line = (
            f"a database in the data dir cannot be read ({exc}); move the damaged file aside"
            " or restore it from a backup, then run again (--debug shows which)"
        )
    elif isinstance(exc, SchemaTooNew):
        line = f"{exc}; run the newer headway that wrote it"
    elif isinstance(exc, RegistryUnavailable):
        line = f"{exc}; check that the registry's database is reachable, then run again"
    elif isinstance(exc, RegistryError | ModelError):
        line = f"{exc}; check the names (headway tenants list, headway models list)"
    elif isinstance(exc, OSError):
        line = _os_error(exc)
    else:
        line = f"{type(exc).__name__}: {exc}; run again with --debug for the traceback"
    return _one_line(line)


class HeadwayGroup(TyperGroup):
    """The root ``headway`` group: every command runs inside ``explain``'s handler."""

    def invoke(self, ctx: Any) -> Any:  # click's Context, vendored by typer
        try:
            return super().invoke(ctx)
        except UsageError as exc:
            usage: Any = exc  # click's UsageError: its context and message
            where = usage.ctx.command_path if usage.ctx is not None else ctx.command_path
            what = _one_line(usage.format_message()).rstrip(".")
            typer.echo(f"error: {what}; see `{where} -h`", err=True)
            raise typer.Exit(2) from exc
        except BrokenPipeError as exc:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no flush error
            raise typer.Exit(141) from exc
        except (typer.Exit, typer.Abort, typer.TyperException):  # click's own
            raise
        except Exception as exc:
            if ctx.meta.get(DEBUG):
                raise
            raise typer.Exit(report(exc)) from exc

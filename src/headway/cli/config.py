"""The effective settings, each with where its value came from, and a config file's check.

Examples:

  headway config show --config headway.toml   # every setting and its source
  headway config show --json                  # the same, for scripts
  headway config check deploy/headway.toml    # a file alone, before deploying it
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from headway.cli.options import ConfigOpt, DataDirOpt, flag_names, given
from headway.redis_client import redact
from headway.settings import Settings, resolve_settings
from headway.settings_sources import (
    DEFAULT,
    Resolved,
    SettingPath,
    SettingsError,
    dotted,
    is_secret,
    leaves,
    resolve,
)

config_app = typer.Typer(no_args_is_help=True, help=__doc__)


def _plain(value: Any) -> Any:
    """``value`` as JSON would hold it: paths as text, sets sorted, tuples as lists."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (frozenset, set)):
        return sorted(_plain(item) for item in value)
    if isinstance(value, (tuple, list)):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    return value


def _masked(path: SettingPath, value: Any) -> Any:
    """A secret as ``***`` (unset stays visible), a URL without its password."""
    if is_secret(path):
        return "***" if value else value
    if isinstance(value, str):
        return redact(value) if "://" in value else value
    if isinstance(value, list):
        return [_masked(path, item) for item in value]
    return value


def _value_at(settings: Settings, path: SettingPath) -> Any:
    value: Any = settings
    for name in path:
        value = getattr(value, name)
    return value


def shown(resolved: Resolved[Settings]) -> dict[str, dict[str, Any]]:
    """Every setting's masked value and its source, by dotted path."""
    return {
        dotted(path): {
            "value": _masked(path, _plain(_value_at(resolved.value, path))),
            "source": str(resolved.source_of(path)),
        }
        for path, _ in leaves(Settings)
    }


@config_app.command()
def show(
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    defaults: Annotated[
        bool, typer.Option("--defaults", help="Only the defaults: no file, environment or flag.")
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help='One JSON object: {path: {"value", "source"}}.')
    ] = False,
) -> None:
    """The effective settings, one `path = value  (source)` a line; secrets masked."""
    flags = given(data_dir=data_dir)
    try:
        resolved = (
            Resolved(Settings(), {})
            if defaults
            else resolve_settings(config_file=config, flags=flags, flag_names=flag_names(flags))
        )
    except SettingsError as exc:
        for problem in exc.problems:
            typer.echo(f"error: {problem}", err=True)
        raise typer.Exit(2) from exc
    settings = shown(resolved)
    if as_json:
        typer.echo(json.dumps(settings, indent=2))
        return
    for path, entry in settings.items():
        typer.echo(f"{path} = {json.dumps(entry['value'])}  ({entry['source']})")


@config_app.command()
def check(
    file: Annotated[Path, typer.Argument(help="The config file (.toml, .json, .yaml, .yml).")],
) -> None:
    """Parse and validate FILE alone, over the defaults; exit 2 if it is not valid.

    The environment and flags are ignored: the file is checked as it would be read in
    any deployment, and every problem in it is one line, FILE:LINE first."""
    try:
        resolved = resolve(Settings, config_file=file, environ={})
    except SettingsError as exc:
        for problem in exc.problems:
            typer.echo(problem, err=True)
        raise typer.Exit(2) from exc
    count = sum(1 for source in resolved.sources.values() if source is not DEFAULT)
    typer.echo(f"{file}: ok ({count} settings set)")

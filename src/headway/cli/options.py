"""What every command shares: the option types, and the settings they add up to."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from typer._click.globals import get_current_context  # typer's own click, vendored

from headway.cli.failures import DEBUG
from headway.settings import Settings, SettingsError, load_settings

ConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", help="Settings file: .toml, .json, .yaml or .yml.", exists=True),
]
DataDirOpt = Annotated[
    Path | None, typer.Option("--data-dir", help="Registry, model store, run files.")
]
FdOpt = Annotated[int | None, typer.Option("--fd", help="Serve on this inherited socket.")]
LogLevelOpt = Annotated[str | None, typer.Option("--log-level", help="debug|info|warning|error")]
RedisOpt = Annotated[
    str | None,
    typer.Option(
        "--redis-url", help="Shared mode: quotas in Redis, e.g. redis://127.0.0.1:6379/0."
    ),
]
CacheRedisOpt = Annotated[
    str | None,
    typer.Option(
        "--cache-redis-url",
        help="Shared mode: the results cache in its own Redis (not the quota one's), "
        "e.g. redis://127.0.0.1:6380/0.",
    ),
]
NatsOpt = Annotated[
    str | None,
    typer.Option(
        "--nats-url", help="Shared mode: usage events on NATS JetStream, nats://host:port."
    ),
]
PostgresOpt = Annotated[
    str | None,
    typer.Option(
        "--postgres-url", help="Shared mode: the usage ledger on Postgres, postgresql://…"
    ),
]
UpdateStreamsOpt = Annotated[
    bool,
    typer.Option(
        "--update-streams",
        help="Shared mode: a JetStream stream found with other limits than the settings' "
        "is changed to them (each difference logged), not refused (streams.update).",
    ),
]
AdmissionOpt = Annotated[
    str | None, typer.Option("--admission", help="on (default) or off, to compare without it.")
]


def given(**sections: dict[str, Any] | Any) -> dict[str, Any]:
    """Nested flag values, keeping only the flags that were given (False for a flag that
    only turns a setting on, ``update_streams``, is not given)."""
    out: dict[str, Any] = {}
    for key, value in sections.items():
        if isinstance(value, dict):
            present = {k: v for k, v in value.items() if v is not None}
            if present:
                out[key] = present
        elif key == "update_streams":
            if value:
                out.setdefault("streams", {})["update"] = True
        elif value is not None:
            out[key] = value
    return out


def settings_from(config: Path | None, **sections: Any) -> Settings:
    """The settings of flags > environment > ``config`` > defaults, logging configured;
    invalid settings exit 2."""
    flags = given(**sections)
    try:
        settings = load_settings(config_file=config, flags=flags, flag_names=flag_names(flags))
    except SettingsError as exc:
        for problem in exc.problems:
            typer.echo(f"error: {problem}", err=True)
        raise typer.Exit(2) from exc
    from headway.logs import configure_logging

    configure_logging(settings.log_level, settings.observability.logging.format)
    return settings


def debugging() -> bool:
    """The running command was given ``--debug`` (a traceback instead of one line)."""
    ctx = get_current_context(silent=True)
    return ctx is not None and bool(ctx.find_root().meta.get(DEBUG))


def flag_names(flags: dict[str, Any]) -> dict[tuple[str, ...], str]:
    """Each flag setting's option as the running command declares it (``--embed-replicas``
    for ``up.embed_replicas``): the parameter named like the setting, else the one that
    holds its value; a setting with neither is named by its dotted path."""
    ctx = get_current_context(silent=True)
    if ctx is None:
        return {}
    params = {param.name: param for param in ctx.command.params if param.name}

    def leaves(
        values: dict[str, Any], prefix: tuple[str, ...]
    ) -> list[tuple[tuple[str, ...], Any]]:
        found: list[tuple[tuple[str, ...], Any]] = []
        for key, value in values.items():
            path = (*prefix, key)
            found += leaves(value, path) if isinstance(value, dict) else [(path, value)]
        return found

    names: dict[tuple[str, ...], str] = {}
    for path, value in leaves(flags, ()):
        candidates = [path[-1], "_".join(path), "_".join(reversed(path[-2:]))]
        param = next((params[name] for name in candidates if name in params), None)
        if param is None:
            holding = [
                params[name]
                for name, given_value in ctx.params.items()
                if name in params and given_value is not None and _same(given_value, value)
            ]
            param = holding[0] if len(holding) == 1 else None
        if param is None:
            continue
        opts = param.secondary_opts if value is False and param.secondary_opts else param.opts
        typed = [opt for opt in opts if opt.startswith("--")] or opts
        if typed:
            names[path] = typed[0]
    return names


def _same(given_value: Any, setting: Any) -> bool:
    if isinstance(given_value, (list, tuple)) and isinstance(setting, (list, tuple)):
        return tuple(given_value) == tuple(setting)
    return bool(given_value == setting)

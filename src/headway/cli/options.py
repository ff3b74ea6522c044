"""What every command shares: the option types, and the settings they add up to."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from headway.settings import Settings, load_settings

ConfigOpt = Annotated[
    Path | None, typer.Option("--config", help="TOML or JSON settings file.", exists=True)
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
    try:
        settings = load_settings(config_file=config, flags=given(**sections))
    except (ValueError, OSError) as exc:
        typer.echo(f"invalid settings: {exc}", err=True)
        raise typer.Exit(2) from exc
    from headway.logs import configure_logging

    configure_logging(settings.log_level, settings.observability.logging.format)
    return settings

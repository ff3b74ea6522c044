"""The data dir a command reads, refused when it is not there.

Only the commands that set a system up create a data dir: ``up``, ``tenants add``,
``models import`` and ``fetch``, ``db migrate``, ``certs init``, ``billing restore`` (and
the processes ``run`` starts). Every other command reads an existing one: a missing or
empty data dir is a mistake (the wrong folder, a forgotten ``--data-dir``), and the
command says which folder it looked in and why, instead of creating an empty registry
there. In shared mode (``postgres_url``) the registry is on Postgres and no local data
dir is needed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from headway.cli.failures import CliError
from headway.cli.options import settings_from

if TYPE_CHECKING:
    from headway.registry.store import RegistryStore
    from headway.settings import Settings

DEFAULT = Path(".headway")


def origin(settings: Settings, flag: Path | None, config: Path | None) -> str:
    """Why the data dir is where it is: the flag, the environment, the file, or the default."""
    if flag is not None:
        return "--data-dir"
    if os.environ.get("HEADWAY_DATA_DIR"):
        return "HEADWAY_DATA_DIR"
    if config is not None and settings.data_dir != DEFAULT.absolute():
        return f"the config file {config}"
    return "the default ./.headway"


def require_data_dir(settings: Settings, flag: Path | None, config: Path | None) -> None:
    """``CliError`` unless the data dir exists and holds something (not in shared mode)."""
    if settings.postgres_url:
        return
    path = settings.data_dir
    why = f"looked there because of {origin(settings, flag, config)}"
    if path.exists() and not path.is_dir():
        raise CliError(
            f"the headway data dir {path} is a file, not a folder ({why})",
            "pass --data-dir to the data dir's folder",
        )
    if not path.is_dir() or not any(path.iterdir()):
        raise CliError(
            f"no headway data dir at {path} ({why})",
            "run `headway up` here first or pass --data-dir",
        )


def existing_settings(config: Path | None, data_dir: Path | None, **sections: Any) -> Settings:
    """The settings (``settings_from``) of a command that reads an existing data dir."""
    settings = settings_from(config, data_dir=data_dir, **sections)
    require_data_dir(settings, data_dir, config)
    return settings


SQLITE_HEADER = b"SQLite format 3\x00"


def registry_of(settings: Settings) -> RegistryStore:
    """The registry the settings name; a registry file that is no SQLite database (a
    truncated copy, a file written over) is a ``CliError`` naming it."""
    from headway.registry.open import open_registry

    path = settings.registry_path
    if not settings.postgres_url and path.is_file() and path.stat().st_size:
        with path.open("rb") as file:
            header = file.read(len(SQLITE_HEADER))
        if header != SQLITE_HEADER:
            raise CliError(
                f"the registry {path} is not a SQLite database (damaged or written over)",
                "move it aside and put back a copy from a backup",
            )
    return open_registry(settings)

"""The registry a command reads and writes, its refusals as exits, and the audit actor.

Every registry command opens it through ``open_for_cli`` (an existing data dir, unless
it is one of the few that create one) and writes inside ``refusals_exit``, as
``cli:<user>``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from headway.cli.datadir import existing_settings, registry_of
from headway.cli.failures import CliError
from headway.cli.options import settings_from

if TYPE_CHECKING:
    from headway.registry.model import Actor
    from headway.registry.store import RegistryStore


@contextmanager
def refusals_exit() -> Iterator[None]:
    """The registry's refusal of a write exits: 2 for a bad --tier, --rate or --burst (a bad
    argument), 1 for the rest (a duplicate or unknown tenant, a key in use)."""
    from headway.registry.errors import (
        InvalidBillingCustomer,
        InvalidGate,
        InvalidLimit,
        InvalidQuota,
        RegistryError,
        UnknownTier,
    )
    from headway.registry.model import TIERS

    try:
        yield
    except UnknownTier as exc:
        raise CliError(str(exc), f"say --tier {' or '.join(TIERS)}", code=2) from exc
    except InvalidQuota as exc:
        flag = str(exc).replace("rate_texts_per_s", "--rate").replace("burst_texts", "--burst")
        raise CliError(flag, "give it a positive number", code=2) from exc
    except (InvalidLimit, InvalidBillingCustomer, InvalidGate) as exc:
        raise CliError(str(exc), "change that argument", code=2) from exc
    except RegistryError as exc:
        raise CliError(
            str(exc), "check the names (headway tenants list, headway models list)"
        ) from exc


def cli_actor() -> Actor:
    """The CLI's user, as the audit log's actor."""
    import getpass

    from headway.registry.model import Actor

    return Actor(f"cli:{getpass.getuser()}")


def open_for_cli(
    config: Path | None, data_dir: Path | None, *, create: bool = False
) -> tuple[RegistryStore, Actor]:
    """The registry of an existing data dir (``create``: or a new one), and the actor."""
    settings = (
        settings_from(config, data_dir=data_dir) if create else existing_settings(config, data_dir)
    )
    return registry_of(settings), cli_actor()

"""headway models alias, split and pin: which version an alias's requests reach.

The same writes as the admin API's ``/admin/aliases`` and ``/admin/splits``, on the
registry directly (audited as ``cli:<user>``), with the API's checks (``split_of``,
``check_names``). Where the API takes version hashes, these take a version or an alias,
resolved to the version it names now. While a rollout owns an alias its split is the
rollout's: every write here is refused then, as the API refuses it (409).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

import typer

from headway.cli.failures import CliError
from headway.cli.options import ConfigOpt, DataDirOpt
from headway.cli.output import YesOpt, confirm
from headway.cli.writes import cli_actor, open_for_cli, refusals_exit

if TYPE_CHECKING:
    from headway.registry.model import Split
    from headway.registry.store import RegistryStore

AliasArg = Annotated[str, typer.Argument(help="The alias.")]


def register(models: typer.Typer) -> None:
    """Add these commands to ``headway models``."""
    models.command("alias")(models_alias)
    models.command("split")(models_split)
    models.command("pin")(models_pin)


def _version(store: RegistryStore, name: str, what: str) -> str:
    record = store.resolve_model(name)
    if record is None:
        raise CliError(f"{what}: no alias or version {name!r}", "headway models list shows them")
    return record.version


def _split_of(store: RegistryStore, alias: str) -> Split | None:
    return next((split for split in store.splits() if split.alias == alias), None)


def _write(store: RegistryStore, split: Split) -> None:
    """``split`` through the admin API's checks, then the registry's."""
    from headway.control.admin.splits import check_names
    from headway.errors import ValidationFailed

    versions = {record.version for record, _ in store.models()}
    try:
        check_names(split, versions, {tenant.name for tenant in store.tenants()})
    except ValidationFailed as exc:
        raise CliError(exc.message, "headway models list and tenants list show the names") from exc
    with refusals_exit():
        store.set_split(split, actor=cli_actor())


def models_alias(
    alias: AliasArg,
    target: Annotated[
        str | None,
        typer.Argument(
            metavar="VERSION_OR_ALIAS", help="The version it names: a hash, or another alias."
        ),
    ] = None,
    delete: Annotated[bool, typer.Option("--delete", help="Remove the alias.")] = False,
    yes: YesOpt = False,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Point an alias (new or not) at one version, removing any split on it; another alias
    as the target means the version that alias names now."""
    store, actor = open_for_cli(config, data_dir)
    if delete == (target is not None):
        raise CliError("say where the alias goes", "give VERSION_OR_ALIAS, or --delete", 2)
    if target is None:
        if store.resolve_model(alias) is None or alias not in _aliases(store):
            raise CliError(f"no alias {alias!r}", "headway models list shows the aliases")
        confirm(f"Delete alias {alias} (and its split)?", yes)
        with refusals_exit():
            version = store.delete_alias(alias, actor=actor)
        typer.echo(f"alias {alias} deleted (it named {version})")
        return
    version = _version(store, target, "VERSION_OR_ALIAS")
    with refusals_exit():
        store.set_alias(alias, version, actor=actor)
    typer.echo(f"{alias} -> {version}")


def _aliases(store: RegistryStore) -> set[str]:
    return {alias for _, aliases in store.models() for alias in aliases}


def _weights(store: RegistryStore, given: list[str]) -> dict[str, float]:
    weights: dict[str, float] = {}
    for item in given:
        name, sep, weight = item.rpartition("=")
        try:
            value = float(weight)
        except ValueError:
            value = float("nan")
        if not sep or not name or not value > 0 or value == float("inf"):
            raise CliError(
                f"{item!r} is not VERSION=WEIGHT", "say e.g. embed-v2=9 (a weight above 0)", 2
            )
        version = _version(store, name, item)
        weights[version] = weights.get(version, 0.0) + value
    return weights


def _shadow(store: RegistryStore, text: str | None) -> tuple[str, float] | None:
    if text is None:
        return None
    name, sep, share = text.rpartition(":")
    try:
        value = float(share)
    except ValueError:
        value = float("nan")
    if not sep or not name or not 0 < value <= 1:
        raise CliError(
            f"--shadow {text!r} is not VERSION:SHARE", "say e.g. --shadow embed-v3:0.1", 2
        )
    return _version(store, name, "--shadow"), value


def models_split(
    alias: AliasArg,
    weights: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="VERSION=WEIGHT...",
            help="Relative weights (they need not sum to 1); VERSION is a hash or an alias.",
        ),
    ] = None,
    sticky: Annotated[
        Literal["tenant", "user", "none"],
        typer.Option(help="Keep each tenant (or user) on one version, or not."),
    ] = "tenant",
    shadow: Annotated[
        str | None,
        typer.Option(metavar="VERSION:SHARE", help="Also copy this share of requests to VERSION."),
    ] = None,
    delete: Annotated[
        bool, typer.Option("--delete", help="Remove the split: the alias serves its version.")
    ] = False,
    yes: YesOpt = False,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Spread an alias's requests over versions by weight (its pins are kept).

    Examples:

      headway models split embed embed-v1=9 embed-v2=1        # a tenth to v2
      headway models split embed 3f2a9c...=1 --sticky user --shadow embed-v3:0.05
      headway models split embed --delete --yes               # back to its one version
    """
    from headway.control.admin.splits import ShadowBody, SplitBody, split_of

    store, actor = open_for_cli(config, data_dir)
    if alias not in _aliases(store):
        raise CliError(f"no alias {alias!r}", "headway models list shows the aliases")
    if delete:
        if weights:
            raise CliError("--delete takes no weights", "give weights or --delete", 2)
        confirm(f"Delete the split of {alias}?", yes)
        with refusals_exit():
            store.delete_split(alias, actor=actor)
        typer.echo(f"split of {alias} deleted")
        return
    if not weights:
        raise CliError("no weights", "give VERSION=WEIGHT at least once (or --delete)", 2)
    current = _split_of(store, alias)
    shadow_given = _shadow(store, shadow)
    body = SplitBody(
        weights=_weights(store, weights),
        sticky=sticky,
        pins={} if current is None else dict(current.pins),
        shadow=None if shadow_given is None else ShadowBody(*shadow_given),
    )
    split = split_of(alias, body)
    _write(store, split)
    shares = "  ".join(f"{version[:12]}={weight:g}" for version, weight in split.weights)
    typer.echo(f"split of {alias}: {shares}  sticky={split.sticky}")


def models_pin(
    alias: AliasArg,
    tenant: Annotated[str, typer.Argument(help="The tenant to pin.")],
    target: Annotated[
        str | None,
        typer.Argument(metavar="VERSION_OR_ALIAS", help="The version it always gets."),
    ] = None,
    remove: Annotated[bool, typer.Option("--remove", help="Remove the tenant's pin.")] = False,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Pin a tenant to one version of an alias, whatever the split's weights say (an alias
    without a split gets one: all of its weight on its version)."""
    from dataclasses import replace

    from headway.registry.model import Split

    store, _ = open_for_cli(config, data_dir)
    if remove == (target is not None):
        raise CliError("say where the tenant goes", "give VERSION_OR_ALIAS, or --remove", 2)
    primary = store.resolve_model(alias)
    if primary is None or alias not in _aliases(store):
        raise CliError(f"no alias {alias!r}", "headway models list shows the aliases")
    current = _split_of(store, alias) or Split(alias, ((primary.version, 1.0),), "tenant")
    pins = dict(current.pins)
    if remove:
        if pins.pop(tenant, None) is None:
            raise CliError(
                f"{tenant} has no pin on {alias}", "headway models show ALIAS shows them"
            )
    else:
        assert target is not None
        pins[tenant] = _version(store, target, "VERSION_OR_ALIAS")
    _write(store, replace(current, pins=tuple(sorted(pins.items()))))
    typer.echo(
        f"{tenant} unpinned from {alias}" if remove else f"{tenant} on {alias} -> {pins[tenant]}"
    )

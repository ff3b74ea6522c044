"""``headway models fetch | verify | keygen | sign``: artifacts across machines, signed.

``fetch`` is what an init container runs: the version into this data dir's store from a
gateway (``--from``, else ``weights.url``), resumable, verified, its signature held to
``weights.trusted_keys``; it prints the version and the path, or the error and exits 1.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from headway.cli.datadir import existing_settings
from headway.cli.failures import CliError
from headway.cli.options import ConfigOpt, DataDirOpt, settings_from

if TYPE_CHECKING:
    from headway.models.weights.base import WeightsSource
    from headway.settings import Settings

KeyOpt = Annotated[Path, typer.Option("--key", help="The private key `keygen` wrote.")]


def register(models: typer.Typer) -> None:
    """Add these commands to ``headway models``, after ``import`` and ``list``."""
    models.command("fetch")(models_fetch)
    models.command("verify")(models_verify)
    models.command("keygen")(models_keygen)
    models.command("sign")(models_sign)


def models_fetch(
    version: str,
    from_url: Annotated[
        str | None,
        typer.Option("--from", help="The gateway serving its store (default: weights.url)."),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(help="Its worker credential or an admin key (default: weights.token)."),
    ] = None,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Fetch a model version into the local store (an init container's job): resumable,
    every file checked against the version; prints the version and its path. A version
    already stored is verified (and needs no --from)."""
    settings = settings_from(config, data_dir=data_dir, weights={"url": from_url, "token": token})
    source = _source(settings)
    if source is None:
        from headway.models.store import ModelStore

        if not (ModelStore(settings.model_root).root / version).is_dir():
            raise CliError(
                f"version {version[:80]} is not in {settings.model_root}, and there is nowhere"
                " to fetch it from",
                "give --from URL or set weights.url",
                2,
            )
    _load(settings, version, source, "fetch")


def models_verify(version: str, config: ConfigOpt = None, data_dir: DataDirOpt = None) -> None:
    """Hash a stored version's files again and check its signature (exit 1 if either
    fails), as a worker does before it loads it."""
    settings = existing_settings(config, data_dir)
    _load(settings, version, None, "verify")


def models_keygen(
    out: Annotated[Path, typer.Option("--out", help="Where to write the private key (new).")],
) -> None:
    """Make an ed25519 signing key (written 0600) and print its public key, the form
    weights.trusted_keys takes."""
    from headway.models.errors import ModelError
    from headway.models.weights.signing import write_new_key

    try:
        public_key = write_new_key(out)
    except ModelError as exc:
        typer.echo(f"keygen failed: {exc}", err=True)
        raise typer.Exit(1) from exc
    typer.echo(public_key)


def models_sign(
    version: str, key: KeyOpt, config: ConfigOpt = None, data_dir: DataDirOpt = None
) -> None:
    """Sign a stored version (verified first): the signature goes beside the artifact, and
    travels with it when it is fetched."""
    settings = existing_settings(config, data_dir)
    from headway.models.errors import ModelError
    from headway.models.store import ModelStore
    from headway.models.weights.signing import load_key, public_key_of, sign_artifact

    try:
        signing_key = load_key(key)
        path = sign_artifact(ModelStore(settings.model_root), version, signing_key)
    except ModelError as exc:
        typer.echo(f"sign failed: {exc}", err=True)
        raise typer.Exit(1) from exc
    typer.echo(f"{version}  signed by {public_key_of(signing_key)}  {path}")


def _source(settings: Settings) -> WeightsSource | None:
    from headway.models.weights.load import weights_source
    from headway.tls.hops import gateway_client

    tls = gateway_client(settings.tls)
    return weights_source(settings.weights, tls.current if tls is not None else None)


def _load(settings: Settings, version: str, source: WeightsSource | None, verb: str) -> None:
    from headway.models.errors import ModelError
    from headway.models.store import ModelStore
    from headway.models.weights.load import ArtifactLoader
    from headway.models.weights.signing import SignaturePolicy

    policy = SignaturePolicy.from_settings(settings.weights)
    loader = ArtifactLoader(ModelStore(settings.model_root), source, policy)
    try:
        model = loader.load(version)
    except ModelError as exc:
        typer.echo(f"{verb} failed: {exc}", err=True)
        raise typer.Exit(1) from exc
    typer.echo(f"{model.version}  {model.path}")

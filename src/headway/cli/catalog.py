"""headway models and headway tenants: what the registry holds.

Every command here but ``tenants add`` and ``models import`` reads an existing data dir
(``datadir.py``); list and show print a table, or one JSON document with ``--json``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from headway.cli import keys
from headway.cli.datadir import existing_settings, registry_of
from headway.cli.failures import CliError
from headway.cli.options import ConfigOpt, DataDirOpt, settings_from
from headway.cli.output import JsonOpt, YesOpt, alias_of, confirm, emit_json, renamed
from headway.cli.writes import open_for_cli, refusals_exit

if TYPE_CHECKING:
    from headway.registry.model import ModelRecord, Tenant, TenantDeletion
    from headway.registry.store import RegistryStore
    from headway.settings import Settings

models_app = typer.Typer(
    no_args_is_help=True, help="Model versions: import, list, alias, split and sign them."
)
tenants_app = typer.Typer(
    no_args_is_help=True, help="Tenants: add, change, list and delete them (keys: headway keys)."
)

RateOpt = Annotated[float | None, typer.Option(help="Quota refill, texts per second.")]
BurstOpt = Annotated[float | None, typer.Option(help="Quota bucket size, texts.")]
MaxFilesOpt = Annotated[
    str | None,
    typer.Option(help="Most files the tenant keeps (Batch API), or 'default': the setting."),
]
MaxStoredBytesOpt = Annotated[
    str | None,
    typer.Option(help="Most bytes of files the tenant keeps, or 'default': the setting."),
]
MaxOpenBatchesOpt = Annotated[
    str | None,
    typer.Option(help="Most unfinished batches the tenant has, or 'default': the setting."),
]
BillingCustomerOpt = Annotated[
    str | None,
    typer.Option(
        help="The tenant's customer id at the billing provider (such as cus_NffrFeUfNV2Hib), "
        "or 'none' to remove it; the usage export refuses a tenant without one."
    ),
]


@models_app.command("import")
def models_import(
    path: Annotated[
        Path | None,
        typer.Argument(
            help="A Hugging Face / sentence-transformers folder, or an .onnx graph (the "
            "folder beside it, when there is one, says the rest). None: the packaged "
            "all-MiniLM-L6-v2.",
            exists=True,
        ),
    ] = None,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    quantize: Annotated[
        bool, typer.Option("--int8", help="Also store an int8 (per-channel) version.")
    ] = False,
    cross_encoder: Annotated[
        Path | None,
        typer.Option(
            help="A cross-encoder folder (the alias defaults to the rerank model).", exists=True
        ),
    ] = None,
    onnx: Annotated[
        Path | None,
        typer.Option(help="An ONNX graph (the same as giving it as PATH).", exists=True),
    ] = None,
    tokenizer: Annotated[
        Path | None,
        typer.Option(help="The graph's tokenizer.json (default: the one beside it).", exists=True),
    ] = None,
    kind: Annotated[
        Literal["embedding", "cross-encoder"] | None,
        typer.Option(help="What the model does (default: as the folder says)."),
    ] = None,
    pooling: Annotated[
        Literal["none", "mean", "cls", "last"] | None,
        typer.Option(
            help="none (one row per text), mean, cls or last (token rows); default: as the "
            "folder says, or none for a graph alone."
        ),
    ] = None,
    normalize: Annotated[
        bool | None,
        typer.Option(help="L2-normalise each row (default: as the folder says)."),
    ] = None,
    max_tokens: Annotated[
        int | None, typer.Option(help="Truncate inputs to this (default: as the folder says).")
    ] = None,
    matryoshka: Annotated[
        list[int] | None,
        typer.Option(
            help="--onnx: a narrower width the model was trained to be truncated to "
            "(Matryoshka), which requests may ask for; repeat for each."
        ),
    ] = None,
    name: Annotated[
        str | None, typer.Option(help="The model's name (default: its folder's).")
    ] = None,
    alias: Annotated[
        list[str] | None,
        typer.Option(help="Alias(es) for the imported version (default: its name)."),
    ] = None,
    sign_key: Annotated[
        Path | None,
        typer.Option(help="Sign each imported version with this key (`models keygen`)."),
    ] = None,
) -> None:
    """Build or take an ONNX artifact into the content-addressed store, and register it.

    Examples:

      headway models import                                 # the packaged default model
      headway models import ./bge-small-en-v1.5 --int8      # a folder, and its int8 too
      headway models import --onnx model.onnx --tokenizer tokenizer.json --name mine
      headway models import --cross-encoder ./ms-marco-MiniLM-L-6-v2
    """
    sources = [p for p in (path, cross_encoder, onnx) if p is not None]
    if len(sources) > 1:
        raise CliError(
            "more than one model given", "give one of PATH, --onnx and --cross-encoder", 2
        )
    if not sources and (tokenizer is not None or matryoshka):
        flag = "--tokenizer" if tokenizer is not None else "--matryoshka"
        raise CliError(
            f"{flag} goes with a graph, and none was given",
            "give the graph with --onnx GRAPH (without one, the packaged default model is"
            " imported and it takes no flags)",
            2,
        )
    settings = settings_from(config, data_dir=data_dir)
    import getpass

    from headway.catalog import DEFAULT_ALIASES, register
    from headway.models.errors import ModelError
    from headway.models.importer import import_default
    from headway.models.intake import ImportOptions, import_path
    from headway.models.store import ModelStore, StoredModel
    from headway.models.weights.signing import load_key, sign_artifact
    from headway.registry.model import Actor
    from headway.variants import derive_int8

    store = ModelStore(settings.model_root)
    registry = registry_of(settings)
    actor = Actor(f"cli:{getpass.getuser()}")
    options = ImportOptions(
        name=name,
        kind="cross-encoder" if cross_encoder is not None else kind,
        pooling=pooling,
        normalize=normalize,
        max_tokens=max_tokens,
        tokenizer=tokenizer,
        matryoshka_dimensions=tuple(matryoshka or ()),
    )

    def add(stored: StoredModel, aliases: tuple[str, ...]) -> None:
        if signing_key is not None:
            sign_artifact(store, stored.version, signing_key)
        register(registry, stored, aliases, actor)
        names = ", ".join(aliases) or "-"
        signed = "  signed" if signing_key is not None else ""
        typer.echo(f"{stored.version}  {stored.manifest.name}  aliases: {names}{signed}")

    try:
        signing_key = load_key(sign_key) if sign_key is not None else None  # before the work
        if sources:
            imported = import_path(store, sources[0], options)
            stored = imported.model
            for note in imported.assumed:
                typer.echo(f"assumed: {note}", err=True)
            fallback = settings.rerank_model if cross_encoder is not None else stored.manifest.name
            aliases = tuple(alias or [fallback])
        else:
            stored = import_default(store)
            aliases = tuple(alias or DEFAULT_ALIASES)
        add(stored, aliases)
        if quantize:
            int8_aliases = tuple(f"{a}-int8" for a in aliases)
            add(derive_int8(store, stored), int8_aliases)
            aliases += int8_aliases
    except ModelError as exc:
        typer.echo(f"import failed: {exc}", err=True)
        raise typer.Exit(1) from exc
    warn_unpriced(settings, aliases)


def warn_unpriced(settings: Settings, aliases: tuple[str, ...]) -> None:
    """Say which aliases the price book cannot invoice, and how to add them."""
    import time

    from headway.billing.prices import PriceBookError, configured_prices, missing_prices

    try:
        book = configured_prices(settings.billing.price_book)
    except PriceBookError as exc:
        typer.echo(
            f"warning: the price book cannot be read, so nothing can be invoiced: {exc}", err=True
        )
        return
    for warning in missing_prices(book, aliases, time.time()):
        typer.echo(f"warning: {warning}", err=True)


def _model_document(record: ModelRecord, aliases: list[str]) -> dict[str, Any]:
    from dataclasses import asdict

    agreement, gate = record.agreement, record.variant_gate
    return {
        "version": record.version,
        "name": record.name,
        "kind": record.kind,
        "dimensions": record.dimensions,
        "quantization": record.quantization,
        "size_bytes": record.size_bytes,
        "max_tokens": record.max_tokens,
        "matryoshka_dimensions": list(record.matryoshka_dimensions),
        "aliases": list(aliases),
        "agreement": None if agreement is None else asdict(agreement),
        "variant_gate": None if gate is None else asdict(gate),
    }


@models_app.command("list")
def models_list(
    as_json: JsonOpt = False, config: ConfigOpt = None, data_dir: DataDirOpt = None
) -> None:
    """Model versions in the registry, with their size and aliases."""
    models = registry_of(existing_settings(config, data_dir)).models()
    if as_json:
        emit_json({"data": [_model_document(record, aliases) for record, aliases in models]})
        return
    for record, aliases in models:
        agreement = record.agreement
        derived = (
            f"  agrees with {agreement.source[:12]}: mean cosine {agreement.mean_cosine:.4f}, "
            f"neighbours {agreement.nn_agreement:.4f}"
            if agreement is not None
            else ""
        )
        gate = record.variant_gate
        gated = (
            f"  gate: variants need mean cosine >= {gate.min_mean_cosine:g}, "
            f"neighbours >= {gate.min_nn_agreement:g}"
            if gate is not None
            else ""
        )
        typer.echo(
            f"{record.version}  {record.name}  {record.kind}  dims={record.dimensions}  "
            f"{record.quantization}  {record.size_bytes / 1e6:.1f} MB  "
            f"aliases: {', '.join(aliases) or '-'}{derived}{gated}"
        )


@models_app.command("show")
def models_show(
    name: Annotated[str, typer.Argument(help="An alias or a version.")],
    as_json: JsonOpt = False,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """One model version: what it is, its aliases, and the split of each alias."""
    registry = registry_of(existing_settings(config, data_dir))
    record = registry.resolve_model(name)
    if record is None:
        raise CliError(f"no alias or version {name!r}", "headway models list shows them")
    aliases = next((a for r, a in registry.models() if r.version == record.version), [])
    splits = [split for split in registry.splits() if split.alias in aliases]
    document = _model_document(record, aliases)
    document["splits"] = {
        split.alias: {
            "weights": dict(split.weights),
            "sticky": split.sticky,
            "pins": dict(split.pins),
            "shadow": None
            if split.shadow is None
            else {"version": split.shadow.version, "share": split.shadow.share},
        }
        for split in splits
    }
    if as_json:
        emit_json(document)
        return
    for key in ("version", "name", "kind", "dimensions", "quantization", "max_tokens"):
        typer.echo(f"{key}: {document[key]}")
    typer.echo(f"size: {record.size_bytes / 1e6:.1f} MB")
    typer.echo(f"aliases: {', '.join(aliases) or '-'}")
    for alias, split in document["splits"].items():
        weights = " ".join(f"{v[:12]}={w:g}" for v, w in split["weights"].items())
        pins = " ".join(f"{t}->{v[:12]}" for t, v in split["pins"].items())
        typer.echo(f"split {alias}: {weights}  sticky={split['sticky']}  pins: {pins or '-'}")


@models_app.command("gate")
def models_gate(
    name: Annotated[str, typer.Argument(help="The source model: an alias or a version.")],
    min_mean_cosine: Annotated[
        float | None,
        typer.Option(help="Least mean cosine a variant must have with this model."),
    ] = None,
    min_neighbours: Annotated[
        float | None,
        typer.Option(help="Least nearest-neighbour agreement a variant must have."),
    ] = None,
    clear: Annotated[bool, typer.Option(help="Remove the gate.")] = False,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Set what a version derived from this model (its int8) must agree with it on the
    reference texts before a rollout promotes it; a rollout refuses one that falls short."""
    settings = existing_settings(config, data_dir)
    import getpass

    from headway.registry.model import Actor, VariantGate

    if clear == (min_mean_cosine is not None or min_neighbours is not None):
        raise CliError(
            "a gate or --clear, not both nor neither",
            "give --min-mean-cosine and/or --min-neighbours, or --clear",
            2,
        )
    registry = registry_of(settings)
    record = registry.resolve_model(name)
    if record is None:
        raise CliError(f"no alias or version {name!r}", "headway models list shows them")
    gate = None if clear else VariantGate(min_mean_cosine or 0.0, min_neighbours or 0.0)
    with refusals_exit():
        registry.set_variant_gate(record.version, gate, actor=Actor(f"cli:{getpass.getuser()}"))
    typer.echo(f"{record.version}  {record.name}  gate: {gate or 'none'}")


def _line(tenant: Tenant, settings: Settings) -> str:
    """The tenant's tier, quota and Batch API bounds (``(default)``: the setting's)."""
    batches = settings.batches
    defaults = {
        "max_files": batches.max_files_per_tenant,
        "max_stored_bytes": batches.max_stored_bytes_per_tenant,
        "max_open_batches": batches.max_open_batches_per_tenant,
    }
    own = tenant.batch_limits
    bounds = "  ".join(
        f"{name}={getattr(own, name)}"
        if getattr(own, name) is not None
        else f"{name}={default}(default)"
        for name, default in defaults.items()
    )
    return (
        f"{tenant.name}  {tenant.tier}  rate={tenant.rate_texts_per_s:g}/s  "
        f"burst={tenant.burst_texts:g}  {bounds}"
    )


def _limit_changes(**given: str | None) -> dict[str, int | None]:
    """The Batch API bounds given on the command line: a whole number, or ``default`` (None:
    back to the setting); exits 2 on anything else."""
    changes: dict[str, int | None] = {}
    for name, text in given.items():
        if text is None:
            continue
        value = text.strip()
        if value == "default":
            changes[name] = None
        elif value.isascii() and value.isdigit() and len(value) <= 19:
            changes[name] = int(value)
        else:
            option = "--" + name.replace("_", "-")
            typer.echo(f"{option} must be a whole number from 0, or 'default'", err=True)
            raise typer.Exit(2)
    return changes


@tenants_app.command("add")
def tenants_add(
    name: str,
    tier: Annotated[str, typer.Option(help="interactive or batch.")] = "interactive",
    rate: RateOpt = None,
    burst: BurstOpt = None,
    max_files: MaxFilesOpt = None,
    max_stored_bytes: MaxStoredBytesOpt = None,
    max_open_batches: MaxOpenBatchesOpt = None,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Create a tenant and print its API key (shown once, stored only as a hash).

    Examples:

      headway tenants add acme                          # interactive tier, its defaults
      headway tenants add nightly-index --tier batch --rate 50 --burst 500
      headway tenants add acme --max-files 100 --data-dir /srv/headway
    """
    from headway.registry.errors import InvalidTenantName
    from headway.registry.rules import tenant_name

    try:
        tenant_name(name)
    except InvalidTenantName as exc:
        raise CliError(str(exc), "choose a name that follows the rule", 2) from exc
    limits = _limit_changes(
        max_files=max_files, max_stored_bytes=max_stored_bytes, max_open_batches=max_open_batches
    )
    registry, actor = open_for_cli(config, data_dir, create=True)
    with refusals_exit():
        tenant, key = registry.add_tenant(
            name,
            tier,
            actor=actor,
            rate_texts_per_s=rate,
            burst_texts=burst,
            batch_limits=limits,
        )
    typer.echo(f"tenant {tenant.name} ({tenant.tier}) created; API key (shown once):")
    typer.echo(key)


@tenants_app.command("set")
def tenants_set(
    name: str,
    tier: Annotated[str | None, typer.Option(help="interactive or batch.")] = None,
    rate: RateOpt = None,
    burst: BurstOpt = None,
    max_files: MaxFilesOpt = None,
    max_stored_bytes: MaxStoredBytesOpt = None,
    max_open_batches: MaxOpenBatchesOpt = None,
    billing_customer: BillingCustomerOpt = None,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Change a tenant's tier, quota, Batch API bounds or billing customer (running
    gateways pick it up within seconds, the usage export on its next run)."""
    limits = _limit_changes(
        max_files=max_files, max_stored_bytes=max_stored_bytes, max_open_batches=max_open_batches
    )
    registry, actor = open_for_cli(config, data_dir)
    now: str | None = None
    with refusals_exit():
        tenant = registry.update_tenant(
            name,
            actor=actor,
            tier=tier,
            rate_texts_per_s=rate,
            burst_texts=burst,
            batch_limits=limits,
        )
        if billing_customer is not None:
            customer = None if billing_customer == "none" else billing_customer
            _, now = registry.set_billing_customer(name, customer, actor=actor)
    typer.echo(_line(tenant, existing_settings(config, data_dir)))
    if billing_customer is not None:
        typer.echo(f"billing customer: {now or 'none'}")


def _tenant_document(tenant: Tenant, customer: str | None) -> dict[str, Any]:
    """The registry's fields of the tenant, every Batch API bound among them (None: the
    setting applies, ``batches.max_files_per_tenant``…), and its billing customer."""
    from dataclasses import asdict

    from headway.registry.codec import tenant_json

    return tenant_json(tenant) | asdict(tenant.batch_limits) | {"billing_customer": customer}


@tenants_app.command("list")
def tenants_list(
    as_json: JsonOpt = False, config: ConfigOpt = None, data_dir: DataDirOpt = None
) -> None:
    """Tenants with their tier, quota and Batch API bounds."""
    settings = existing_settings(config, data_dir)
    registry = registry_of(settings)
    tenants = registry.tenants()
    if as_json:
        customers = registry.billing_customers()
        emit_json({"data": [_tenant_document(t, customers.get(t.id)) for t in tenants]})
        return
    for tenant in tenants:
        typer.echo(_line(tenant, settings))


@tenants_app.command("show")
def tenants_show(
    name: str, as_json: JsonOpt = False, config: ConfigOpt = None, data_dir: DataDirOpt = None
) -> None:
    """One tenant: its tier, quota, Batch API bounds, billing customer and keys."""
    from headway.cli.keys import key_document, key_line

    settings = existing_settings(config, data_dir)
    registry = registry_of(settings)
    with refusals_exit():
        tenant = registry.tenant(name)
        keys = registry.keys(name)
    customer = registry.billing_customers().get(tenant.id)
    if as_json:
        document = _tenant_document(tenant, customer)
        document["keys"] = [key_document(key) for key in keys]
        emit_json(document)
        return
    typer.echo(_line(tenant, settings))
    typer.echo(f"id: {tenant.id}  billing customer: {customer or 'none'}")
    for key in keys:
        typer.echo(f"key {key_line(key)}")


@tenants_app.command("delete")
def tenants_delete(
    name: str, yes: YesOpt = False, config: ConfigOpt = None, data_dir: DataDirOpt = None
) -> None:
    """Delete a tenant: its keys are refused at once; its files, batches and Redis cache
    entries (its shared group's, if it is in one) go with it; its usage ledger rows are
    kept (they are what it is billed for, under its id, which no later tenant gets)."""
    from headway.registry.model import TenantDeletion

    registry, actor = open_for_cli(config, data_dir)
    with refusals_exit():
        registry.tenant(name)
    confirm(f"Delete tenant {name} and its files and batches?", yes)
    with refusals_exit():
        tenant = registry.delete_tenant(name, actor=actor)
    deletion = TenantDeletion(tenant.id, tenant.name, 0.0, None, None)
    finished = _finish_deletions(existing_settings(config, data_dir), registry, [deletion])
    if not finished:
        typer.echo(
            f"tenant {tenant.name} deleted and its keys revoked; deleting its files and batches"
            " failed (logged above): run `headway tenants finish-deletions` (or let a gateway"
            " finish it)",
            err=True,
        )
        raise typer.Exit(1)
    typer.echo(
        f"tenant {tenant.name} (id {tenant.id}) deleted; its keys are revoked, its files and"
        " batches deleted, its usage is kept"
    )


@tenants_app.command("finish-deletions")
def tenants_finish_deletions(config: ConfigOpt = None, data_dir: DataDirOpt = None) -> None:
    """Finish deleting what deleted tenants left outside the registry (files, batches,
    cache entries) where a deletion stopped part-way; exits 1 if one still fails."""
    registry, _ = open_for_cli(config, data_dir)
    pending = registry.tenant_deletions()
    finished = _finish_deletions(existing_settings(config, data_dir), registry, pending)
    typer.echo(f"{finished} of {len(pending)} unfinished tenant deletions finished")
    raise typer.Exit(0 if finished == len(pending) else 1)


def _finish_deletions(
    settings: Settings, registry: RegistryStore, deletions: list[TenantDeletion]
) -> int:
    """``control/tenants.py`` on this process's stores; how many finished."""
    import asyncio

    from headway.batches.filestore import DirectoryFileStore
    from headway.batches.open import open_batch_store
    from headway.cache.redis_tier import RedisCache
    from headway.cache.scopes import Scopes
    from headway.control.tenants import TenantData
    from headway.redis_client import cache_endpoint

    cache = settings.gateway.cache
    shared = None
    endpoint = cache_endpoint(settings)
    if endpoint is not None and cache.redis:
        shared = RedisCache(endpoint, ttl_s=cache.redis_ttl_s)

    async def forget(name: str, tenant_id: int) -> None:
        if shared is not None:
            for scope in Scopes(cache.shared_groups).holding(name, tenant_id):
                await shared.drop_scope(scope)

    async def finish_all() -> int:
        data = TenantData(registry, store, DirectoryFileStore(settings.files_dir), forget)
        try:
            return sum([await data.finish(deletion) for deletion in deletions])
        finally:
            if shared is not None:
                await shared.close()

    store = open_batch_store(settings)
    try:
        return asyncio.run(finish_all())
    finally:
        store.close()


@tenants_app.command("keys", hidden=True)
def tenants_keys(name: str, config: ConfigOpt = None, data_dir: DataDirOpt = None) -> None:
    """The old name of headway keys list TENANT."""
    renamed("tenants keys", "keys list")
    keys.keys_list(name, config=config, data_dir=data_dir)


tenants_app.command("rotate-key", hidden=True)(
    alias_of(keys.keys_rotate, "tenants rotate-key", "keys rotate")
)


@tenants_app.command("revoke-key", hidden=True)
def tenants_revoke_key(key_id: str, config: ConfigOpt = None, data_dir: DataDirOpt = None) -> None:
    """The old name of headway keys revoke (it asked nothing: the old behaviour stays)."""
    renamed("tenants revoke-key", "keys revoke")
    keys.revoke(key_id, None, config, data_dir)


tenants_app.command("admin-key", hidden=True)(
    alias_of(keys.keys_add_admin, "tenants admin-key", "keys add-admin")
)


@tenants_app.command("admin-keys", hidden=True)
def tenants_admin_keys(config: ConfigOpt = None, data_dir: DataDirOpt = None) -> None:
    """The old name of headway keys list --admin."""
    renamed("tenants admin-keys", "keys list --admin")
    keys.keys_list(None, admin=True, config=config, data_dir=data_dir)


@tenants_app.command("demo")
def tenants_demo(
    remove: Annotated[
        bool,
        typer.Option(
            "--remove",
            help="Remove all four: the demo tenants (with their files and batches) and the "
            "demo admin key (making another admin key first if it is the last one).",
        ),
    ] = False,
    yes: YesOpt = False,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Which of the README's demo keys this registry still accepts; --remove removes them."""
    import time

    from headway.registry.demo import DEMO_KEYS, DEMO_TENANTS, live_demo_keys, plan_removal
    from headway.registry.model import TenantDeletion

    registry, actor = open_for_cli(config, data_dir)
    live = live_demo_keys(registry.snapshot())
    if not remove:
        for key in DEMO_KEYS:
            typer.echo(f"{key}  {'live' if key in live else 'gone'}")
        return
    confirm("Remove the demo tenants, with their files and batches, and the demo admin key?", yes)
    names = {tenant.name for tenant in registry.tenants()}
    tenant_keys = {name: registry.keys(name) for name, _, _ in DEMO_TENANTS if name in names}
    plan = plan_removal(tenant_keys, registry.keys(None), time.time())
    settings = existing_settings(config, data_dir)
    with refusals_exit():
        if plan.needs_admin_key:
            record, key = registry.add_admin_key(actor=actor)
            typer.echo(f"admin key {record.key_id} created to replace the demo one (shown once):")
            typer.echo(key)
        for name in plan.delete_tenants:
            tenant = registry.delete_tenant(name, actor=actor)
            deletion = TenantDeletion(tenant.id, tenant.name, 0.0, None, None)
            _finish_deletions(settings, registry, [deletion])
            typer.echo(f"demo tenant {name} deleted")
        for key_id in plan.revoke_keys:
            registry.revoke_key(key_id, actor=actor)
            typer.echo(f"demo key {key_id} revoked")
    for name in plan.kept:
        typer.echo(f"tenant {name} kept: it never held the demo key")
    if not (plan.delete_tenants or plan.revoke_keys):
        typer.echo("no demo key is live here")

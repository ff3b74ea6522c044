"""The headway command line: every component runnable on its own, or all at once.

Examples:

  headway up                      # the whole system on this machine
  headway tenants add acme        # a tenant and its first API key
  headway models list --json      # what the registry serves, for scripts
  headway --debug tenants list    # a failure with its traceback
"""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Annotated

import typer

from headway.cli import (
    batches,
    billing,
    catalog,
    certs,
    config,
    db,
    keys,
    rollout,
    routing,
    run,
    serve,
    weights,
)
from headway.cli.failures import DEBUG, HeadwayGroup
from headway.cli.output import alias_of, fresh_invocation

COMMANDS_GROUP = "headway.commands"

HELP_OPTIONS = {"help_option_names": ["-h", "--help"]}
"""On the root, so every command's context inherits it: -h is --help everywhere."""

app = typer.Typer(
    cls=HeadwayGroup,
    no_args_is_help=True,
    add_completion=False,
    help=__doc__,
    context_settings=HELP_OPTIONS,
    pretty_exceptions_enable=False,
)


def _version(given: bool) -> None:
    if given:
        from importlib.metadata import version

        typer.echo(f"headway {version('headway')}")
        raise typer.Exit()


@app.callback()
def headway(
    ctx: typer.Context,
    debug: Annotated[
        bool, typer.Option("--debug", help="Show the traceback of a failure, not one line.")
    ] = False,
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    ctx.meta[DEBUG] = debug
    fresh_invocation()


# In the order ``headway --help`` lists them, in its panels.
app.command(rich_help_panel="Run")(serve.up)
app.add_typer(run.run_app, name="run", rich_help_panel="Run")
weights.register(catalog.models_app)  # fetch, verify, keygen, sign
routing.register(catalog.models_app)  # alias, split, pin
app.add_typer(catalog.tenants_app, name="tenants", rich_help_panel="Manage")
app.add_typer(catalog.models_app, name="models", rich_help_panel="Manage")
app.add_typer(rollout.rollout_app, name="rollouts", rich_help_panel="Manage")
app.add_typer(batches.batches_app, name="batches", rich_help_panel="Manage")
app.add_typer(billing.billing_app, name="billing", rich_help_panel="Manage")
app.add_typer(db.db_app, name="db", rich_help_panel="Manage")
app.add_typer(keys.keys_app, name="keys", rich_help_panel="Security")
app.add_typer(certs.certs_app, name="certs", rich_help_panel="Security")
app.add_typer(config.config_app, name="config", rich_help_panel="Observe")
# The old names, hidden, for one release: each says its new name on stderr first.
app.command("gateway", hidden=True)(alias_of(serve.gateway, "gateway", "run gateway"))
app.command("worker", hidden=True)(alias_of(serve.worker, "worker", "run worker"))
app.add_typer(rollout.rollout_app, name="rollout", hidden=True, callback=rollout.old_group)
# Other distributions' commands, each a Typer app under its entry point's name: the
# tooling's bench and loadgen (tools/: make test and make bench install it, the image never).
for command in sorted(entry_points(group=COMMANDS_GROUP), key=lambda point: point.name):
    app.add_typer(command.load(), name=command.name, rich_help_panel="Measure")


def main() -> None:
    app(prog_name="headway")

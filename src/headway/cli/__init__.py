"""The ``headway`` command line: every component runnable on its own, or all at once."""

from __future__ import annotations

from importlib.metadata import entry_points

import typer

from headway.cli import (
    batches,
    billing,
    catalog,
    certs,
    db,
    rollout,
    serve,
    weights,
)

COMMANDS_GROUP = "headway.commands"

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)
# In the order ``headway --help`` lists them.
app.command()(serve.up)
app.command()(serve.gateway)
app.command()(serve.worker)
weights.register(catalog.models_app)  # fetch, verify, keygen, sign
app.add_typer(catalog.models_app, name="models")
app.add_typer(catalog.tenants_app, name="tenants")
app.add_typer(rollout.rollout_app, name="rollout")
app.add_typer(billing.billing_app, name="billing")
app.add_typer(batches.batches_app, name="batches")
app.add_typer(certs.certs_app, name="certs")
app.add_typer(db.db_app, name="db")
# Other distributions' commands, each a Typer app under its entry point's name: the
# tooling's bench and loadgen (tools/: make test and make bench install it, the image never).
for command in sorted(entry_points(group=COMMANDS_GROUP), key=lambda point: point.name):
    app.add_typer(command.load(), name=command.name)


def main() -> None:
    app(prog_name="headway")

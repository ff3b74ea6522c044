"""The ``headway`` command line: every component runnable on its own, or all at once."""

from __future__ import annotations

import typer

from headway.cli import (
    batches,
    bench,
    billing,
    catalog,
    certs,
    db,
    loadgen,
    rollout,
    serve,
    weights,
)

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)
# In the order ``headway --help`` lists them.
app.command()(serve.up)
app.command()(serve.gateway)
app.command()(serve.worker)
app.add_typer(loadgen.loadgen_app, name="loadgen")
weights.register(catalog.models_app)  # fetch, verify, keygen, sign
app.add_typer(catalog.models_app, name="models")
app.add_typer(catalog.tenants_app, name="tenants")
app.add_typer(rollout.rollout_app, name="rollout")
app.add_typer(billing.billing_app, name="billing")
app.add_typer(batches.batches_app, name="batches")
app.add_typer(bench.bench_app, name="bench")
app.add_typer(certs.certs_app, name="certs")
app.add_typer(db.db_app, name="db")


def main() -> None:
    app(prog_name="headway")

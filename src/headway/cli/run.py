"""headway run: one process of the system, as a container or a service unit runs it.

``headway up`` runs them all on one machine; these run one each, configured by the same
settings (``--config``, the environment, flags), for Kubernetes, compose or systemd.
"""

from __future__ import annotations

import typer

from headway.cli import batches, billing, serve

run_app = typer.Typer(
    no_args_is_help=True,
    help="Run one process: a gateway, a worker, the billing consumer or a batch executor.",
)
run_app.command("gateway")(serve.gateway)
run_app.command("worker")(serve.worker)
run_app.command("billing")(billing.run)
run_app.command("batches")(batches.run)

"""`better-compute serve`: the long-running processes. This module is their composition root: it
builds the database pool, the clock and the ports, and passes them in (P10)."""

from __future__ import annotations

import logging
from enum import Enum
from typing import Annotated

import typer

from pathlib import Path

from better_compute.audit import AuditSigner
from better_compute.clock import Clock
from better_compute.db import Database
from better_compute.ports.ledger import BetterIamLedger, Ledger, LocalLedger
from better_compute.webhooks import WebhookSender
from better_compute.worker.handlers import default_handlers
from better_compute.worker.runtime import Worker, WorkerSettings, default_owner, run_until_signalled

app = typer.Typer(no_args_is_help=True, help="Run the control plane's processes.")

WORKER_ROLE = "bc_worker"
POOL_SPARE_CONNECTIONS = 2  # the loop's own calls, beside one per running handler


class LedgerKind(str, Enum):
    local = "local"
    better_iam = "better-iam"


def make_ledger(kind: LedgerKind, db: Database, url: str | None, token: str | None) -> Ledger:
    if kind is LedgerKind.local:
        return LocalLedger(db)
    if not url or not token:
        raise typer.BadParameter("--ledger better-iam needs --ledger-url and --ledger-token")
    return BetterIamLedger(url, token)


@app.command("worker")
def worker_command(
    dsn: Annotated[str, typer.Option("--dsn", envvar="BETTER_COMPUTE_DSN", help="libpq conninfo or URL.")],
    owner: Annotated[str | None, typer.Option(help="Lease owner shown in ops.work (default host:pid).")] = None,
    concurrency: Annotated[int, typer.Option(min=1, help="Work items run at once.")] = 8,
    lease_seconds: Annotated[float, typer.Option(min=1, help="Lease of a claimed item, renewed at a third.")] = 30.0,
    grace_seconds: Annotated[float, typer.Option(min=0, help="On SIGTERM, how long running items may finish.")] = 30.0,
    poll_seconds: Annotated[float, typer.Option(min=0.1, help="Poll interval besides LISTEN.")] = 1.0,
    ledger: Annotated[LedgerKind, typer.Option(help="Where usage goes.")] = LedgerKind.local,
    ledger_url: Annotated[str | None, typer.Option(envvar="BETTER_COMPUTE_LEDGER_URL", help="Better IAM base URL.")] = None,
    ledger_token: Annotated[str | None, typer.Option(envvar="BETTER_COMPUTE_LEDGER_TOKEN",
                                                     help="Better IAM credential.")] = None,
    audit_key: Annotated[Path, typer.Option(envvar="BETTER_COMPUTE_AUDIT_KEY",
                                            help="Ed25519 key that signs audit checkpoints (created if missing).")]
        = Path(".bc/audit-ed25519.pem"),
) -> None:
    """Run the work queue as role bc_worker: sweeps, outbox fan-out, webhooks, usage export, audit checkpoints."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = WorkerSettings(owner or default_owner(), concurrency, lease_seconds, poll_seconds, grace_seconds)
    db = Database(dsn, max_size=concurrency + POOL_SPARE_CONNECTIONS, name="better-compute-worker", role=WORKER_ROLE)
    with db:
        with db.pool.connection() as conn:
            clock = Clock.anchored(conn, "worker_api.now")
        handlers = default_handlers(db, make_ledger(ledger, db, ledger_url, ledger_token), WebhookSender(clock),
                                    AuditSigner(audit_key))
        logging.getLogger(__name__).info("worker %s: %d kinds, concurrency %d", settings.owner, len(handlers), concurrency)
        run_until_signalled(Worker(db, handlers, settings))

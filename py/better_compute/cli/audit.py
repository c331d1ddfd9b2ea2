"""`better-compute audit`: export a tenant's audit trail, and verify an export offline."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any
from uuid import UUID

import typer

from better_compute.audit import verify_export
from better_compute.db import ContractError, Database

app = typer.Typer(no_args_is_help=True, help="Audit trail: signed hourly Merkle checkpoints, verified offline.")

DsnOption = Annotated[str, typer.Option("--dsn", envvar="BETTER_COMPUTE_DSN", help="libpq conninfo or URL (role bc_operator).")]


def utc_time(text: str) -> datetime:
    """An ISO 8601 time; one without a zone is UTC."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as error:
        raise typer.BadParameter(f"{text!r} is not an ISO 8601 time such as 2030-06-01T12:00:00Z") from error
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


@app.command("export")
def export_command(
    dsn: DsnOption,
    tenant: Annotated[UUID, typer.Option(help="Tenant id.")],
    from_: Annotated[datetime, typer.Option("--from", parser=utc_time, metavar="TIME", help="Start (rounded down to the hour).")],
    to: Annotated[datetime, typer.Option(parser=utc_time, metavar="TIME", help="End, exclusive (rounded up to the hour).")],
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write here instead of stdout.")] = None,
) -> None:
    """Export a tenant's audit events, checkpoints and public keys (ops.audit_export) as JSON."""
    try:
        with Database(dsn, min_size=1, max_size=1, name="better-compute-audit") as db:
            export = db.call("ops.audit_export", tenant, from_, to)
    except ContractError as error:
        typer.echo(str(error), err=True)
        raise typer.Exit(1) from error
    text = json.dumps(export, indent=2) + "\n"
    if output is None:
        typer.echo(text, nl=False)
    else:
        output.write_text(text)
        typer.echo(f"exported {len(export['events'])} events and {len(export['checkpoints'])} checkpoints to {output}",
                   err=True)


def public_key(text: str) -> bytes:
    try:
        key = bytes.fromhex(text)
    except ValueError as error:
        raise typer.BadParameter(f"{text!r} is not hex") from error
    if len(key) != 32:
        raise typer.BadParameter("an Ed25519 public key is 32 bytes (64 hex digits)")
    return key


def read_export(path: Path) -> dict[str, Any]:
    try:
        export = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise typer.BadParameter(f"cannot read {path}: {error}") from error
    if not isinstance(export, dict) or export.get("version") != 1:
        raise typer.BadParameter(f"{path} is not a version 1 audit export")
    return export


@app.command("verify")
def verify_command(
    file: Annotated[Path, typer.Argument(help="An export written by `better-compute audit export`.")],
    trust_key: Annotated[list[bytes] | None, typer.Option(
        "--trust-key", parser=public_key, metavar="HEX",
        help="Hex Ed25519 public key to accept (repeatable); default: the keys in the export.")] = None,
) -> None:
    """Check an export offline: every event's leaf, every hour's root and count, every signature."""
    export = read_export(file)
    try:
        problems = verify_export(export, None if trust_key is None else set(trust_key))
    except (KeyError, TypeError, ValueError) as error:
        typer.echo(f"FAILED: {file} is malformed ({type(error).__name__}: {error})", err=True)
        raise typer.Exit(1) from error
    for problem in problems:
        typer.echo(f"FAILED: {problem}")
    if problems:
        raise typer.Exit(1)
    typer.echo(f"verified: {len(export['events'])} events in {len(export['checkpoints'])} checkpoints")

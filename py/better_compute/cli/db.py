"""`better-compute db`: apply, revert, inspect and verify the migrations on any database."""

from __future__ import annotations

from typing import Annotated

import typer

from better_compute import migrate

app = typer.Typer(no_args_is_help=True, help="Migrations (the Sqitch project in migrations/, run by yoyo).")

DsnOption = Annotated[str, typer.Option("--dsn", envvar="BETTER_COMPUTE_DSN", help="libpq conninfo or URL.")]


@app.command("migrate")
def migrate_command(
    dsn: DsnOption,
    to: Annotated[str | None, typer.Option(help="Stop after this change or tag (e.g. @v0.3.0).")] = None,
) -> None:
    """Apply every change not yet applied (up to --to)."""
    applied = migrate.migrate(dsn, to=to)
    typer.echo(f"applied: {', '.join(applied)}" if applied else "up to date")


@app.command("revert")
def revert_command(
    dsn: DsnOption,
    to: Annotated[str | None, typer.Option(help="Keep this change (or tag) and those before it.")] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
) -> None:
    """Revert applied changes, newest first (all of them unless --to)."""
    if not yes:
        typer.confirm(f"Revert {'everything' if to is None else f'every change after {to}'}?", abort=True)
    reverted = migrate.revert(dsn, to=to)
    typer.echo(f"reverted: {', '.join(reverted)}" if reverted else "nothing to revert")


@app.command("status")
def status_command(dsn: DsnOption) -> None:
    """List the plan's changes and whether each is applied."""
    for name, applied, note in migrate.status(dsn):
        typer.echo(f"[{'x' if applied else ' '}] {name:12} {note}")


@app.command("verify")
def verify_command(dsn: DsnOption) -> None:
    """Run the verify script of every applied change; exit 1 if any fails."""
    results = migrate.verify(dsn)
    for name, error in results:
        typer.echo(f"{'ok  ' if error is None else 'FAIL'} {name}" + (f": {error}" if error else ""))
    if any(error for _, error in results):
        raise typer.Exit(1)


@app.command("lock")
def lock_command() -> None:
    """After adding a tag: record the changes it releases in migrations/released.sha256.
    Exits 1, changing nothing, when a released script differs from its recorded digest."""
    try:
        added = migrate.lock_released()
    except migrate.PlanError as error:
        typer.echo(str(error), err=True)
        raise typer.Exit(1) from error
    typer.echo(f"locked: {', '.join(added)}" if added else "every released change is locked already")

"""`better-compute db`: apply, revert, inspect and verify the migrations on any database."""

from __future__ import annotations

from typing import Annotated

import typer

from better_compute import changegen, migrate

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


@app.command("change")
def change_command(
    name: Annotated[str, typer.Argument(help="The new change's name: what it does.")],
    note: Annotated[str, typer.Option(help="The plan's note for it.")],
    requires: Annotated[list[str] | None, typer.Option(
        help="A change it needs (repeat the option); default: the latest change that defines each object it alters.")] = None,
    partial: Annotated[bool, typer.Option(help="Write it even when some differences must be added by hand.")] = False,
) -> None:
    """After editing sql/: append a change to the plan whose deploy and revert scripts the tool writes
    from the difference between sql/ and the plan (functions, views, comments, renamed constraints).
    Exits 1, writing nothing, when something else differs (unless --partial) or nothing does."""
    generated = changegen.generate()
    for what in generated.by_hand:
        typer.echo(f"by hand: {what}", err=True)
    if not generated.deploy and not generated.by_hand:
        typer.echo("sql/ and the plan build the same catalog: nothing to write", err=True)
        raise typer.Exit(1)
    if generated.by_hand and not partial:
        typer.echo("nothing written: add those by hand (or write the change with --partial, then add them)", err=True)
        raise typer.Exit(1)
    needed = requires if requires else changegen.prerequisites(generated.objects)
    for path in changegen.write_change(name, note, needed, generated):
        typer.echo(f"wrote {path.relative_to(migrate.PROJECT_ROOT)}")


@app.command("regenerate")
def regenerate_command(name: Annotated[str, typer.Argument(help="An unreleased change written by hand.")]) -> None:
    """Write an unreleased change's deploy and revert scripts again with the tool, from the catalogs
    before and after it (same catalog, no hand-copied bodies). Exits 1, changing nothing, for a
    released change or one that does more than the tool writes (tables, rows, DO blocks)."""
    try:
        generated = changegen.regenerate(name)
    except migrate.PlanError as error:
        typer.echo(str(error), err=True)
        raise typer.Exit(1) from error
    for path in changegen.rewrite_change(name, generated):
        typer.echo(f"wrote {path.relative_to(migrate.PROJECT_ROOT)}")

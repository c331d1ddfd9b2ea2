"""`better-compute dev`: a private PostgreSQL under ./.bc/ for trying things and for the demo."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Annotated

import typer

from better_compute import embedded, ha, migrate

app = typer.Typer(no_args_is_help=True, help="A private PostgreSQL cluster under ./.bc/ (unix socket only).")

DirOption = Annotated[Path, typer.Option("--dir", envvar="BC_DEV_DIR", help="Where the cluster lives.")]
HaOption = Annotated[bool, typer.Option("--ha", help="etcd, a primary and a synchronous standby under Patroni on "
                                                     "127.0.0.1 (under DIR/ha; docs/operations.md).")]


def _cluster(directory: Path) -> embedded.Cluster:
    cluster = embedded.Cluster.at(directory)
    if not (cluster.datadir / "PG_VERSION").exists():
        typer.echo(f"No cluster under {directory}: run `better-compute dev up` first.", err=True)
        raise typer.Exit(1)
    return cluster


@app.command()
def up(
    directory: DirOption = Path(".bc"),
    port: Annotated[int, typer.Option(help="Port (the socket's name; TCP only with --tcp).")] = 5432,
    tcp: Annotated[bool, typer.Option(help="Also listen on 127.0.0.1.")] = False,
    high_availability: HaOption = False,
) -> None:
    """Create (once), start and migrate the cluster; print its DSN. Safe to run again."""
    if high_availability:
        up_ha(directory / "ha")
        return
    try:
        cluster = embedded.Cluster.at(directory, port=port, tcp=tcp).init()
        cluster.start()
        cluster.ensure_database()
    except embedded.ClusterError as error:
        typer.echo(str(error), err=True)
        raise typer.Exit(1) from error
    applied = migrate.migrate(cluster.conninfo())
    typer.echo(f"migrations applied: {', '.join(applied) if applied else 'none (up to date)'}")
    typer.echo(f"DSN: {cluster.url()}")


def up_ha(directory: Path) -> None:
    """Start (bootstrapping once) the HA set, migrate it on its leader, print who is who and the DSN."""
    try:
        ha_set = ha.HaSet.at(directory).start()
        ha_set.ensure_database()
    except (ha.HaError, embedded.ClusterError) as error:
        typer.echo(str(error), err=True)
        raise typer.Exit(1) from error
    applied = migrate.migrate(ha_set.conninfo())
    typer.echo(f"migrations applied: {', '.join(applied) if applied else 'none (up to date)'}")
    for member in ha_set.members():
        typer.echo(f"  {member['name']}: {member['role']}, {member['state']}, 127.0.0.1:{member['port']}")
    typer.echo(f"patronictl: {Path(sys.executable).parent / 'patronictl'} -c {ha_set.config_path(ha.MEMBERS[0])} list")
    typer.echo(f"DSN: {ha_set.conninfo()}")


@app.command()
def down(directory: DirOption = Path(".bc"), high_availability: HaOption = False) -> None:
    """Stop the cluster (its data stays)."""
    if high_availability:
        ha.HaSet.at(directory / "ha").stop()
    else:
        _cluster(directory).stop()
    typer.echo("stopped")


@app.command()
def status(directory: DirOption = Path(".bc")) -> None:
    """Say whether the cluster runs, where, and which migrations are applied."""
    cluster = _cluster(directory)
    if not cluster.is_running():
        typer.echo(f"stopped (data in {cluster.datadir})")
        raise typer.Exit(3)
    typer.echo(f"running, data in {cluster.datadir}\nDSN: {cluster.url()}")
    for name, applied, note in migrate.status(cluster.conninfo()):
        typer.echo(f"  [{'x' if applied else ' '}] {name:12} {note}")


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def psql(ctx: typer.Context, directory: DirOption = Path(".bc")) -> None:
    """Open psql on the cluster's database; extra arguments go to psql (e.g. -c 'select 1')."""
    cluster = _cluster(directory)
    binary = shutil.which("psql") or str(embedded.pg_bindir() / "psql")
    os.execv(binary, [binary, "--no-psqlrc", "-v", "ON_ERROR_STOP=1", cluster.conninfo(), *ctx.args])

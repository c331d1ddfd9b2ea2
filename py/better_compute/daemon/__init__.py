"""`bcd`, the node daemon. It dials out to a gateway (P5); the session and reconciler come with the
nodes issue. For now it tells its version and prints what its inventory drivers see."""

import json
from importlib.metadata import version

import typer

from better_compute.daemon.drivers import DRIVERS, InventoryError, driver

app = typer.Typer(no_args_is_help=True, help="bcd: the Better Compute node daemon.")


@app.callback()
def main() -> None:
    """bcd: the Better Compute node daemon (commands below)."""


@app.command("version")
def show_version() -> None:
    """Print the daemon's version."""
    typer.echo(f"bcd {version('better-compute')}")


@app.command("inventory")
def show_inventory(
    name: str = typer.Option("nvidia-smi", "--driver", help=f"One of: {', '.join(DRIVERS)}."),
    options: list[str] = typer.Option([], "--option", help="KEY=VALUE for the driver, e.g. path=… for fake."),
) -> None:
    """Print the inventory document the driver reads (JSON), as the daemon would send it."""
    settings = dict(option.split("=", 1) for option in options if "=" in option)
    if len(settings) != len(options):
        raise typer.BadParameter("write each option as KEY=VALUE", param_hint="'--option'")
    try:
        chosen = driver(name, **settings)
    except (ValueError, TypeError, OSError) as error:  # unknown driver or option, unreadable recording
        raise typer.BadParameter(str(error), param_hint="'--driver' / '--option'") from error
    try:
        document = chosen.collect()
    except InventoryError as error:
        typer.echo(f"bcd: {error}", err=True)
        raise typer.Exit(1) from error
    typer.echo(json.dumps(document, indent=2))

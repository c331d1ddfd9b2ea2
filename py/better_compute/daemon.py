"""`bcd`, the node daemon. It dials out to a gateway (P5); the session, drivers and reconciler come
with the nodes issue. For now it only tells its version."""

from importlib.metadata import version

import typer

app = typer.Typer(no_args_is_help=True, help="bcd: the Better Compute node daemon.")


@app.callback()
def main() -> None:
    """bcd: the Better Compute node daemon (commands below)."""


@app.command("version")
def show_version() -> None:
    """Print the daemon's version."""
    typer.echo(f"bcd {version('better-compute')}")

"""`better-compute`: the command line. Each group lives in its own module."""

import typer

from better_compute.cli import audit, db, dev, serve

app = typer.Typer(no_args_is_help=True, help="Better Compute: what exists, what is free, who holds it.")
app.add_typer(dev.app, name="dev")
app.add_typer(db.app, name="db")
app.add_typer(audit.app, name="audit")
app.add_typer(serve.app, name="serve")

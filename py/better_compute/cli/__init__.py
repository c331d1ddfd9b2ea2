"""`better-compute`: the command line. Each group lives in its own module; the relay's groups are
generated from the method catalog (methods.py)."""

import typer

from better_compute import sim
from better_compute.cli import audit, db, dev, machines, methods, options, profile, serve, watch

app = typer.Typer(no_args_is_help=True, help="Better Compute: what exists, what is free, who holds it.")
app.callback()(options.root_callback)
app.add_typer(dev.app, name="dev")
app.add_typer(db.app, name="db")
app.add_typer(machines.app, name="machines")
app.add_typer(audit.app, name="audit")
app.add_typer(serve.app, name="serve")
app.add_typer(sim.app, name="sim")
app.add_typer(profile.app, name="profile")
methods.register(app)["events"].command("watch")(watch.watch_command)

"""`better-compute fleet`: placeholder."""
from pathlib import Path
from typing import Annotated
import typer
app = typer.Typer(no_args_is_help=True)
@app.command("apply")
def apply_command(file: Annotated[Path, typer.Option("--file", "-f", exists=True, dir_okay=False)], url: str = "") -> None:
    pass

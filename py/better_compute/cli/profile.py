"""`better-compute profile`: save where a relay is and the credential for it, so that commands need
no --url/--token/--tenant. Tokens are shown masked, never in full."""

from __future__ import annotations

from typing import Annotated

import typer

from better_compute.cli import config

app = typer.Typer(no_args_is_help=True, help="Saved connection profiles (~/.config/better-compute/profiles.toml).")


def describe(fields: dict[str, str]) -> dict[str, str]:
    return {key: config.masked(value) if key == "token" else value for key, value in fields.items()}


@app.command("save")
def save_command(
    name: Annotated[str, typer.Option(help="Profile name; `default` is used when none is selected.")]
        = config.DEFAULT_PROFILE,
    url: Annotated[str | None, typer.Option(help="Relay base URL.")] = None,
    token: Annotated[str | None, typer.Option(help="Credential sent as `Authorization: Bearer`.")] = None,
    tenant: Annotated[str | None, typer.Option(help="Tenant id sent as X-Tenant-Id.")] = None,
) -> None:
    """Create a profile, or change the fields given of an existing one."""
    values = {key: value for key, value in (("url", url), ("token", token), ("tenant", tenant)) if value}
    if not values:
        raise typer.BadParameter("give at least one of --url, --token, --tenant")
    path = config.save_profile(name, values)
    typer.echo(f"saved profile {name!r} in {path}")


@app.command("list")
def list_command() -> None:
    """One line per profile: name, then its fields."""
    profiles = config.load_profiles()
    if not profiles:
        typer.echo(f"no profiles in {config.profiles_path()}: better-compute profile save --url … --token …")
    for name, fields in sorted(profiles.items()):
        typer.echo("  ".join([name, *(f"{key}={value}" for key, value in describe(fields).items())]))


@app.command("show")
def show_command(name: Annotated[str, typer.Argument(help="Profile name.")] = config.DEFAULT_PROFILE) -> None:
    """A profile's fields, the token masked."""
    profiles = config.load_profiles()
    if name not in profiles:
        typer.echo(f"no profile {name!r} in {config.profiles_path()}", err=True)
        raise typer.Exit(1)
    for key, value in describe(profiles[name]).items():
        typer.echo(f"{key}: {value}")

"""`better-compute`: the command line. Each group lives in its own module; the relay's groups are
generated from the method catalog (methods.py).

Start-up is kept short (`--help` well under 0.3 s): the groups whose modules pull in the servers,
the daemon or the migration tools are loaded only when a command of theirs runs (LazyGroup); until
then `--help` lists them from their one-line help. `main` is the entry point: every mistake an
operator can make ends as `CODE: message` (and `Hint: …`), exit 2 for a usage error, never a
traceback (cli/errors.py).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

import typer
from typer.core import TyperGroup

from better_compute.cli import methods, options, whoami

if TYPE_CHECKING:
    from typer._click.core import Command

# group: (the module whose `app` it is, its help line until it loads)
LAZY: dict[str, tuple[str, str]] = {
    "dev": ("better_compute.cli.dev", "A private PostgreSQL cluster under ./.bc/ (unix socket only)."),
    "db": ("better_compute.cli.db", "Migrations (the Sqitch project in migrations/, run by yoyo)."),
    "machines": ("better_compute.cli.machines",
                 "Bare-metal machines: enroll, manage, provide, release, retry, abort, list, show."),
    "audit": ("better_compute.cli.audit", "Audit trail: signed hourly Merkle checkpoints, verified offline."),
    "serve": ("better_compute.cli.serve", "Run the control plane's processes."),
    "sim": ("better_compute.sim", "Simulate nodes (fake GPUs, real daemons) against a gateway."),
    "profile": ("better_compute.cli.profile", "Saved connection profiles (~/.config/better-compute/profiles.toml)."),
    "fleet": ("better_compute.cli.fleet", "Fleet as code: export, plan and apply sites, pools, offerings, quotas, "
                                          "layouts and webhooks (through the API)."),
}


def load(name: str) -> Command:
    """The click command of a lazy group, made now: its module's `app` (imported now) or a new group,
    with the catalog's methods of that name (`audit proof` joins `audit export`)."""
    group = importlib.import_module(LAZY[name][0]).app if name in LAZY else typer.Typer(no_args_is_help=True)
    methods.add_methods(group, name)
    if name == "events":
        from better_compute.cli import watch

        group.command("watch")(watch.watch_command)
    command = typer.main.get_group(group)  # a group even with one command (`sim nodes`), as --help lists it
    command.name = name
    command.help = command.help or (LAZY[name][1] if name in LAZY else api_help(name))
    return command


def api_help(name: str) -> str:
    return f"API methods: {', '.join(method.command for method in methods.by_group()[name])}."


def stubs() -> dict[str, str]:
    """Each group's name and help line, without building it: the catalog's groups, then LAZY."""
    return {**{name: api_help(name) for name in methods.by_group() if name not in LAZY},
            **{name: help for name, (_, help) in LAZY.items()}}


class LazyGroup(TyperGroup):
    """The root group: every group is a stub (its name and help line) until a command of it runs, so
    `--help` builds no command and imports no server."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, help in stubs().items():
            self.commands[name] = Stub(name=name, help=help)

    def resolve_command(self, ctx: typer.Context, args: list[str]) -> tuple[str | None, Command | None, list[str]]:
        if args and isinstance(self.commands.get(args[0]), Stub):
            self.commands[args[0]] = load(args[0])
        return super().resolve_command(ctx, args)


class Stub(TyperGroup):
    """A group not built yet: listed in --help, replaced by the real one when it runs."""


app = typer.Typer(cls=LazyGroup, no_args_is_help=True, rich_markup_mode=None,
                  help="Better Compute: what exists, what is free, who holds it.")
app.callback()(options.root_callback)
app.command("api")(methods.api_command)
app.command("whoami")(whoami.whoami_command)


def main() -> None:
    """The `better-compute` entry point."""
    from better_compute.cli import errors

    errors.run(typer.main.get_command(app))

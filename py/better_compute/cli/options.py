"""Options built at run time, the options every relay command takes, and how such a command runs.

The connection and output options are accepted before the group (`better-compute --format json
sites list`) and after the command (`better-compute sites list --format json`); after the command
wins. A method input with the same flag (`webhooks create --url`) is the input on that command:
the relay's URL then comes from before the group, the environment or the profile.
"""

from __future__ import annotations

import inspect
from importlib import metadata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import Annotated, Any, NoReturn

import typer

from better_compute.cli import config, output
from better_compute.cli.client import ApiError, Client, Settings

PANEL = "Connection and output"


@dataclass(frozen=True)
class OptionSpec:
    """One option of a generated command: its parameter name, its flags and how Typer parses it."""

    name: str
    flags: tuple[str, ...]
    annotation: Any
    help: str
    default: Any = None  # inspect.Parameter.empty makes it required
    settings: dict[str, Any] = field(default_factory=dict)  # more typer.Option arguments (min, parser, …)

    def parameter(self) -> inspect.Parameter:
        option = typer.Option("/".join(self.flags), help=self.help, **self.settings)
        return inspect.Parameter(self.name, inspect.Parameter.KEYWORD_ONLY, default=self.default,
                                 annotation=Annotated[self.annotation, option])


def signature(*groups: Iterable[OptionSpec], arguments: Sequence[inspect.Parameter] = ()) -> inspect.Signature:
    """`ctx`, the arguments, then the options; an option whose flag an earlier group has is left out."""
    taken: set[str] = set()
    parameters = [inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context),
                  *arguments]
    for spec in (spec for group in groups for spec in group):
        if taken.isdisjoint(spec.flags):
            taken.update(spec.flags)
            parameters.append(spec.parameter())
    return inspect.Signature(parameters)


@dataclass(frozen=True)
class GlobalOptions:
    url: str | None = None
    token: str | None = None
    tenant: str | None = None
    profile: str | None = None
    format: output.OutputFormat | None = None
    query: str | None = None

    def over(self, below: GlobalOptions) -> GlobalOptions:
        """These options, each unset one taken from `below`."""
        return GlobalOptions(**{name: value if (value := getattr(self, name)) is not None else getattr(below, name)
                                for name in NAMES})

    def settings(self) -> Settings:
        return config.resolve({"url": self.url, "token": self.token, "tenant": self.tenant}, self.profile)

    @property
    def output_format(self) -> output.OutputFormat:
        return self.format or "table"


NAMES = tuple(option.name for option in fields(GlobalOptions))
PREFIX = "global_"


def global_option(name: str, annotation: Any, help: str) -> OptionSpec:
    return OptionSpec(f"{PREFIX}{name}", (f"--{name}",), annotation, help, settings={"rich_help_panel": PANEL})


GLOBAL_OPTIONS = (
    global_option("url", str | None, "Relay base URL (env BETTER_COMPUTE_URL)."),
    global_option("token", str | None, "Credential (Bearer) (env BETTER_COMPUTE_TOKEN)."),
    global_option("tenant", str | None, "Tenant id (X-Tenant-Id) (env BETTER_COMPUTE_TENANT)."),
    global_option("profile", str | None, "Saved profile (env BETTER_COMPUTE_PROFILE; else `default`)."),
    global_option("format", output.OutputFormat | None, "Output: table (default) or json."),
    global_option("query", str | None,
                  "Print only this field: a dotted path, list indexes as numbers (bookings.0.cdi_name)."),
)


def collect(ctx: typer.Context, values: dict[str, Any]) -> GlobalOptions:
    """Take the global options out of a command's values; those before the group fill the gaps."""
    here = GlobalOptions(**{name: values.pop(f"{PREFIX}{name}", None) for name in NAMES})
    before = ctx.find_root().obj
    return here.over(before) if isinstance(before, GlobalOptions) else here


def print_version(wanted: bool) -> None:
    if wanted:
        typer.echo(f"better-compute {metadata.version('better-compute')}")
        raise typer.Exit()


VERSION_OPTION = OptionSpec("version", ("--version",), bool, "Print the version and exit.", False,
                            settings={"is_eager": True, "callback": print_version})


def root_callback(ctx: typer.Context, **values: Any) -> None:
    """Better Compute: what exists, what is free, who holds it."""
    values.pop("version")
    ctx.obj = collect(ctx, values)


root_callback.__signature__ = signature(GLOBAL_OPTIONS, [VERSION_OPTION])  # type: ignore[attr-defined]


def fail(code: str, message: str, hint: str | None = None) -> NoReturn:
    typer.echo(f"{code}: {message}", err=True)
    if hint:
        typer.echo(f"Hint: {hint}", err=True)
    raise typer.Exit(1)


def query_path(options: GlobalOptions) -> output.QueryPath:
    """The --query path, checked before anything is sent (so a typo in it never follows a mutation)."""
    try:
        return output.parse_query(options.query) if options.query else ()
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="'--query'") from error


def run(options: GlobalOptions, action: Callable[[Client], Any], primary: Sequence[str] = ()) -> None:
    """Resolve the connection, run the action, print its data (or the error, and exit 1)."""
    query = query_path(options)
    client = Client(options.settings())
    try:
        data = output.select(action(client), query)
    except ApiError as error:
        fail(error.code, error.message, error.hint)
    except output.QueryMiss as error:
        fail("QUERY_NOT_FOUND", str(error), "Use --format json to see the whole answer.")
    typer.echo(output.render(data, options.output_format, primary))

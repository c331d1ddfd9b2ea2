"""Options built at run time, the options every relay command takes, and how such a command runs.

The connection and output options are accepted before the group (`better-compute --format json
sites list`) and after the command (`better-compute sites list --format json`); after the command
wins. A method input with the same flag (`webhooks create --url`) is the input on that command:
the relay's URL then comes from before the group, the environment or the profile.
"""

from __future__ import annotations

import inspect
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import Annotated, Any, NoReturn

import typer

from better_compute.cli import config, hints, output
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
        negated = any(flag.startswith("--no-") for flag in self.flags)  # --x/--no-x: one boolean flag pair
        declarations = ("/".join(self.flags),) if negated else self.flags
        option = typer.Option(*declarations, help=self.help, **self.settings)
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
    columns: str | None = None

    def over(self, below: GlobalOptions) -> GlobalOptions:
        """These options, each unset one taken from `below`."""
        return GlobalOptions(**{name: value if (value := getattr(self, name)) is not None else getattr(below, name)
                                for name in NAMES})

    def settings(self) -> Settings:
        return config.resolve({"url": self.url, "token": self.token, "tenant": self.tenant}, self.profile)

    @property
    def output_format(self) -> output.OutputFormat:
        return self.format or "table"

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(name.strip() for name in (self.columns or "").split(",") if name.strip())


NAMES = tuple(option.name for option in fields(GlobalOptions))
PREFIX = "global_"


def global_option(name: str, annotation: Any, help: str, *short: str) -> OptionSpec:
    return OptionSpec(f"{PREFIX}{name}", (f"--{name}", *short), annotation, help, settings={"rich_help_panel": PANEL})


GLOBAL_OPTIONS = (
    global_option("url", str | None, "Relay base URL (env BETTER_COMPUTE_URL)."),
    global_option("token", str | None, "Credential (Bearer) (env BETTER_COMPUTE_TOKEN)."),
    global_option("tenant", str | None, "Tenant id (X-Tenant-Id) (env BETTER_COMPUTE_TENANT)."),
    global_option("profile", str | None, "Saved profile (env BETTER_COMPUTE_PROFILE; else `default`)."),
    global_option("format", output.OutputFormat | None, "Output: table (default), json or yaml.", "--output", "-o"),
    global_option("query", str | None,
                  "Print only this field: a dotted path, list indexes as numbers (bookings.0.cdi_name)."),
    global_option("columns", str | None, "Only these columns (fields), in this order: --columns reservation_id,phase,end."),
)


def collect(ctx: typer.Context, values: dict[str, Any]) -> GlobalOptions:
    """Take the global options out of a command's values; those before the group fill the gaps."""
    here = GlobalOptions(**{name: values.pop(f"{PREFIX}{name}", None) for name in NAMES})
    before = ctx.find_root().obj
    return here.over(before) if isinstance(before, GlobalOptions) else here


def root_callback(ctx: typer.Context, **values: Any) -> None:
    """Better Compute: what exists, what is free, who holds it."""
    values.pop("version", None)
    ctx.obj = collect(ctx, values)


def print_version(wanted: bool) -> None:
    if wanted:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"better-compute {version('better-compute')}")
        except PackageNotFoundError:
            typer.echo("better-compute (not installed as a package: running from a source tree)")
        raise typer.Exit(0)


VERSION = OptionSpec("version", ("--version",), bool, "Print the version and exit.", default=False,
                     settings={"is_eager": True, "callback": print_version})
root_callback.__signature__ = signature([VERSION], GLOBAL_OPTIONS)  # type: ignore[attr-defined]


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


Present = Callable[[Any], Any]


def run(options: GlobalOptions, action: Callable[[Client], Any], primary: Sequence[str] = (),
        present: Present | None = None, every: float | None = None) -> None:
    """Resolve the connection, run the action, print its data (or the error, and exit 1). `present`
    adds what a table shows beside the answer (the reservations' phase); `every`: run it again every
    so many seconds, each answer replacing the last on a terminal (--watch), until Ctrl-C."""
    query = query_path(options)
    client = Client(options.settings())
    try:
        while True:
            try:
                data = output.select(action(client), query)
            except ApiError as error:
                if every is None or error.code not in TRANSIENT:
                    fail(error.code, error.message, hints.in_cli_terms(error))
                data = f"{error.code}: {error.message} (trying again)"
            except output.QueryMiss as error:
                fail("QUERY_NOT_FOUND", str(error), "Use --format json to see the whole answer.")
            if present is not None and options.output_format == "table" and not query:
                data = present(data)
            text = output.render(data, options.output_format, primary, options.column_names)
            if every is None:
                typer.echo(text)
                return
            watch_frame(text, every)
    except KeyboardInterrupt:
        if every is None:
            raise
        raise typer.Exit(0) from None


TRANSIENT = frozenset({"CONNECTION_ERROR", "HTTP_ERROR", "UNAVAILABLE"})  # --watch shows them and goes on


def watch_frame(text: str, every: float) -> None:
    """One --watch frame: on a terminal the screen is cleared first (a `top`-like view); piped, frames
    follow each other under a header line."""
    header = f"every {every:g}s  {time.strftime('%Y-%m-%d %H:%M:%S')}  (Ctrl-C to stop)"
    clear = "\x1b[H\x1b[2J" if sys.stdout.isatty() else ""
    typer.echo(f"{clear}{header}\n{text}\n", nl=False)
    sys.stdout.flush()
    time.sleep(every)

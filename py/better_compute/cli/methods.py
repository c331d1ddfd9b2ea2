"""Commands generated from the API's method catalog, and `better-compute api` for any method.

`catalog.json` holds the rows of `api.catalog()` (refresh it with scripts/catalog_snapshot.py):
each API group is a command group in kebab-case (joinTokens → join-tokens), each method a
command, each property of its input schema an option (pool_id → --pool-id) typed from the schema.
Nothing here is written per method except EXTENSIONS (`reservations create --wait --for`, `--watch`
on the lists, the phase column), so a method added to the catalog becomes a command when
catalog.json is refreshed.
"""

from __future__ import annotations

import functools
import inspect
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Annotated, Any, Literal

import typer

from better_compute.cli import options, reservations, wait
from better_compute.cli.client import Client
from better_compute.cli.options import OptionSpec

INPUT_PREFIX = "input_"
SCALAR_TYPES: dict[str, type] = {"integer": int, "number": float, "boolean": bool, "string": str}
JSON_TYPES: dict[str, type] = {"object": dict, "array": list}
FORMAT_HELP = {"uuid": "uuid", "date-time": "ISO 8601 time, e.g. 2030-06-01T12:00:00Z"}


def kebab(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "-", name).replace("_", "-").lower()


@dataclass(frozen=True)
class Method:
    name: str  # group.method as the relay's path has it: joinTokens.create
    kind: str  # read | mutation
    summary: str
    input_schema: dict[str, Any]

    @property
    def group(self) -> str:
        return self.name.partition(".")[0]

    @property
    def command(self) -> str:
        return kebab(self.name.partition(".")[2])

    @property
    def mutation(self) -> bool:
        return self.kind == "mutation"

    @property
    def primary(self) -> tuple[str, str]:
        """The likely id field of what the group answers (sites → site_id; joinTokens → join_token_id
        or token_id), which tables show first."""
        words = kebab(self.group).split("-")
        words[-1] = words[-1].removesuffix("s")
        return "_".join(words) + "_id", words[-1] + "_id"

    def call(self, client: Client, body: dict[str, Any]) -> Any:
        return client.call(self.name, body, mutation=self.mutation)


@functools.cache
def catalog() -> dict[str, Method]:
    rows = json.loads(resources.files(__package__).joinpath("catalog.json").read_text(encoding="utf-8"))
    return {row["method"]: Method(row["method"], row["kind"], row["summary"], row["input_schema"]) for row in rows}


def find(name: str) -> Method | None:
    """A catalog method by its name (joinTokens.create) or its command spelling (join-tokens.create)."""
    group, _, command = name.partition(".")
    return catalog().get(name) or next(
        (method for method in catalog().values() if (kebab(method.group), method.command) == (group, command)), None)


def json_parser(expected: str | None) -> Callable[[str], Any]:
    """Parse an option given as JSON text; BadParameter (exit 2) for bad JSON or the wrong JSON type."""
    def parse(text: str) -> Any:
        try:
            value = json.loads(text)
        except ValueError as error:
            raise typer.BadParameter(f"not JSON ({error})") from error
        if expected in JSON_TYPES and not isinstance(value, JSON_TYPES[expected]):
            raise typer.BadParameter(f"expected a JSON {expected}, got {text!r}")
        return value
    return parse


def describe(schema: dict[str, Any]) -> str:
    if "description" in schema:
        return str(schema["description"])
    if schema.get("format") in FORMAT_HELP:
        return FORMAT_HELP[schema["format"]]
    kind = schema.get("type")
    if not isinstance(kind, str) or kind in JSON_TYPES:
        return f"JSON {kind if isinstance(kind, str) else 'value'}"
    if "minLength" in schema or "maxLength" in schema:
        return f"{schema.get('minLength', 0)}-{schema.get('maxLength', '…')} characters"
    return ""


def input_option(prop: str, schema: dict[str, Any], required: bool) -> OptionSpec:
    """The option of one input property: its flag in kebab-case, its type from the schema (integer,
    number, string, enum as choices, boolean as --flag/--no-flag, anything else as JSON text)."""
    flag = f"--{kebab(prop)}"
    kind = schema.get("type")
    flags: tuple[str, ...] = (flag,)
    settings: dict[str, Any] = {}
    if kind == "boolean":
        flags = (flag, f"--no-{kebab(prop)}")
    if kind in ("integer", "number"):
        settings.update({key: schema[bound] for key, bound in (("min", "minimum"), ("max", "maximum"))
                         if bound in schema})
    if kind == "string" and "enum" in schema:
        annotation: Any = Literal[tuple(schema["enum"])]
    elif kind in SCALAR_TYPES:
        annotation = SCALAR_TYPES[kind]
    else:
        annotation = Any
        settings.update(parser=json_parser(kind if isinstance(kind, str) else None), metavar="JSON")
    if not required and annotation is not Any:
        annotation = annotation | None
    return OptionSpec(INPUT_PREFIX + re.sub(r"\W", "_", prop), flags, annotation, describe(schema),
                      inspect.Parameter.empty if required else None, settings)


def unchanged_body(body: dict[str, Any], **_: Any) -> dict[str, Any]:
    return body


def unchanged_data(_client: Client, data: Any, **_: Any) -> Any:
    return data


def no_repeat(**_: Any) -> float | None:
    return None


@dataclass(frozen=True)
class Extension:
    """Options a method's command has beyond its inputs, and what they do: `before` edits the body
    (values of its options as keywords), `after` the answer, `every` says to repeat the call."""

    options: tuple[OptionSpec, ...] = ()
    before: Callable[..., dict[str, Any]] = unchanged_body  # (body, **values) -> body to send
    after: Callable[..., Any] = unchanged_data  # (client, data, **values) -> data to print
    every: Callable[..., float | None] = no_repeat  # (**values) -> seconds between calls (--watch)
    optional: frozenset[str] = frozenset()  # required inputs it can fill itself
    present: options.Present | None = None  # what a table shows beside the answer


WAIT = Extension(wait.OPTIONS, after=wait.until_ready)
FOR = Extension(reservations.FOR_OPTIONS, before=reservations.end_from_duration, optional=frozenset({"end"}))
WATCH = Extension(reservations.WATCH_OPTIONS, every=lambda watch=False, interval=2.0: interval if watch else None)
PHASE = Extension(present=reservations.with_phase)
EXTENSIONS: dict[str, tuple[Extension, ...]] = {
    "reservations.create": (WAIT, FOR, PHASE),
    "reservations.get": (PHASE,),
    "reservations.extend": (PHASE,),
    "reservations.release": (PHASE,),
    "reservations.list": (WATCH, PHASE),
    "nodes.list": (WATCH,),
}


def method_command(method: Method) -> Callable[..., None]:
    schema = method.input_schema
    extensions = EXTENSIONS.get(method.name, ())
    optional = frozenset().union(*(extension.optional for extension in extensions))
    required = set(schema.get("required", ())) - optional
    inputs = [input_option(prop, prop_schema, prop in required)
              for prop, prop_schema in schema.get("properties", {}).items()]
    names = {spec.name: prop for spec, prop in zip(inputs, schema.get("properties", {}))}
    presents = [extension.present for extension in extensions if extension.present is not None]

    def command(ctx: typer.Context, **values: Any) -> None:
        given = options.collect(ctx, values)
        own = [{spec.name: values.pop(spec.name) for spec in extension.options} for extension in extensions]
        body = {names[name]: value for name, value in values.items() if value is not None}
        for extension, extra in zip(extensions, own):
            body = extension.before(body, **extra)
        every = next((seconds for extension, extra in zip(extensions, own)
                      if (seconds := extension.every(**extra)) is not None), None)

        def action(client: Client) -> Any:
            data = method.call(client, body)
            for extension, extra in zip(extensions, own):
                data = extension.after(client, data, **extra)
            return data

        options.run(given, action, method.primary, presents[0] if presents else None, every)

    command.__signature__ = options.signature(  # type: ignore[attr-defined]
        inputs, *(extension.options for extension in extensions), options.GLOBAL_OPTIONS)
    command.__doc__ = method.summary
    return command


def parse_params(pairs: list[str]) -> dict[str, Any]:
    """httpie's convention: key=value is a string, key:=json any JSON value."""
    body: dict[str, Any] = {}
    for pair in pairs:
        key, equals, value = pair.partition("=")
        name = key.removesuffix(":")
        if not equals or not name:
            raise typer.BadParameter(f"{pair!r} is neither key=value nor key:=json", param_hint="PARAMS")
        try:
            body[name] = json.loads(value) if key.endswith(":") else value
        except ValueError as error:
            raise typer.BadParameter(f"{pair!r}: the value is not JSON ({error})", param_hint="PARAMS") from error
    return body


def api_command(ctx: typer.Context, method: str, params: list[str] | None = None, **values: Any) -> None:
    """Call any method: key=value is a string, key:=json a JSON value.

    Example: better-compute api reservations.extend reservation_id=… end=2030-06-01T14:00:00Z.
    A method the CLI's catalog does not know is sent as it is (without an idempotency key)."""
    given = options.collect(ctx, values)
    if not re.fullmatch(r"[A-Za-z0-9-]+\.[A-Za-z0-9-]+", method):
        raise typer.BadParameter(f"{method!r} is not group.method, e.g. sites.list", param_hint="METHOD")
    body = parse_params(params or [])
    known = find(method)
    if known is None:
        options.run(given, lambda client: client.call(method, body, mutation=False, retry=False))
    else:
        options.run(given, lambda client: known.call(client, body), known.primary)


api_command.__signature__ = options.signature(options.GLOBAL_OPTIONS, arguments=(  # type: ignore[attr-defined]
    inspect.Parameter("method", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                      annotation=Annotated[str, typer.Argument(help="group.method, e.g. reservations.get.")]),
    inspect.Parameter("params", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None,
                      annotation=Annotated[list[str] | None, typer.Argument(help="key=string or key:=json.")]),
))


def by_group() -> dict[str, list[Method]]:
    groups: dict[str, list[Method]] = {}
    for method in catalog().values():
        groups.setdefault(kebab(method.group), []).append(method)
    return groups


def add_methods(target: typer.Typer, name: str) -> None:
    """The catalog's methods of group `name` as commands of `target` (a group with commands of its
    own: `audit proof` beside `audit export`)."""
    hand_written = {info.name for info in target.registered_commands}
    for method in by_group().get(name, []):
        if method.command not in hand_written:  # `machines enroll` stands: it seals the credentials first
            target.command(method.command, help=method.summary)(method_command(method))

"""The method catalog as the relay holds it: read once at start-up from `api.catalog()` (and
`api.catalog_links()`: which methods take the id a creating method answers).

Each method's input schema is compiled once so a request is checked before it costs a database
round trip or an IAM decision; the database checks the input again (ops.call bypasses the relay).
The schemas come resolved (shared pieces, bounds read from compute.limits): a raised limit reaches
this pre-check when the relay restarts (docs/api.md, One place for each schema fact).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from better_compute.db import AsyncDatabase
from better_compute.relay.envelope import invalid_argument

PATH_PREFIX = "/api/compute"
MESSAGE_CHARS_MAX = 300  # a schema message quotes the offending value, which may be most of 64 KiB
SCHEMA_HINT = "GET /api/compute/openapi.json has every method's input schema."


@dataclass(frozen=True)
class InputSchema:
    """A JSON Schema compiled once, checked against every request."""

    schema: Mapping[str, Any]
    validator: Draft202012Validator = field(compare=False, repr=False)

    @classmethod
    def of(cls, schema: Mapping[str, Any]) -> InputSchema:
        """An invalid schema is an error here (at start-up), not at the first request."""
        Draft202012Validator.check_schema(schema)
        return cls(schema, Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER))

    def check(self, document: Any, what: str, hint: str = SCHEMA_HINT) -> None:
        """INVALID_ARGUMENT naming the failing path (`$.count`) unless the document fits."""
        error = best_match(self.validator.iter_errors(document))
        if error is not None:
            message = f"{error.json_path}: {error.message}"
            if len(message) > MESSAGE_CHARS_MAX:
                message = message[: MESSAGE_CHARS_MAX - 1] + "…"
            raise invalid_argument(f"invalid input for {what}: {message}", hint)


@dataclass(frozen=True)
class Method:
    name: str  # "reservations.create"
    action: str  # "compute:reservations:create"
    resource_type: str
    kind: str  # "read" | "mutation"
    summary: str
    input: InputSchema

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> Method:
        return cls(row["method"], row["action"], row["resource_type"], row["kind"], row["summary"],
                   InputSchema.of(row["input_schema"]))

    @property
    def group(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def path(self) -> str:
        """`reservations.create` is served at /api/compute/reservations/create."""
        return f"{PATH_PREFIX}/{self.name.replace('.', '/', 1)}"

    @property
    def is_mutation(self) -> bool:
        return self.kind == "mutation"


@dataclass(frozen=True)
class Link:
    """`target` takes, under `key`, the id that `method` answers at `pointer` (a JSON pointer into the
    answer: /data/<key> for a create, /data/0/<key> for a list's first item)."""

    method: str
    target: str
    key: str
    pointer: str


@dataclass(frozen=True)
class Catalog:
    methods: Mapping[str, Method]
    links: tuple[Link, ...] = ()

    @classmethod
    async def load(cls, db: AsyncDatabase) -> Catalog:
        rows = await db.rows("api.catalog")
        links = await db.rows("api.catalog_links")
        return cls({row["method"]: Method.of(row) for row in rows},
                   tuple(Link(row["method"], row["target"], row["key"], row["pointer"]) for row in links))

    def links_from(self, method: Method) -> list[Link]:
        return [link for link in self.links if link.method == method.name]

    def __iter__(self) -> Iterator[Method]:
        return iter(self.methods.values())

    def __contains__(self, name: object) -> bool:
        return name in self.methods

    def get(self, name: str) -> Method | None:
        return self.methods.get(name)

    def actions(self) -> list[str]:
        return [method.action for method in self]

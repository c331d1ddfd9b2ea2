"""How answers are printed: `json` and `yaml` for programs, `table` for people, `--query` to pick
one field, `--columns` to pick the columns.

The relay answers jsonb, whose keys come sorted by length, so the table cannot rely on key order:
it ranks columns (the row's own id and name, then the fields that say what a row is, then the
rest, the tenant and timestamps last) and keeps, in that order, those that fit the terminal (the
row's own id always). Values people copy into the next command (ids, uuids, CDI names, names) are
never shortened; other long cells are cut with …, and times are shown to the minute.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Sequence
from typing import Any, Literal

OutputFormat = Literal["table", "json", "yaml"]
QueryPath = tuple[str, ...]

GAP = "  "
MAX_CELL = 30
ELLIPSIS = "…"
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.IGNORECASE)
UTC_TIME = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d):\d\d(\.\d+)?(\+00:00|Z)$")
LEADING = ("id", "name")
DESCRIPTIVE = ("phase", "state", "shape", "count", "start", "end", "gpu_model", "node", "cdi_name", "type",
               "aggregate_type", "kind", "url", "reason", "status")
TRAILING = ("tenant_id", "created_at", "updated_at")
COPIED = ("cdi_name", "device_uuid", "name", "node", "url", "id")  # never cut, like every *_id and uuid


class QueryMiss(LookupError):
    """--query names a field the answer does not have."""


def parse_query(text: str) -> QueryPath:
    """`bookings.0.cdi_name` → ("bookings", "0", "cdi_name"); ValueError for an empty step."""
    steps = tuple(text.split("."))
    if not all(steps):
        raise ValueError(f"{text!r} has an empty step: write FIELD.PATH such as bookings.0.cdi_name")
    return steps


def select(data: Any, path: QueryPath) -> Any:
    for depth, step in enumerate(path):
        where = ".".join(path[:depth]) or "the answer"
        if isinstance(data, dict):
            if step not in data:
                raise QueryMiss(f"{where} has no field {step!r} (it has: {', '.join(sorted(data)) or 'none'})")
            data = data[step]
        elif isinstance(data, list):
            try:
                data = data[int(step)]
            except (ValueError, IndexError) as error:
                raise QueryMiss(f"{where} is a list of {len(data)}: {step!r} is not an index in it") from error
        else:
            raise QueryMiss(f"{where} is {json.dumps(data)}, which has no field {step!r}")
    return data


def scalar_text(value: Any) -> str:
    """Strings as they are (so that `$(better-compute … --query x)` is usable), the rest as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def cell(value: Any) -> str | None:
    """A table cell, or None for a value a table does not show (a nested object)."""
    if isinstance(value, dict):
        return None
    if isinstance(value, list):
        if any(isinstance(item, (dict, list)) for item in value):
            return str(len(value))
        return ",".join(scalar_text(item) for item in value)
    if value is None:
        return "-"
    if isinstance(value, str):
        if match := UTC_TIME.match(value):
            return f"{match.group(1)}Z"
    return " ".join(scalar_text(value).splitlines())  # one row per line, whatever a text holds


def clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + ELLIPSIS


def rank(key: str, primary: Sequence[str]) -> tuple[int, int]:
    if key in LEADING or key in primary:
        return 0, (LEADING + tuple(primary)).index(key)
    if key in DESCRIPTIVE:
        return 1, DESCRIPTIVE.index(key)
    if key in TRAILING:
        return 4, TRAILING.index(key)
    return (3 if key.endswith("_id") else 2), 0


def ordered_keys(rows: Sequence[dict[str, Any]], primary: Sequence[str]) -> list[str]:
    keys = list(dict.fromkeys(key for row in rows for key in row))
    return sorted(keys, key=lambda key: rank(key, primary))  # stable: ties keep the answer's order


def copied(key: str, cells: Sequence[str]) -> bool:
    """A column whose values people copy: shown whole, never cut."""
    return key in COPIED or key.endswith("_id") or all(UUID.match(text) for text in cells)


def table(rows: Sequence[dict[str, Any]], primary: Sequence[str], width: int,
          columns: Sequence[str] = ()) -> list[str]:
    """Columns in rank order (or the ones asked for, in that order), each as wide as its widest cell
    (at most MAX_CELL unless copied), skipping any that would overflow the width except the first;
    a column is dropped when no row has a cell for it."""
    cells = [{key: text for key, value in row.items() if (text := cell(value)) is not None} for row in rows]
    shown: list[tuple[str, int]] = []
    used = 0
    for key in columns or ordered_keys(rows, primary):
        present = [row[key] for row in cells if key in row]
        if not present and not columns:
            continue
        widest = max(len(key), *map(len, present)) if present else len(key)
        column_width = widest if copied(key, present) else min(widest, MAX_CELL, width)
        needed = column_width + (len(GAP) if shown else 0)
        if used + needed <= width or not shown or columns:
            shown.append((key, column_width))
            used += needed
    lines = [GAP.join(clip(key, size).ljust(size) for key, size in shown)]
    lines += [GAP.join(clip(row.get(key, "-" if columns else ""), size).ljust(size) for key, size in shown) for row in cells]
    return [line.rstrip() for line in lines]


def is_table(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(item, dict) for item in value)


def key_values(data: dict[str, Any], primary: Sequence[str], width: int, prefix: str = "") -> list[str]:
    """`key: value` lines; nested objects as `parent.child: value`; lists of objects as indented tables."""
    lines: list[str] = []
    tables: list[str] = []
    for key in ordered_keys([data], primary):
        value = data[key]
        if isinstance(value, dict):
            lines += key_values(value, (), width, f"{prefix}{key}.")
        elif is_table(value):
            tables += [f"{prefix}{key}:", *("  " + line for line in table(value, (), width - 2))]
        elif isinstance(value, list):
            lines.append(f"{prefix}{key}: {', '.join(map(scalar_text, value)) or '(none)'}")
        else:
            lines.append(f"{prefix}{key}: {scalar_text(value)}")
    return lines + tables


def pick(data: Any, columns: Sequence[str]) -> Any:
    """With --columns: each row (or the one object) reduced to those fields, in that order."""
    if not columns:
        return data
    if is_table(data):
        return [{key: row.get(key) for key in columns} for row in data]
    if isinstance(data, dict):
        return {key: data.get(key) for key in columns}
    return data


def render(data: Any, output_format: OutputFormat, primary: Sequence[str] = (), columns: Sequence[str] = ()) -> str:
    """The text to print (no trailing newline). `primary` names the rows' own id field(s)."""
    if output_format == "json":
        return json.dumps(pick(data, columns), indent=2, ensure_ascii=False)
    if output_format == "yaml":
        import yaml  # only here: most commands never print YAML

        return yaml.safe_dump(pick(data, columns), sort_keys=False, allow_unicode=True).rstrip("\n")
    width = shutil.get_terminal_size().columns
    if is_table(data):
        return "\n".join(table(data, primary, width, columns))
    if isinstance(data, dict):
        return "\n".join(key_values(pick(data, columns), primary, width))
    if isinstance(data, list):
        return "\n".join(map(scalar_text, data)) if data else "(none)"
    return scalar_text(data)

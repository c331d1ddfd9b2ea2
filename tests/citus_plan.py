"""The Citus plan (docs/scale.md) checked against a database's catalog, by Citus's own rules.

The plan is one data file, tests/fixtures/citus/tables.toml: which tables are distributed by
`site_id`, which are reference tables, which stay local on the coordinator, and the known exceptions
(today's breaches of the rules, each with its reason and its fix). The rules (Citus 12,
"Distributing tables", "Table types"):

- a distributed table has the distribution column, and each primary key, unique constraint, unique
  index and exclusion constraint of it includes that column (an exclusion constraint with `=`);
- a foreign key of a distributed table points at a reference table, or at a distributed table
  through the distribution column on both sides (co-located: site_id to site_id);
- a reference or local table has no foreign key to a distributed table.
"""

from __future__ import annotations

import tomllib
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

PLAN = Path(__file__).parent / "fixtures" / "citus" / "tables.toml"
DISTRIBUTION_COLUMN = "site_id"
NO_COLUMN = f"no {DISTRIBUTION_COLUMN} column"
KINDS = ("distributed", "reference", "local")

TABLES = """
SELECT pg_catalog.format('%%I.%%I', n.nspname, c.relname),
       EXISTS (SELECT 1 FROM pg_catalog.pg_attribute AS a
                WHERE a.attrelid = c.oid AND a.attname = %(column)s AND a.attnum > 0 AND NOT a.attisdropped)
  FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
 WHERE n.nspname = ANY (%(schemas)s) AND c.relkind IN ('r', 'p')
"""

# Every key (primary, unique, exclusion, and unique indexes that back no constraint) and foreign key:
# its table, name, kind, whether it includes the column (an exclusion constraint: compared with =),
# the table it references, and whether the reference pairs the column with the same column on the
# other side.
KEYS = """
SELECT pg_catalog.format('%%I.%%I', n.nspname, c.relname), con.conname, con.contype,
       CASE WHEN con.contype = 'x' THEN EXISTS (
           SELECT 1 FROM ROWS FROM (pg_catalog.unnest(con.conkey), pg_catalog.unnest(con.conexclop)) AS k (col, op)
             JOIN pg_catalog.pg_attribute AS a ON a.attrelid = con.conrelid AND a.attnum = k.col
             JOIN pg_catalog.pg_operator AS o ON o.oid = k.op
            WHERE a.attname = %(column)s AND o.oprname = '=')
       ELSE EXISTS (SELECT 1 FROM pg_catalog.pg_attribute AS a
                     WHERE a.attrelid = con.conrelid AND a.attname = %(column)s AND a.attnum = ANY (con.conkey)) END,
       CASE WHEN con.contype = 'f' THEN pg_catalog.format('%%I.%%I', fn.nspname, fc.relname) END,
       con.contype = 'f' AND EXISTS (
           SELECT 1 FROM ROWS FROM (pg_catalog.unnest(con.conkey), pg_catalog.unnest(con.confkey)) AS k (col, fcol)
             JOIN pg_catalog.pg_attribute AS a ON a.attrelid = con.conrelid AND a.attnum = k.col
             JOIN pg_catalog.pg_attribute AS fa ON fa.attrelid = con.confrelid AND fa.attnum = k.fcol
            WHERE a.attname = %(column)s AND fa.attname = %(column)s)
  FROM pg_catalog.pg_constraint AS con
  JOIN pg_catalog.pg_class AS c ON c.oid = con.conrelid
  JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
  LEFT JOIN pg_catalog.pg_class AS fc ON fc.oid = con.confrelid
  LEFT JOIN pg_catalog.pg_namespace AS fn ON fn.oid = fc.relnamespace
 WHERE n.nspname = ANY (%(schemas)s) AND con.contype IN ('p', 'u', 'x', 'f')
UNION ALL
SELECT pg_catalog.format('%%I.%%I', n.nspname, c.relname), ic.relname, 'i',
       EXISTS (SELECT 1 FROM pg_catalog.pg_attribute AS a
                WHERE a.attrelid = i.indrelid AND a.attname = %(column)s AND a.attnum = ANY (i.indkey)),
       NULL, false
  FROM pg_catalog.pg_index AS i
  JOIN pg_catalog.pg_class AS ic ON ic.oid = i.indexrelid
  JOIN pg_catalog.pg_class AS c ON c.oid = i.indrelid
  JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
 WHERE n.nspname = ANY (%(schemas)s) AND i.indisunique
   AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint AS con WHERE con.conindid = i.indexrelid)
"""


@dataclass(frozen=True)
class Plan:
    """Table name ("schema.table") -> its kind; and the known exceptions: table -> the breaches it is
    allowed (constraint or index names, or NO_COLUMN), each exception with its reason and fix."""

    kinds: dict[str, str]
    exceptions: dict[str, set[str]]

    @classmethod
    def read(cls, path: Path = PLAN) -> Plan:
        data = tomllib.loads(path.read_text())
        kinds: dict[str, str] = {}
        for kind in KINDS:
            for table in data[kind]["tables"]:
                assert table not in kinds, f"{table} is in two lists of {path.name}: {kinds[table]} and {kind}"
                kinds[table] = kind
        exceptions: dict[str, set[str]] = {}
        for exception in data.get("exception", []):
            assert exception.get("reason") and exception.get("fix"), f"an exception without reason or fix: {exception}"
            exceptions.setdefault(exception["table"], set()).update(exception["breaches"])
        return cls(kinds, exceptions)


def breaches(conn: psycopg.Connection[Any], plan: Plan, schemas: list[str]) -> dict[str, set[str]]:
    """Table -> what in it breaks Citus's rules for its kind in the plan. A table in no list is a
    breach of its own ("in no list")."""
    params = {"schemas": schemas, "column": DISTRIBUTION_COLUMN}
    found: dict[str, set[str]] = defaultdict(set)
    for table, has_column in conn.execute(TABLES, params).fetchall():
        if table not in plan.kinds:
            found[table].add("in no list")
        elif plan.kinds[table] == "distributed" and not has_column:
            found[table].add(NO_COLUMN)
    for table, name, kind, keyed, referenced, paired in conn.execute(KEYS, params).fetchall():
        table_kind = plan.kinds.get(table)
        if table_kind == "distributed":
            if kind != "f":
                ok = keyed
            else:
                ok = plan.kinds.get(referenced) == "reference" or (plan.kinds.get(referenced) == "distributed" and paired)
        else:
            ok = kind != "f" or plan.kinds.get(referenced) != "distributed"
        if not ok:
            found[table].add(name)
    return dict(found)

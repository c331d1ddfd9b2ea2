"""What our schema is, as text: a normalised pg_dump of our schemas, to compare two databases built
in different ways; and what of ours is left in a database, to prove a revert removed everything."""

from __future__ import annotations

import difflib
import re
import subprocess
from collections.abc import Sequence
from typing import Any

import psycopg

from better_compute.embedded import pg_bindir

OUR_SCHEMAS = ("compute", "api", "node_api", "worker_api", "ops", "agent_api")
OUR_ROLES = ("bc_owner", "bc_api", "bc_gateway", "bc_worker", "bc_operator")

# pg_dump starts each object (TOC entry) with "--\n-- Name: x; Type: T; Schema: s; Owner: o\n--\n".
_ENTRY_HEADER = re.compile(r"^--\n-- (.+)\n--\n", re.MULTILINE)
# Session settings, pg_dump's own comments and the \restrict key (random on every run) are not schema.
_NOISE_LINE = re.compile(
    r"^(SET \w+ = .*;"
    r"|SELECT pg_catalog\.set_config\(.*\);"
    r"|\\(un)?restrict \S+"
    r"|-- Dumped (from|by) .*)$"
)
_DUMP_FRAME = {"PostgreSQL database dump", "PostgreSQL database dump complete"}
# Entries made of one statement per line, whose line order follows the order of the GRANTs.
# Seed rows (one INSERT each) come in physical order, which says nothing about the schema.
_ORDER_FREE_TYPES = {"ACL", "DEFAULT ACL", "TABLE DATA"}

_DATABASE_WIDE_DEFAULT_ACLS = """
SELECT pg_catalog.format('-- Name: %s; Type: DATABASE-WIDE DEFAULT ACL', d.defaclrole::regrole)
       || E'\n'
       || pg_catalog.format('DEFAULT PRIVILEGES FOR ROLE %s ON %s: {%s}', d.defaclrole::regrole,
              CASE d.defaclobjtype WHEN 'r' THEN 'TABLES' WHEN 'S' THEN 'SEQUENCES' WHEN 'f' THEN 'FUNCTIONS'
                                   WHEN 'T' THEN 'TYPES' WHEN 'n' THEN 'SCHEMAS' END,
              (SELECT pg_catalog.string_agg(item::text, ',' ORDER BY item::text)
                 FROM pg_catalog.unnest(d.defaclacl) AS item))
  FROM pg_catalog.pg_default_acl AS d
 WHERE d.defaclnamespace = 0
"""

# Tables and sequences of ours, as quoted SQL names.
_RELATIONS = """
SELECT pg_catalog.format('%%I.%%I', n.nspname, c.relname), c.relkind
  FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
 WHERE n.nspname = ANY (%(schemas)s) AND c.relkind IN ('r', 'S')
 ORDER BY 1
"""

_LEFTOVERS = """
SELECT pg_catalog.format('schema %%I', n.nspname)
  FROM pg_catalog.pg_namespace AS n
 WHERE n.nspname = ANY (%(schemas)s)
UNION ALL
SELECT pg_catalog.format('%%s, %%s %%s', pg_catalog.pg_describe_object(s.classid, s.objid, s.objsubid),
           CASE s.deptype WHEN 'o' THEN 'owned by' WHEN 'a' THEN 'granted to' ELSE 'refers to' END, r.rolname)
  FROM pg_catalog.pg_shdepend AS s
  JOIN pg_catalog.pg_roles AS r ON r.oid = s.refobjid AND s.refclassid = 'pg_catalog.pg_authid'::regclass
 WHERE s.dbid = (SELECT oid FROM pg_catalog.pg_database WHERE datname = pg_catalog.current_database())
   AND r.rolname = ANY (%(roles)s)
 ORDER BY 1
"""


def schema_dump(dsn: str, without_data_of: Sequence[str] = ()) -> str:
    """Our schemas as pg_dump writes them (owners, grants, comments and seed rows included), entries sorted,
    plus the database-wide default privileges, which `pg_dump -n` leaves out. Without the rows of
    the relations `without_data_of` (schema-qualified), to compare databases that hold data."""
    entries = [*_pg_dump_entries(_run_pg_dump(dsn, without_data_of)), *_database_wide_default_acls(dsn)]
    return "\n\n".join(sorted(entries)) + "\n"


def schema_diff(expected: str, actual: str, labels: tuple[str, str] = ("a", "b")) -> str:
    """A unified diff of two schema dumps; empty when they are equal."""
    lines = difflib.unified_diff(expected.splitlines(keepends=True), actual.splitlines(keepends=True),
                                 fromfile=labels[0], tofile=labels[1], n=5)
    return "".join(lines)


def unseeded_relations(dsn: str) -> list[str]:
    """Our sequences and the tables of ours that hold no row: in a database just built, those that
    only its use fills (the others hold seed rows, which are part of the schema)."""
    with psycopg.connect(dsn) as conn:
        relations = conn.execute(_RELATIONS, {"schemas": list(OUR_SCHEMAS)}).fetchall()
    empty = [name for name, count in row_counts(dsn).items() if count == 0]
    return sorted([name for name, kind in relations if kind == "S"] + empty)


def row_counts(dsn: str) -> dict[str, int]:
    """Rows per table of ours (schema-qualified name)."""
    return _per_table(dsn, "SELECT count(*) FROM {}")


def table_digests(dsn: str) -> dict[str, str]:
    """A digest of the rows of each table of ours: it changes when any row does."""
    return _per_table(dsn, "SELECT pg_catalog.md5(coalesce(pg_catalog.string_agg(t::text, E'\\n' ORDER BY t::text), '')) FROM {} AS t")


def _per_table(dsn: str, query: str) -> dict[str, Any]:
    with psycopg.connect(dsn) as conn:
        tables = [name for name, kind in conn.execute(_RELATIONS, {"schemas": list(OUR_SCHEMAS)}).fetchall() if kind != "S"]
        return {name: conn.execute(query.format(name)).fetchone()[0] for name in tables}


def leftover_objects(dsn: str) -> list[str]:
    """Our schemas that exist, and every object in this database owned by or granted to our roles."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(_LEFTOVERS, {"schemas": list(OUR_SCHEMAS), "roles": list(OUR_ROLES)}).fetchall()
    return [row[0] for row in rows]


def _run_pg_dump(dsn: str, without_data_of: Sequence[str]) -> str:
    schemas = [arg for schema in OUR_SCHEMAS for arg in ("--schema", schema)]
    # Data too: a freshly built database holds only seed rows (limits, error codes), and they are part
    # of what a migration must reproduce.
    excluded = [f"--exclude-table-data={name}" for name in without_data_of]
    argv = [str(pg_bindir() / "pg_dump"), "--inserts", *schemas, *excluded, f"--dbname={dsn}"]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"pg_dump failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def _pg_dump_entries(dump: str) -> list[str]:
    """One text per TOC entry: its header line, then its lines without session settings or blanks."""
    parts = _ENTRY_HEADER.split(dump)
    entries = []
    for header, body in zip(parts[1::2], parts[2::2]):
        if header in _DUMP_FRAME:
            continue
        lines = [line for line in body.splitlines() if line.strip() and not _NOISE_LINE.match(line)]
        if _entry_type(header) in _ORDER_FREE_TYPES:
            lines.sort()
        entries.append("\n".join([f"-- {header}", *lines]))
    return entries


def _entry_type(header: str) -> str:
    match = re.search(r"; Type: ([^;]+);", header)
    return match[1] if match else ""


def _database_wide_default_acls(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        return [row[0] for row in conn.execute(_DATABASE_WIDE_DEFAULT_ACLS).fetchall()]

"""Write a function once: a new Sqitch change generated from the difference between sql/ and the plan.

The developer edits sql/ (the declarative truth) and runs `better-compute db change NAME`. This
module builds two scratch databases on a throwaway cluster, one by the plan's changes and one from
sql/, compares what they define, and writes the change: the deploy script holds sql/'s definitions
of what differs, the revert script the plan's definitions of the same objects, both copied out of
the catalog by the tool, never by hand. What it covers: functions and procedures (definition,
privileges, comment), views, comments on tables and columns, and renamed constraints. Anything else
that differs (a new column, an index) is listed; with `partial` the change is written anyway and the
developer adds those statements by hand at the top of the deploy and revert scripts.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import pglast
import psycopg
from pglast import ast
from pglast.enums import ObjectType
from psycopg import sql

from better_compute import embedded, migrate

SCHEMAS = ("compute", "api", "node_api", "worker_api", "ops", "site_api", "agent_api")
_NOISE = ("SET ", "SELECT pg_catalog.set_config", "\\")  # session settings, \\restrict lines
_ORDER_FREE = re.compile(r"; Type: (ACL|TABLE DATA);")  # grants and rows come in no telling order
_ENTRY_HEADER = re.compile(r"^--\n-- (.+)\n--\n", re.MULTILINE)
GENERATED = "-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md)."

_FUNCTIONS = """
SELECT p.oid::regprocedure::text, pg_catalog.pg_get_functiondef(p.oid), pg_catalog.pg_get_function_result(p.oid),
       pg_catalog.pg_get_function_arguments(p.oid),
       pg_catalog.obj_description(p.oid, 'pg_proc'),
       coalesce((SELECT pg_catalog.array_agg(a.grantee::regrole::text || ':' || a.privilege_type ORDER BY 1, 2)
                   FROM pg_catalog.aclexplode(p.proacl) AS a WHERE a.grantee <> p.proowner AND a.grantee <> 0), '{}'),
       p.proacl IS NULL OR EXISTS (SELECT FROM pg_catalog.aclexplode(p.proacl) AS a WHERE a.grantee = 0),
       CASE p.prokind WHEN 'p' THEN 'PROCEDURE' ELSE 'FUNCTION' END
  FROM pg_catalog.pg_proc AS p JOIN pg_catalog.pg_namespace AS n ON n.oid = p.pronamespace
 WHERE n.nspname = ANY(%(schemas)s)
   AND NOT EXISTS (SELECT FROM pg_catalog.pg_depend AS d WHERE d.objid = p.oid AND d.deptype = 'e')"""
_VIEWS = """
SELECT c.oid::regclass::text, pg_catalog.pg_get_viewdef(c.oid, true)
  FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
 WHERE c.relkind = 'v' AND n.nspname = ANY(%(schemas)s)"""
_RELATION_COMMENTS = """
SELECT c.oid::regclass::text, CASE c.relkind WHEN 'v' THEN 'VIEW' ELSE 'TABLE' END, coalesce(a.attname, ''),
       CASE WHEN a.attname IS NULL THEN pg_catalog.obj_description(c.oid, 'pg_class')
            ELSE pg_catalog.col_description(c.oid, a.attnum) END
  FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
  LEFT JOIN pg_catalog.pg_attribute AS a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
 WHERE c.relkind IN ('r', 'p', 'v') AND n.nspname = ANY(%(schemas)s)
UNION ALL
SELECT c.oid::regclass::text, CASE c.relkind WHEN 'v' THEN 'VIEW' ELSE 'TABLE' END, '',
       pg_catalog.obj_description(c.oid, 'pg_class')
  FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
 WHERE c.relkind IN ('r', 'p', 'v') AND n.nspname = ANY(%(schemas)s)"""
_TYPE_USERS = """
SELECT DISTINCT p.oid::regprocedure::text
  FROM pg_catalog.pg_depend AS d JOIN pg_catalog.pg_proc AS p ON p.oid = d.objid
  JOIN pg_catalog.pg_type AS t ON t.oid = d.refobjid
 WHERE d.classid = 'pg_catalog.pg_proc'::regclass AND d.refclassid = 'pg_catalog.pg_type'::regclass
   AND (t.oid = ANY(%(types)s::regtype[]) OR t.typelem = ANY(%(types)s::regtype[]))"""
_FUNCTIONS_USED_BY = """
SELECT DISTINCT p.oid::regprocedure::text
  FROM pg_catalog.pg_depend AS d JOIN pg_catalog.pg_proc AS p ON p.oid = d.refobjid
 WHERE d.refclassid = 'pg_catalog.pg_proc'::regclass AND d.classid = ANY(%(users)s::regclass[])"""
_VIEWS_TYPING_FUNCTIONS = """
SELECT DISTINCT c.oid::regclass::text
  FROM pg_catalog.pg_depend AS d JOIN pg_catalog.pg_type AS t ON t.oid = d.refobjid
  JOIN pg_catalog.pg_class AS c ON c.oid = t.typrelid OR c.reltype = t.typelem
 WHERE d.classid = 'pg_catalog.pg_proc'::regclass AND d.refclassid = 'pg_catalog.pg_type'::regclass AND c.relkind = 'v'"""
_CONSTRAINTS = """
SELECT c.conrelid::regclass::text, c.conname, pg_catalog.pg_get_constraintdef(c.oid)
  FROM pg_catalog.pg_constraint AS c JOIN pg_catalog.pg_namespace AS n ON n.oid = c.connamespace
 WHERE c.conrelid <> 0 AND n.nspname = ANY(%(schemas)s)"""


@dataclass(frozen=True)
class Function:
    signature: str
    definition: str
    result: str
    arguments: str  # with their names and defaults, which CREATE OR REPLACE cannot change
    comment: str | None
    grants: tuple[str, ...]  # "role:PRIVILEGE", owner and PUBLIC left out
    public: bool  # PUBLIC may execute it
    kind: str  # FUNCTION or PROCEDURE


@dataclass
class Catalog:
    functions: dict[str, Function] = field(default_factory=dict)
    views: dict[str, str] = field(default_factory=dict)
    comments: dict[tuple[str, str, str], str | None] = field(default_factory=dict)  # (relation, kind, column)
    constraints: dict[tuple[str, str], str] = field(default_factory=dict)  # (table, name) -> definition


def read_catalog(dsn: str) -> Catalog:
    catalog = Catalog()
    args = {"schemas": list(SCHEMAS)}
    with psycopg.connect(dsn) as conn:
        for sig, definition, result, arguments, comment, grants, public, kind in conn.execute(_FUNCTIONS, args):
            catalog.functions[sig] = Function(sig, definition, result, arguments, comment, tuple(grants), public, kind)
        catalog.views = dict(conn.execute(_VIEWS, args).fetchall())
        for relation, kind, column, comment in conn.execute(_RELATION_COMMENTS, args):
            catalog.comments[(relation, kind, column)] = comment
        catalog.constraints = {(table, name): definition for table, name, definition in conn.execute(_CONSTRAINTS, args)}
    return catalog


def _literal(text: str | None) -> str:
    return "NULL" if text is None else sql.quote(text)


def _privileges(function: Function, before: Function | None) -> list[str]:
    """GRANT/REVOKE statements that give `function` its privileges, from `before`'s (or a new
    function's: what the default privileges give, which revoke EXECUTE from PUBLIC)."""
    on = f"{function.kind} {function.signature}"
    had = set(before.grants) if before else set()
    public_before = before.public if before else False
    lines = []
    if public_before and not function.public:
        lines.append(f"REVOKE ALL ON {on} FROM PUBLIC;")
    if function.public and not public_before:
        lines.append(f"GRANT EXECUTE ON {on} TO PUBLIC;")
    for grant in sorted(had - set(function.grants)):
        role, privilege = grant.split(":")
        lines.append(f"REVOKE {privilege} ON {on} FROM {role};")
    for grant in sorted(set(function.grants) - had):
        role, privilege = grant.split(":")
        lines.append(f"GRANT {privilege} ON {on} TO {role};")
    return lines


def _define(function: Function, before: Function | None) -> list[str]:
    """Statements that take the database from `before` (None: absent) to `function`."""
    statements = []
    if before is not None and (before.result, before.arguments) != (function.result, function.arguments):
        statements.append(f"DROP {before.kind} {before.signature};")
        before = None
    if before is None or before.definition != function.definition:
        statements.append(function.definition.rstrip() + ";")
    if before is None or before.comment != function.comment:
        if before is not None or function.comment is not None:
            statements.append(f"COMMENT ON {function.kind} {function.signature} IS {_literal(function.comment)};")
    statements += _privileges(function, before)
    return statements


@dataclass
class Generated:
    deploy: list[str] = field(default_factory=list)
    revert: list[str] = field(default_factory=list)
    verify: list[str] = field(default_factory=list)
    by_hand: list[str] = field(default_factory=list)  # what differs that the tool does not write
    objects: list[str] = field(default_factory=list)  # qualified names of what the change alters
    prelude: list[str] = field(default_factory=list)  # deploy, before SET LOCAL ROLE (roles, schemas), as written
    revert_prelude: list[str] = field(default_factory=list)


def _objects(plan: Catalog, target: Catalog) -> list[str]:
    """The functions, views and tables whose definitions, comments or constraints differ."""
    names = {sig.split("(")[0] for sig in set(plan.functions) ^ set(target.functions)}
    names |= {sig.split("(")[0] for sig in set(plan.functions) & set(target.functions)
              if plan.functions[sig] != target.functions[sig]}
    names |= {view for view in set(plan.views) & set(target.views) if plan.views[view] != target.views[view]}
    names |= {key[0] for key, comment in target.comments.items() if key in plan.comments and plan.comments[key] != comment}
    names |= {table for table, _ in set(plan.constraints) ^ set(target.constraints)}
    return sorted(names)


def prerequisites(objects: list[str], top: Path = migrate.MIGRATIONS_DIR) -> list[str]:
    """For each object, the latest change of the plan whose deploy script defines or alters it: the
    real prerequisites of a change that alters those objects."""
    plan = migrate.read_plan(top)
    found: list[str] = []
    for name in objects:
        pattern = re.compile(rf"(FUNCTION|PROCEDURE|VIEW|TABLE|ON)\s+{re.escape(name)}[\s(]", re.IGNORECASE)
        for index in range(len(plan.changes) - 1, -1, -1):
            if pattern.search(plan.changes[index].script("deploy", top).read_text()):
                if plan.changes[index].name not in found:
                    found.append(plan.changes[index].name)
                break
    return found


def _step(plan: Catalog, target: Catalog) -> list[str]:
    """Statements that take a database with catalog `plan` to `target`, for what this tool covers."""
    statements: list[str] = []
    for sig in sorted(set(plan.functions) - set(target.functions)):
        statements.append(f"DROP {plan.functions[sig].kind} {sig};")
    for (table, name), definition in sorted(plan.constraints.items()):
        if (table, name) in target.constraints:
            continue
        renamed = [new for (t, new), d in sorted(target.constraints.items())
                   if t == table and d == definition and (t, new) not in plan.constraints]
        if len(renamed) == 1:
            statements.append(f"ALTER TABLE {table} RENAME CONSTRAINT {_ident(name)} TO {_ident(renamed[0])};")
    for sig in sorted(target.functions):
        if target.functions[sig] != plan.functions.get(sig):
            statements += _define(target.functions[sig], plan.functions.get(sig))
    if any(statement.startswith("CREATE OR REPLACE FUNCTION") for statement in statements):
        # In name order, a SQL function may come before one it calls: as pg_dump does, bodies are
        # checked when they run (the tool's own check and tests/test_migrations.py run them).
        statements.insert(0, "SET LOCAL check_function_bodies = off;")
    for view in sorted(target.views):
        if view in plan.views and plan.views[view] != target.views[view]:
            statements.append(f"CREATE OR REPLACE VIEW {view} AS\n{target.views[view].rstrip().rstrip(';')};")
    for (relation, kind, column), comment in sorted(target.comments.items(), key=lambda item: item[0]):
        key = (relation, kind, column)
        if key in plan.comments and plan.comments[key] != comment:
            what = f"COLUMN {relation}.{_ident(column)}" if column else f"{kind} {relation}"
            statements.append(f"COMMENT ON {what} IS {_literal(comment)};")
    return statements


def _ident(name: str) -> str:
    return name if name.isidentifier() and name == name.lower() else '"' + name.replace('"', '""') + '"'


def _verify(plan: Catalog, target: Catalog) -> list[str]:
    """Checks that fail without the change and hold while no later change undoes it: new functions
    exist, dropped ones do not, renamed constraints have their names. Behaviour checks are added by hand."""
    checks = [f"SELECT '{sig}'::regprocedure;" for sig in sorted(set(target.functions) - set(plan.functions))]
    checks += [f"SELECT 1 / (NOT EXISTS (SELECT FROM pg_catalog.pg_proc WHERE oid::regprocedure::text = {sql.quote(sig)}))::int;"
               for sig in sorted(set(plan.functions) - set(target.functions))]
    checks += [f"SELECT 1 / count(*)::int FROM pg_catalog.pg_constraint WHERE conrelid = '{table}'::regclass AND conname = {sql.quote(name)};"
               for (table, name) in sorted(set(target.constraints) - set(plan.constraints))]
    return checks


def dump_entries(dsn: str) -> dict[str, str]:
    """pg_dump of our schemas, one entry per object: its header -> its statements. With the rows:
    a scratch database holds only seed rows (limits, error codes), and they are part of the schema."""
    schemas = [arg for schema in SCHEMAS for arg in ("--schema", schema)]
    argv = [str(embedded.pg_bindir() / "pg_dump"), "--inserts", *schemas, f"--dbname={dsn}"]
    dump = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    parts = _ENTRY_HEADER.split(dump)
    entries = {}
    for header, body in zip(parts[1::2], parts[2::2]):
        lines = [line for line in body.splitlines() if line.strip() and not line.startswith(_NOISE)]
        entries[header] = "\n".join(sorted(lines) if _ORDER_FREE.search(header) else lines)
    return entries


def _differing(a: dict[str, str], b: dict[str, str]) -> list[str]:
    return sorted(header for header in set(a) | set(b) if a.get(header) != b.get(header))


def _apply(dsn: str, statements: list[str], prelude: Sequence[str] = ()) -> None:
    """Run `prelude` as the migrator, then `statements` as bc_owner, in one transaction."""
    with psycopg.connect(dsn) as conn:
        for statement in prelude:
            conn.execute(statement)
        conn.execute("SET LOCAL ROLE bc_owner")
        for statement in statements:
            conn.execute(statement)


@dataclass(frozen=True)
class Kept:
    """Statements of a change the tool does not write, kept as written, around what it writes."""

    early: list[str] = field(default_factory=list)  # deploy, before the functions: tables, types, indexes
    late: list[str] = field(default_factory=list)  # deploy, after them: rows, triggers, DO blocks
    revert_first: list[str] = field(default_factory=list)  # revert, before the functions come back
    revert_last: list[str] = field(default_factory=list)  # revert, after: dropping tables, types, indexes
    prelude: list[str] = field(default_factory=list)  # deploy, before SET LOCAL ROLE: run as the migrator
    revert_prelude: list[str] = field(default_factory=list)


def dropped_types(statements: list[str]) -> list[str]:
    """The types that statements drop (`DROP TYPE compute.t`), by qualified name."""
    names = []
    for statement in statements:
        parsed = pglast.parse_sql(statement)[0].stmt
        if isinstance(parsed, ast.DropStmt) and parsed.removeType == ObjectType.OBJECT_TYPE:
            names += [".".join(part.sval for part in name.names) for name in parsed.objects]
    return names


def _type_users(dsn: str, types: list[str]) -> set[str]:
    """The functions whose arguments or result are one of `types` (or an array of one)."""
    if not types:
        return set()
    with psycopg.connect(dsn) as conn:
        return {sig for (sig,) in conn.execute(_TYPE_USERS, {"types": types})}


def _only(catalog: Catalog, signatures: set[str], keep: bool) -> Catalog:
    """`catalog` with only the functions in `signatures` (keep) or without them."""
    return Catalog(functions={sig: f for sig, f in catalog.functions.items() if (sig in signatures) == keep},
                   views=catalog.views if not keep else {}, comments=catalog.comments if not keep else {},
                   constraints=catalog.constraints if not keep else {})


def _rows(dsn: str, query: str, args: dict[str, object]) -> set[str]:
    with psycopg.connect(dsn) as conn:
        return {name for (name,) in conn.execute(query, args)}


def _views(statement: str) -> set[str]:
    """The views a statement creates or drops, by qualified name."""
    parsed = pglast.parse_sql(statement)[0].stmt
    if isinstance(parsed, ast.ViewStmt):
        return {f"{parsed.view.schemaname}.{parsed.view.relname}"}
    if isinstance(parsed, ast.DropStmt) and parsed.removeType == ObjectType.OBJECT_VIEW:
        return {".".join(part.sval for part in name) for name in parsed.objects}
    return set()


def order_views(kept: Kept, typing: set[str]) -> Kept:
    """A view whose row type a function's arguments or result use is created before the functions in
    the deploy (with the tables) and dropped after them in the revert (before the tables)."""
    early = [s for s in kept.late if _views(s) & typing]
    last = [s for s in kept.revert_first if _views(s) & typing]
    return replace(kept, early=[*kept.early, *early], late=[s for s in kept.late if s not in early],
                   revert_first=[s for s in kept.revert_first if s not in last], revert_last=[*last, *kept.revert_last])


def _between(build_before: Callable[[str], object], build_after: Callable[[str], object], kept: Kept = Kept()) -> Generated:
    """Build two scratch databases on a throwaway cluster, write the statements from the first to the
    second, and check them: the deploy applied to the first must leave only what `by_hand` lists
    different from the second, and the revert must give the first's catalog back.

    A type that the kept statements drop and create again takes the functions that use it along: the
    deploy drops them (as they were), runs the kept statements, then creates them (as they become);
    the revert drops them, runs its kept statements, then creates them as they were."""
    cluster = embedded.throwaway("bc-change-")
    cluster.start()
    try:
        before_dsn, after_dsn = cluster.conninfo("before"), cluster.conninfo("after")
        cluster.ensure_database("before")
        cluster.ensure_database("after")
        build_before(before_dsn)
        build_after(after_dsn)
        before = dump_entries(before_dsn)
        users = _type_users(before_dsn, dropped_types(kept.early)) | _type_users(after_dsn, dropped_types(kept.revert_last))
        had = read_catalog(before_dsn)
        was = _only(had, users, keep=True)
        kept = order_views(kept, _rows(after_dsn, _VIEWS_TYPING_FUNCTIONS, {}))
        # Functions that a table's default, generated column or CHECK calls come before the tables;
        # those that these or a trigger use are dropped after the kept drops (of tables) in the revert.
        for_tables = _rows(after_dsn, _FUNCTIONS_USED_BY, {"users": ["pg_catalog.pg_attrdef", "pg_catalog.pg_constraint"]})
        used = _rows(after_dsn, _FUNCTIONS_USED_BY, {"users": ["pg_catalog.pg_attrdef", "pg_catalog.pg_constraint",
                                                               "pg_catalog.pg_trigger"]})
        ahead = _only(read_catalog(after_dsn), for_tables - set(had.functions), keep=True)
        first = [*_step(was, Catalog()), *_step(Catalog(), ahead), *kept.early]
        try:
            _apply(before_dsn, first, kept.prelude)
        except psycopg.Error as error:
            raise migrate.PlanError(f"the statements kept before the functions do not run first ({error})") from error
        plan, target = read_catalog(before_dsn), read_catalog(after_dsn)
        forward, back = _step(plan, target), _step(_only(target, users, keep=False), plan)
        # A kept comment the tool writes too (on a table or a column) is written once, by the tool.
        dropped_last = [f"DROP {function.kind} {sig};" for sig, function in sorted(target.functions.items())
                        if sig in used and sig not in had.functions]
        generated = Generated(deploy=[*first, *forward, *[s for s in kept.late if s not in forward]],
                              revert=[*[s for s in kept.revert_first if s not in back],
                                      *_step(_only(target, users, keep=True), Catalog()),
                                      *[s for s in back if s not in dropped_last], *kept.revert_last,
                                      *dropped_last, *_step(Catalog(), was)],
                              verify=_verify(plan, target), objects=_objects(plan, target),
                              prelude=kept.prelude, revert_prelude=kept.revert_prelude)
        _apply(before_dsn, generated.deploy[len(first):])
        generated.by_hand = _differing(dump_entries(before_dsn), dump_entries(after_dsn))
        if not generated.by_hand:
            _apply(before_dsn, generated.revert, kept.revert_prelude)
            undone = _differing(dump_entries(before_dsn), before)
            if undone:
                raise RuntimeError(f"the generated revert does not give the first catalog back: {undone}")
        return generated
    finally:
        cluster.destroy()


def generate(top: Path = migrate.MIGRATIONS_DIR, sql_dir: Path = migrate.SQL_DIR) -> Generated:
    """The change from what the plan builds to what sql/ builds."""
    return _between(lambda dsn: migrate.migrate(dsn, top), lambda dsn: migrate.load_declarative(dsn, sql_dir))


_ROUTINES = frozenset({ObjectType.OBJECT_FUNCTION, ObjectType.OBJECT_PROCEDURE, ObjectType.OBJECT_ROUTINE})


def _writes_a_routine(statement: ast.Node) -> bool:
    """Whether a statement defines, drops, alters, comments or grants a function: what the tool writes."""
    if isinstance(statement, (ast.CreateFunctionStmt, ast.AlterFunctionStmt)):
        return True
    if isinstance(statement, (ast.CommentStmt, ast.GrantStmt)):
        return statement.objtype in _ROUTINES
    return isinstance(statement, ast.DropStmt) and statement.removeType in _ROUTINES


_EARLY = (ast.CreateStmt, ast.AlterTableStmt, ast.IndexStmt, ast.CompositeTypeStmt, ast.CreateEnumStmt,
          ast.CreateStatsStmt, ast.CreateSeqStmt, ast.DefineStmt, ast.CreateDomainStmt)


def prelude_statements(script: str) -> list[str]:
    """The statements of a script before its SET LOCAL ROLE (creating a role or a schema, which
    bc_owner may not): kept as written, run as the migrator."""
    prelude = []
    for text in pglast.split(migrate.without_transaction_lines(script)):
        statement = pglast.parse_sql(text)[0].stmt
        if isinstance(statement, ast.VariableSetStmt) and statement.name == "role":
            return prelude
        prelude.append(text.strip() + ";")
    return []


def kept_statements(script: str) -> list[str]:
    """The statements of a script that the tool does not write (tables, indexes, rows, DO blocks),
    in their order, without the BEGIN/COMMIT and SET LOCAL ROLE that every script has (nor what
    comes before that: prelude_statements)."""
    kept = []
    for text in pglast.split(migrate.without_transaction_lines(script))[len(prelude_statements(script)):]:
        statement = pglast.parse_sql(text)[0].stmt
        if isinstance(statement, ast.VariableSetStmt) and statement.name in ("role", "check_function_bodies"):
            continue  # what every script sets, and what the tool sets before its functions
        if not _writes_a_routine(statement):
            kept.append(text.strip() + ";")
    return kept


_USE_FUNCTIONS = frozenset({ObjectType.OBJECT_TRIGGER, ObjectType.OBJECT_VIEW, ObjectType.OBJECT_MATVIEW,
                            ObjectType.OBJECT_RULE, ObjectType.OBJECT_POLICY})


def _is_early(statement: str) -> bool:
    """A definition functions may use (a table, a type, an index, dropping one in a revert), not
    dropping what may use a function (a trigger, a view: a revert drops those before the functions)."""
    parsed = pglast.parse_sql(statement)[0].stmt
    if isinstance(parsed, ast.DropStmt):
        return parsed.removeType not in _ROUTINES | _USE_FUNCTIONS
    return isinstance(parsed, _EARLY)


def _is_row(statement: str) -> bool:
    return isinstance(pglast.parse_sql(statement)[0].stmt, (ast.InsertStmt, ast.UpdateStmt, ast.DeleteStmt))


def regenerate(name: str, top: Path = migrate.MIGRATIONS_DIR) -> Generated:
    """The deploy and revert statements of an unreleased change, its functions written again by the
    tool from the catalogs before and after it. What the tool does not write is kept as written:
    tables, types and indexes before the functions in the deploy (after them in the revert), rows,
    triggers and DO blocks after them (before them in the revert). Refuses (PlanError) a released
    change, and one whose kept statements do not run in that order."""
    plan = migrate.read_plan(top)
    change = plan.change(name)
    index = plan.changes.index(change)
    if change in plan.released():
        raise migrate.PlanError(f"{name!r} is released: its scripts never change")
    deploy_script, revert_script = (change.script(kind, top).read_text() for kind in ("deploy", "revert"))
    deploy, revert = kept_statements(deploy_script), kept_statements(revert_script)
    # In the revert, rows written after a table's drop stay after it (a dropped table's key may use them).
    first_drop = next((i for i, s in enumerate(revert) if _is_early(s)), len(revert))
    last = [s for i, s in enumerate(revert) if _is_early(s) or (i > first_drop and _is_row(s))]
    kept = Kept(early=[s for s in deploy if _is_early(s)], late=[s for s in deploy if not _is_early(s)],
                revert_first=[s for s in revert if s not in last], revert_last=last,
                prelude=prelude_statements(deploy_script), revert_prelude=prelude_statements(revert_script))
    previous = plan.changes[index - 1].name
    try:
        generated = _between(lambda dsn: migrate.migrate(dsn, top, to=previous),
                             lambda dsn: migrate.migrate(dsn, top, to=name), kept)
    except (psycopg.Error, RuntimeError) as error:
        raise migrate.PlanError(f"{name!r}: its kept statements do not run around generated functions ({error}): it stays as written") from error
    if generated.by_hand:
        raise migrate.PlanError(f"{name!r} changes what the tool does not write: {generated.by_hand}")
    return generated


def rewrite_change(name: str, generated: Generated, top: Path = migrate.MIGRATIONS_DIR) -> list[Path]:
    """Write the deploy and revert scripts of an existing change from `generated`, keeping their
    opening comment lines (the tool's line added), the verify script and the plan's line."""
    paths = []
    for kind, statements, prelude in (("deploy", generated.deploy, generated.prelude),
                                      ("revert", generated.revert, generated.revert_prelude)):
        path = migrate.read_plan(top).change(name).script(kind, top)
        lines = path.read_text().splitlines()
        opening = [line for line in lines[: next(i for i, line in enumerate(lines) if not line.startswith("--"))]
                   if line != GENERATED]
        body = "\n\n".join(statements)
        before_role = "".join(f"{statement}\n\n" for statement in prelude)
        path.write_text("\n".join([*opening, GENERATED]) + f"\n\nBEGIN;\n\n{before_role}SET LOCAL ROLE bc_owner;\n\n{body}\n\nCOMMIT;\n")
        paths.append(path)
    return paths


def _script(kind: str, name: str, note: str, statements: list[str], end: str = "COMMIT") -> str:
    verb = {"deploy": "Deploy", "revert": "Revert", "verify": "Verify"}[kind]
    preposition = {"deploy": "to", "revert": "from", "verify": "on"}[kind]
    role = "" if kind == "verify" else "SET LOCAL ROLE bc_owner;\n\n"
    body = "\n\n".join(statements)
    return (f"-- {verb} better_compute:{name} {preposition} pg\n-- {note}\n{GENERATED}\n\n"
            f"BEGIN;\n\n{role}{body}\n\n{end};\n")


def write_change(name: str, note: str, requires: list[str], generated: Generated, top: Path = migrate.MIGRATIONS_DIR,
                 planner: str = "Better Compute <engineering@better-compute.invalid>") -> list[Path]:
    """Append the change to sqitch.plan and write its three scripts; return their paths."""
    plan = migrate.read_plan(top)
    if any(change.name == name for change in plan.changes):
        raise migrate.PlanError(f"the plan has a change named {name!r} already: name the new change after what it does")
    for required in requires:
        plan.change(required)  # raises PlanError for what the plan does not have
    paths = []
    scripts = {"deploy": (generated.deploy, "COMMIT"), "revert": (generated.revert, "COMMIT"),
               "verify": (generated.verify or ["SELECT 1;"], "ROLLBACK")}
    for kind, (statements, end) in scripts.items():
        path = top / kind / f"{name}.sql"
        path.write_text(_script(kind, name, note, statements, end))
        paths.append(path)
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    deps = f" [{' '.join(requires)}]" if requires else ""
    with (top / "sqitch.plan").open("a") as plan_file:
        plan_file.write(f"{name}{deps} {stamp} {planner} # {note}\n")
    return paths

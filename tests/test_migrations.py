"""The migrations: they build the same catalog as sql/, revert cleanly, verify what they deploy, and
stay a Sqitch project that the real `sqitch` deploys, verifies and reverts."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from better_compute import embedded, migrate
from schema_catalog import OUR_ROLES, leftover_objects, schema_diff, schema_dump
from sqitch_support import sqitch, sqitch_environment, sqitch_verify_failures

PLAN = migrate.read_plan()
CHANGE_NAMES = [change.name for change in PLAN.changes]
ROLES_CHANGE = "roles"  # roles belong to the cluster, shared with the session's other databases
SUPERSEDED = migrate.read_superseded()  # released verify scripts a later change made untrue


@contextmanager
def own_database(pg_server: embedded.Cluster, name: str) -> Iterator[str]:
    """A database of a module-scoped fixture (empty_database's are dropped after each test)."""
    drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
    with psycopg.connect(pg_server.conninfo("postgres"), autocommit=True) as conn:
        conn.execute(drop)
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield pg_server.conninfo(name)
    finally:
        with psycopg.connect(pg_server.conninfo("postgres"), autocommit=True) as conn:
            conn.execute(drop)


@pytest.fixture(scope="module")
def migrated_catalog(pg_server: embedded.Cluster) -> str:
    """The catalog (schema_dump) of a database built by the migrations, shared by the comparisons."""
    with own_database(pg_server, "bc_migrated_catalog") as dsn:
        migrate.migrate(dsn)
        return schema_dump(dsn)


def built_by_migrations(empty_database: Callable[[], str]) -> str:
    dsn = empty_database()
    migrate.migrate(dsn)
    return dsn


def built_from_sql_dir(empty_database: Callable[[], str]) -> str:
    dsn = empty_database()
    migrate.load_declarative(dsn)
    return dsn


def test_migrations_and_sql_dir_build_the_same_catalog(empty_database: Callable[[], str], migrated_catalog: str) -> None:
    by_migrations = migrated_catalog
    from_sql_dir = schema_dump(built_from_sql_dir(empty_database))
    diff = schema_diff(by_migrations, from_sql_dir, labels=("migrations/", "sql/"))
    assert diff == "", f"migrations/ and sql/ build different catalogs:\n{diff}"


@pytest.mark.parametrize(("alteration", "expected_in_diff"), [
    ("ALTER TABLE compute.limits ADD COLUMN x integer", ["CREATE TABLE compute.limits (", "x integer"]),
    ("CREATE FUNCTION compute.extra() RETURNS integer LANGUAGE sql AS 'SELECT 1'", ["compute.extra()"]),
    ("GRANT EXECUTE ON FUNCTION compute.limit(text) TO bc_api", ['compute."limit"(p_name text) TO bc_api']),
    ("ALTER VIEW ops.limits OWNER TO bc_operator", ["ALTER TABLE ops.limits OWNER TO bc_operator"]),
    ("COMMENT ON TABLE compute.limits IS 'changed'", ["COMMENT ON TABLE compute.limits IS 'changed'"]),
    ("ALTER DEFAULT PRIVILEGES FOR ROLE bc_owner GRANT EXECUTE ON FUNCTIONS TO PUBLIC",
     ["DEFAULT PRIVILEGES FOR ROLE bc_owner ON FUNCTIONS"]),
], ids=["column", "function", "grant", "owner", "comment", "database-wide-default-privileges"])
def test_catalog_comparison_reports_a_difference(
    empty_database: Callable[[], str], migrated_catalog: str, alteration: str, expected_in_diff: list[str]
) -> None:
    altered = built_from_sql_dir(empty_database)
    with psycopg.connect(altered) as conn:
        conn.execute(alteration)
    diff = schema_diff(migrated_catalog, schema_dump(altered), labels=("migrations/", "altered"))
    assert diff != "", f"the comparison missed: {alteration}"
    missing = [text for text in expected_in_diff if text not in diff]
    assert not missing, f"the diff does not name {missing}:\n{diff}"


def test_deploy_revert_all_deploy_again(empty_database: Callable[[], str]) -> None:
    dsn = built_by_migrations(empty_database)
    first_build = schema_dump(dsn)

    assert migrate.revert(dsn) == CHANGE_NAMES[::-1]
    assert leftover_objects(dsn) == []
    assert [name for name, applied, _ in migrate.status(dsn) if applied] == []

    assert migrate.migrate(dsn) == CHANGE_NAMES
    assert migrate.verify(dsn) == [(name, None) for name in CHANGE_NAMES]
    diff = schema_diff(first_build, schema_dump(dsn), labels=("first deploy", "deploy after revert"))
    assert diff == "", f"deploying again built a different catalog:\n{diff}"


def test_every_verify_script_passes_on_a_migrated_database(empty_database: Callable[[], str]) -> None:
    dsn = built_by_migrations(empty_database)
    assert migrate.verify(dsn) == [(name, None) for name in CHANGE_NAMES]


def verify_error(conn: psycopg.Connection, change: migrate.Change) -> psycopg.Error | None:
    """Run the change's verify script in a transaction that is rolled back; its error, if any."""
    try:
        conn.execute(migrate.without_transaction_lines(change.script("verify").read_text()))
        return None
    except psycopg.Error as error:
        return error
    finally:
        conn.rollback()


# One case per change of the plan (a superseded verify script: the test after this one); for `roles`,
# one per role, which the case hides.
CASES_WITHOUT_A_CHANGE = [
    *(pytest.param(change, role, id=f"{change.name}-without-{role}")
      for change in PLAN.changes if change.name == ROLES_CHANGE for role in OUR_ROLES),
    *(pytest.param(change, None, id=change.name)
      for change in PLAN.changes if change.name not in (ROLES_CHANGE, *SUPERSEDED)),
]


def hide_role(conn: psycopg.Connection, role: str) -> None:
    """Rename a role in the open transaction. Roles belong to the cluster and other databases of the
    session use them, so reverting `roles` would keep them; the rename is seen by this transaction only."""
    rename = sql.SQL("ALTER ROLE {} RENAME TO {}")
    conn.execute(rename.format(sql.Identifier(role), sql.Identifier(f"{role}_hidden")))


@dataclass(frozen=True)
class VerifyOutcome:
    """A verify script's error (None: it passed) without what it checks, and right after its change."""

    without: psycopg.Error | None
    with_it: psycopg.Error | None


@pytest.fixture(scope="module")
def plan_walk(pg_server: embedded.Cluster) -> Iterator[dict[tuple[str, str | None], VerifyOutcome]]:
    """One database deployed one change at a time along the plan: each case's verify script run just
    before its change (every earlier change applied: what reverting to the previous change leaves,
    test_deploy_revert_all_deploy_again checks that the reverts get there) and just after it; for
    `roles`, after it, once with each role hidden. One walk instead of a full deploy and a revert per
    case."""
    outcomes: dict[tuple[str, str | None], VerifyOutcome] = {}
    with own_database(pg_server, "bc_plan_walk") as dsn, psycopg.connect(dsn) as conn:
        for change in PLAN.changes:
            before_it = verify_error(conn, change)
            assert migrate.migrate(dsn, to=change.name) == [change.name]
            after_it = verify_error(conn, change)
            if change.name != ROLES_CHANGE:
                outcomes[change.name, None] = VerifyOutcome(before_it, after_it)
                continue
            for role in OUR_ROLES:
                hide_role(conn, role)
                outcomes[change.name, role] = VerifyOutcome(verify_error(conn, change), after_it)
        yield outcomes


@pytest.mark.parametrize(("change", "hidden_role"), CASES_WITHOUT_A_CHANGE)
def test_each_verify_script_fails_without_its_change(
    plan_walk: dict[tuple[str, str | None], VerifyOutcome], change: migrate.Change, hidden_role: str | None
) -> None:
    outcome = plan_walk[change.name, hidden_role]
    assert outcome.with_it is None, f"verify/{change.name}.sql fails right after its change: {outcome.with_it}"
    missing = f"role {hidden_role}" if hidden_role else f"change {change.name}"
    assert outcome.without is not None, f"verify/{change.name}.sql passes without {missing}"


def before(name: str) -> str:
    return CHANGE_NAMES[CHANGE_NAMES.index(name) - 1]


@pytest.mark.parametrize("entry", list(SUPERSEDED.values()), ids=list(SUPERSEDED))
def test_a_superseded_verify_script_holds_from_its_change_until_the_later_one(
    empty_database: Callable[[], str], entry: migrate.Superseded
) -> None:
    dsn = empty_database()
    change = PLAN.change(entry.change)
    held = {}
    for label, target in (("without it", before(entry.change)), ("after it", entry.change),
                          ("before the later change", before(entry.by)), ("after the later change", entry.by)):
        migrate.migrate(dsn, to=target)
        with psycopg.connect(dsn) as conn:
            held[label] = verify_error(conn, change) is None
    assert held == {"without it": False, "after it": True, "before the later change": True, "after the later change": False}
    assert (entry.change, None) in migrate.verify(dsn)  # not run once the later change is applied


@pytest.mark.skipif(shutil.which("sqitch") is None,
                    reason="the sqitch CLI is not installed (CI installs it: apt-get install sqitch)")
def test_sqitch_deploys_verifies_and_reverts_the_same_project(
    empty_database: Callable[[], str], tmp_path: Path
) -> None:
    dsn = empty_database()
    env = sqitch_environment(dsn, tmp_path)

    sqitch("deploy", "--verify", env=env)  # each verify script right after its change
    assert sqitch_verify_failures(env) == [name for name in CHANGE_NAMES if name in SUPERSEDED]
    sqitch("revert", "-y", env=env)
    assert leftover_objects(dsn) == []
    sqitch("deploy", env=env)

    by_yoyo = schema_dump(built_by_migrations(empty_database))
    diff = schema_diff(by_yoyo, schema_dump(dsn), labels=("yoyo", "sqitch"))
    assert diff == "", f"sqitch and yoyo build different catalogs:\n{diff}"

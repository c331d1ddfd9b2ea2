"""The migrations: they build the same catalog as sql/, revert cleanly, verify what they deploy, and
stay a Sqitch project that the real `sqitch` deploys, verifies and reverts."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from better_compute import migrate
from schema_catalog import OUR_ROLES, leftover_objects, schema_diff, schema_dump
from sqitch_support import sqitch, sqitch_environment

PLAN = migrate.read_plan()
CHANGE_IDS = [change.id for change in PLAN.changes]
ROLES_CHANGE = "roles"  # roles belong to the cluster, shared with the session's other databases


def built_by_migrations(empty_database: Callable[[], str]) -> str:
    dsn = empty_database()
    migrate.migrate(dsn)
    return dsn


def built_from_sql_dir(empty_database: Callable[[], str]) -> str:
    dsn = empty_database()
    migrate.load_declarative(dsn)
    return dsn


def test_migrations_and_sql_dir_build_the_same_catalog(empty_database: Callable[[], str]) -> None:
    by_migrations = schema_dump(built_by_migrations(empty_database))
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
    empty_database: Callable[[], str], alteration: str, expected_in_diff: list[str]
) -> None:
    by_migrations = built_by_migrations(empty_database)
    altered = built_from_sql_dir(empty_database)
    with psycopg.connect(altered) as conn:
        conn.execute(alteration)
    diff = schema_diff(schema_dump(by_migrations), schema_dump(altered), labels=("migrations/", "altered"))
    assert diff != "", f"the comparison missed: {alteration}"
    missing = [text for text in expected_in_diff if text not in diff]
    assert not missing, f"the diff does not name {missing}:\n{diff}"


def test_deploy_revert_all_deploy_again(empty_database: Callable[[], str]) -> None:
    dsn = built_by_migrations(empty_database)
    first_build = schema_dump(dsn)

    assert migrate.revert(dsn) == CHANGE_IDS[::-1]
    assert leftover_objects(dsn) == []
    assert [name for name, applied, _ in migrate.status(dsn) if applied] == []

    assert migrate.migrate(dsn) == CHANGE_IDS
    assert migrate.verify(dsn) == [(name, None) for name in CHANGE_IDS]
    diff = schema_diff(first_build, schema_dump(dsn), labels=("first deploy", "deploy after revert"))
    assert diff == "", f"deploying again built a different catalog:\n{diff}"


def test_every_verify_script_passes_on_a_migrated_database(empty_database: Callable[[], str]) -> None:
    dsn = built_by_migrations(empty_database)
    assert migrate.verify(dsn) == [(name, None) for name in CHANGE_IDS]


def verify_error(conn: psycopg.Connection, change: migrate.Change) -> psycopg.Error | None:
    """Run the change's verify script in a transaction that is rolled back; its error, if any."""
    try:
        conn.execute(migrate.without_transaction_lines(change.script("verify").read_text()))
        return None
    except psycopg.Error as error:
        return error
    finally:
        conn.rollback()


# One case per change of the plan whose verify script runs (not one a later instance supersedes);
# for `roles`, one per role, which the case hides.
CASES_WITHOUT_A_CHANGE = [
    *(pytest.param(change, role, id=f"{change.id}-without-{role}")
      for change in PLAN.changes if change.name == ROLES_CHANGE for role in OUR_ROLES),
    *(pytest.param(change, None, id=change.id)
      for change in PLAN.changes if change.name != ROLES_CHANGE and not change.superseded),
]


def hide_role(conn: psycopg.Connection, role: str) -> None:
    """Rename a role in the open transaction. Roles belong to the cluster and other databases of the
    session use them, so reverting `roles` would keep them; the rename is seen by this transaction only."""
    rename = sql.SQL("ALTER ROLE {} RENAME TO {}")
    conn.execute(rename.format(sql.Identifier(role), sql.Identifier(f"{role}_hidden")))


@pytest.mark.parametrize(("change", "hidden_role"), CASES_WITHOUT_A_CHANGE)
def test_each_verify_script_fails_without_its_change(
    empty_database: Callable[[], str], change: migrate.Change, hidden_role: str | None
) -> None:
    dsn = built_by_migrations(empty_database)
    with psycopg.connect(dsn) as conn:
        error = verify_error(conn, change)
        assert error is None, f"verify/{change.name}.sql fails on a fully migrated database: {error}"

        if hidden_role is None:
            # Without the change's first instance: a rework's verify script checks what all its
            # instances made (a rework that deploys nothing, as those superseding a verify script).
            first = CHANGE_IDS.index(change.name)
            migrate.revert(dsn, to=PLAN.qualified(first - 1))
        else:
            hide_role(conn, hidden_role)

        missing = f"role {hidden_role}" if hidden_role else f"change {change.name}"
        assert verify_error(conn, change) is not None, f"verify/{change.name}.sql passes without {missing}"


# The released instance each rework supersedes, and the tag after which it was reworked.
SUPERSEDED_AT_RELEASE = {"capacity_limits": "@v0.3.0", "tenancy": "@v0.3.0", "fleet": "@v0.3.0",
                         "offerings_quotas": "@v0.3.0", "outbox": "@v0.4.0"}


def test_a_rework_supersedes_the_released_verify_scripts_that_no_longer_hold(empty_database: Callable[[], str]) -> None:
    # These verify scripts, as @v0.2.0 and @v0.3.0 released them, check signatures that api_ids changed, a
    # limit that v0_2_0_repairs removed and a trigger that reservation_events_once dropped: on today's
    # schema they fail. Their scripts stay as released (the lock holds them); a rework of each after a
    # later tag supersedes them (sqitch verify: same test below).
    dsn = built_by_migrations(empty_database)
    superseded = [change for change in PLAN.changes if change.superseded]
    assert [change.id for change in superseded] == list(SUPERSEDED_AT_RELEASE)
    assert [change.script("verify").name for change in superseded] == [f"{name}{tag}.sql" for name, tag in SUPERSEDED_AT_RELEASE.items()]
    with psycopg.connect(dsn) as conn:
        assert [change.id for change in superseded if verify_error(conn, change) is not None] == list(SUPERSEDED_AT_RELEASE)
        reworks = [PLAN.change(f"{name}@HEAD") for name in SUPERSEDED_AT_RELEASE]
        assert [verify_error(conn, change) for change in reworks] == [None] * len(reworks)
    assert migrate.verify(dsn) == [(change_id, None) for change_id in CHANGE_IDS]


@pytest.mark.skipif(shutil.which("sqitch") is None,
                    reason="the sqitch CLI is not installed (CI installs it: apt-get install sqitch)")
def test_sqitch_deploys_verifies_and_reverts_the_same_project(
    empty_database: Callable[[], str], tmp_path: Path
) -> None:
    dsn = empty_database()
    env = sqitch_environment(dsn, tmp_path)

    sqitch("deploy", env=env)
    sqitch("verify", env=env)
    sqitch("revert", "-y", env=env)
    assert leftover_objects(dsn) == []
    sqitch("deploy", env=env)

    by_yoyo = schema_dump(built_by_migrations(empty_database))
    diff = schema_diff(by_yoyo, schema_dump(dsn), labels=("yoyo", "sqitch"))
    assert diff == "", f"sqitch and yoyo build different catalogs:\n{diff}"

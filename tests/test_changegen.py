"""`better-compute db change`: a change written by the tool from the difference between sql/ and the
plan, never by hand. Its deploy takes a database built by the plan to sql/'s catalog, its revert back."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from better_compute import changegen, migrate
from schema_catalog import schema_diff, schema_dump


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, Path]:
    """Copies of migrations/ and sql/ to edit."""
    top = Path(shutil.copytree(migrate.MIGRATIONS_DIR, tmp_path / "migrations"))
    sql_dir = Path(shutil.copytree(migrate.SQL_DIR, tmp_path / "sql"))
    return top, sql_dir


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_a_change_is_written_from_the_sql_dir_diff(project: tuple[Path, Path], empty_database: Callable[[], str]) -> None:
    top, sql_dir = project
    edit(sql_dir / "035_request_fields.sql", "'One field of a JSON request, checked for type;",
         "'One field of a JSON request (an edited comment), checked for type;")
    edit(sql_dir / "030_limits.sql", "COMMENT ON FUNCTION compute.limit(text)", """CREATE FUNCTION compute.limit_or(p_name text, p_default bigint)
RETURNS bigint LANGUAGE sql STABLE AS $$ SELECT coalesce((SELECT value FROM compute.limits WHERE name = p_name), p_default) $$;
GRANT EXECUTE ON FUNCTION compute.limit_or(text, bigint) TO bc_worker;
COMMENT ON FUNCTION compute.limit(text)""")

    generated = changegen.generate(top, sql_dir)
    assert generated.by_hand == []
    assert generated.objects == ["compute.limit_or", "compute.request_field"]
    # compute.limit_or is new: no change defines it; compute.request_field: the latest change that does.
    [defines_request_field] = changegen.prerequisites(generated.objects, top)
    names = [change.name for change in migrate.read_plan(top).changes]
    assert names.index(defines_request_field) >= names.index("api_input_conformance")
    paths = changegen.write_change("limit_or", "A limit or a default", ["limits"], generated, top)
    deploy, revert, verify = (path.read_text() for path in paths)
    assert "an edited comment" in deploy and "an edited comment" not in revert
    assert "CREATE OR REPLACE FUNCTION compute.limit_or(p_name text, p_default bigint)" in deploy
    assert "GRANT EXECUTE ON FUNCTION compute.limit_or(text,bigint) TO bc_worker;" in deploy
    assert "DROP FUNCTION compute.limit_or(text,bigint);" in revert
    assert "SELECT 'compute.limit_or(text,bigint)'::regprocedure;" in verify
    assert migrate.read_plan(top).changes[-1] == migrate.Change("limit_or", ("limits",), "A limit or a default")

    by_plan, from_sql = empty_database(), empty_database()
    migrate.migrate(by_plan, top)
    migrate.load_declarative(from_sql, sql_dir)
    diff = schema_diff(schema_dump(from_sql), schema_dump(by_plan), labels=("sql/", "the plan with the generated change"))
    assert diff == ""
    assert [error for _, error in migrate.verify(by_plan, top)] == [None] * len(migrate.read_plan(top).changes)


def test_what_the_tool_does_not_write_is_listed_and_nothing_is_written(project: tuple[Path, Path]) -> None:
    top, sql_dir = project
    edit(sql_dir / "030_limits.sql", "    unit        text NOT NULL", "    origin      text,\n    unit        text NOT NULL")
    generated = changegen.generate(top, sql_dir)
    assert generated.deploy == []
    assert generated.by_hand == ["Data for Name: limits; Type: TABLE DATA; Schema: compute; Owner: bc_owner",
                                 "Name: limits; Type: TABLE; Schema: compute; Owner: bc_owner"]


def test_a_released_change_is_never_written_again() -> None:
    with pytest.raises(migrate.PlanError, match="'atoms' is released"):
        changegen.regenerate("atoms")


def test_what_the_tool_does_not_write_is_kept_as_written() -> None:
    kept = changegen.kept_statements("""BEGIN;
SET LOCAL ROLE bc_owner;
ALTER TABLE compute.t ADD COLUMN c integer;
CREATE OR REPLACE FUNCTION compute.f() RETURNS integer LANGUAGE sql AS $$ SELECT 1; $$;
COMMENT ON FUNCTION compute.f() IS 'f; g';
GRANT EXECUTE ON FUNCTION compute.f() TO bc_api;
INSERT INTO compute.limits VALUES ('x', 1, 'count', 'x; y');
COMMENT ON TABLE compute.t IS 't';
COMMIT;
""")
    assert kept == ["ALTER TABLE compute.t ADD COLUMN c integer;",
                    "INSERT INTO compute.limits VALUES ('x', 1, 'count', 'x; y');",
                    "COMMENT ON TABLE compute.t IS 't';"]


def forget_the_release_of(top: Path, name: str) -> None:
    """The copy's plan without the tags after `name`: the tool never rewrites a released change, so
    whether its output is a fixpoint (what it writes again equals what it wrote) is asked of a copy
    where the change is not released yet."""
    plan = (top / "sqitch.plan").read_text().splitlines(keepends=True)
    at = next(number for number, line in enumerate(plan) if line.startswith(f"{name} "))
    (top / "sqitch.plan").write_text("".join(plan[:at] + [line for line in plan[at:] if not line.startswith("@")]))


# webhook_secrets_sealed drops and re-creates a type its own functions return (compute.webhook_delivery)
# and renames an argument (webhook_create's p_secret): the tool drops those functions first and
# creates them after the type, in the deploy and in the revert. gpu_conditions_and_mig_layouts has a
# generated column that calls a function the change creates: the tool creates that function before the
# tables. svid_issuance and instances create trigger functions and the tables their triggers are on:
# the revert drops those functions after the tables (and their triggers). machines creates a role and a
# schema before its SET LOCAL ROLE (kept there, run as the migrator), functions that return its view
# ops.machines (the view comes before them), and rows its tables' keys use (deleted after the tables).
@pytest.mark.parametrize("name", ["error_contract_read", "webhook_secrets_sealed", "gpu_conditions_and_mig_layouts",
                                  "svid_issuance", "instances", "machines"])
def test_writing_a_regenerated_change_again_changes_nothing(project: tuple[Path, Path], name: str) -> None:
    top, _ = project
    forget_the_release_of(top, name)
    before = {kind: (top / kind / f"{name}.sql").read_text() for kind in ("deploy", "revert")}
    changegen.rewrite_change(name, changegen.regenerate(name, top), top)
    assert {kind: (top / kind / f"{name}.sql").read_text() for kind in ("deploy", "revert")} == before


def test_a_type_the_change_drops_takes_the_functions_that_use_it_along() -> None:
    assert changegen.dropped_types(["DROP TYPE compute.webhook_delivery, compute.other;", "DROP VIEW ops.v;"]) == [
        "compute.webhook_delivery", "compute.other"]


def test_a_view_whose_row_type_functions_use_comes_before_them_and_goes_after_them() -> None:
    kept = changegen.Kept(early=["CREATE TABLE compute.t (a int);"],
                          late=["CREATE VIEW ops.v AS SELECT a FROM compute.t;", "CREATE VIEW ops.w AS SELECT 1 AS b;"],
                          revert_first=["DROP VIEW ops.w;", "DROP VIEW ops.v;"], revert_last=["DROP TABLE compute.t;"])
    assert changegen.order_views(kept, {"ops.v"}) == changegen.Kept(
        early=["CREATE TABLE compute.t (a int);", "CREATE VIEW ops.v AS SELECT a FROM compute.t;"],
        late=["CREATE VIEW ops.w AS SELECT 1 AS b;"],
        revert_first=["DROP VIEW ops.w;"], revert_last=["DROP VIEW ops.v;", "DROP TABLE compute.t;"])


def test_what_a_script_runs_before_its_role_is_kept_before_it() -> None:
    script = "BEGIN;\nCREATE SCHEMA site_api;\nSET LOCAL ROLE bc_owner;\nCREATE TABLE compute.t (a int);\nCOMMIT;\n"
    assert changegen.prelude_statements(script) == ["CREATE SCHEMA site_api;"]
    assert changegen.kept_statements(script) == ["CREATE TABLE compute.t (a int);"]

"""The SQL lint (better_compute.lint): each rule catches its bad example and passes its good one."""

from __future__ import annotations

import pathlib

import pytest

from better_compute.lint import Finding, lint_paths, lint_text, main


def schema_findings(sql: str) -> list[Finding]:
    return lint_text(sql, "sql/example.sql", schema_rules=True)


def rules(findings: list[Finding]) -> list[str]:
    return [finding.rule for finding in findings]


def plpgsql_function(body: str, *, name: str = "compute.example") -> str:
    return (
        f"CREATE FUNCTION {name}(p int) RETURNS int LANGUAGE plpgsql AS $$\n"
        f"BEGIN\n{body}\nRETURN p;\nEND\n$$;\n"
    )


def write(path: pathlib.Path, sql: str) -> pathlib.Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(sql, encoding="utf-8")
    return path


def test_finding_prints_path_line_rule_and_message() -> None:
    assert str(Finding("sql/a.sql", 3, "clock", "bad")) == "sql/a.sql:3: [clock] bad"


# parse


def test_unparseable_file_is_reported() -> None:
    findings = lint_text("SELECT 1;\n\nSELEC 2;\n", "pgtap/t.sql", schema_rules=False)
    assert [(f.line, f.rule) for f in findings] == [(3, "parse")]
    assert "SELEC" in findings[0].message


def test_psql_meta_commands_are_ignored() -> None:
    sql = "\\set ON_ERROR_STOP 1\n\\i setup.sql\nSELECT 1;\n"
    assert lint_text(sql, "pgtap/t.sql", schema_rules=False) == []


def test_psql_variables_and_gset_in_a_test_script_parse() -> None:
    sql = "SELECT 1 AS pool \\gset\nSELECT :'pool'::uuid, :\"pool\", :pool, 1::int\n\\gset\n"
    assert lint_text(sql, "pgtap/t.sql", schema_rules=False) == []


def test_a_psql_variable_in_a_schema_file_is_a_parse_finding() -> None:
    findings = lint_text("SELECT :'pool';\n", "sql/t.sql", schema_rules=True)
    assert [(f.line, f.rule) for f in findings] == [(1, "parse")]


def test_unparseable_plpgsql_body_is_reported() -> None:
    sql = "SELECT 1;\nCREATE FUNCTION f() RETURNS int LANGUAGE plpgsql AS $$ BEGIN RETURN 1 END $$;"
    findings = lint_text(sql, "pgtap/t.sql", schema_rules=False)
    assert [(f.line, f.rule) for f in findings] == [(2, "parse")]


def test_unparseable_sql_body_is_reported() -> None:
    sql = "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $$\n  SELEC 1\n$$;"
    findings = lint_text(sql, "pgtap/t.sql", schema_rules=False)
    assert [(f.line, f.rule) for f in findings] == [(2, "parse")]


def test_unparseable_do_block_is_reported() -> None:
    findings = lint_text("DO $$ BEGIN PERFORM FROM; END $$;", "pgtap/t.sql", schema_rules=False)
    assert rules(findings) == ["parse"]


def test_parseable_functions_pass() -> None:
    sql = plpgsql_function("PERFORM 1;") + (
        "CREATE FUNCTION g() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$;\n"
        "CREATE FUNCTION h() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT 1; END;\n"
        "DO $$ BEGIN PERFORM 1; END $$;\n"
    )
    assert lint_text(sql, "pgtap/t.sql", schema_rules=False) == []


# errcode


SCHEMA_TYPED = """CREATE FUNCTION compute.f(p_res compute.reservations) RETURNS compute.pools LANGUAGE plpgsql AS $$
DECLARE
    v_pool compute.pools;
    v_list compute.placement_candidate[] := '{}';
BEGIN
    RAISE EXCEPTION 'no code';
    RETURN v_pool;
END
$$;
"""


def test_functions_typed_by_our_schemas_are_still_linted() -> None:
    # libpg_query cannot resolve compute.* types in PL/pgSQL; the lint retypes them and checks the body.
    findings = schema_findings(SCHEMA_TYPED)
    assert rules(findings) == ["errcode"]
    assert findings[0].line == 6


def test_raise_exception_without_errcode_is_reported() -> None:
    findings = schema_findings(plpgsql_function("RAISE EXCEPTION 'bad %', p;"))
    assert [(f.line, f.rule) for f in findings] == [(3, "errcode")]


def test_raise_without_level_or_errcode_is_reported() -> None:
    assert rules(schema_findings(plpgsql_function("RAISE 'bad';"))) == ["errcode"]


def test_raise_using_message_without_errcode_is_reported() -> None:
    findings = schema_findings(plpgsql_function("RAISE EXCEPTION USING MESSAGE = 'bad';"))
    assert rules(findings) == ["errcode"]


def test_raise_exception_nested_in_handler_and_loop_is_reported() -> None:
    body = (
        "FOR i IN 1..3 LOOP\n"
        "  BEGIN\n"
        "    PERFORM 1;\n"
        "  EXCEPTION WHEN others THEN\n"
        "    IF p > 0 THEN RAISE EXCEPTION 'nested'; END IF;\n"
        "  END;\n"
        "END LOOP;"
    )
    findings = schema_findings(plpgsql_function(body))
    assert [(f.line, f.rule) for f in findings] == [(7, "errcode")]


def test_raise_exception_in_do_block_is_reported() -> None:
    assert rules(schema_findings("DO $$ BEGIN RAISE EXCEPTION 'bad'; END $$;")) == ["errcode"]


@pytest.mark.parametrize(
    "statement",
    [
        "RAISE EXCEPTION 'bad %', p USING ERRCODE = 'BC400', HINT = 'fix it';",
        "RAISE EXCEPTION USING ERRCODE = 'BC400', MESSAGE = 'bad';",
        "RAISE EXCEPTION division_by_zero;",
        "RAISE SQLSTATE 'BC400';",
    ],
)
def test_raise_with_errcode_passes(statement: str) -> None:
    assert schema_findings(plpgsql_function(statement)) == []


def test_reraise_is_allowed() -> None:
    body = "BEGIN\n  PERFORM 1;\nEXCEPTION WHEN others THEN\n  RAISE;\nEND;"
    assert schema_findings(plpgsql_function(body)) == []


def test_raise_notice_is_not_checked() -> None:
    body = "RAISE NOTICE 'hello %', p;\nRAISE WARNING 'careful';"
    assert schema_findings(plpgsql_function(body)) == []


# definer-search-path


def test_security_definer_without_search_path_is_reported() -> None:
    sql = "\nCREATE FUNCTION api.f() RETURNS int LANGUAGE sql SECURITY DEFINER AS $$ SELECT 1 $$;"
    findings = schema_findings(sql)
    assert [(f.line, f.rule) for f in findings] == [(2, "definer-search-path")]


def test_security_definer_with_search_path_passes() -> None:
    sql = (
        "CREATE FUNCTION api.f() RETURNS int LANGUAGE sql SECURITY DEFINER SET search_path = ''\n"
        "AS $$ SELECT 1 $$;"
    )
    assert schema_findings(sql) == []


def test_security_invoker_needs_no_search_path() -> None:
    sql = "CREATE FUNCTION api.f() RETURNS int LANGUAGE sql SECURITY INVOKER AS $$ SELECT 1 $$;"
    assert schema_findings(sql) == []


def test_alter_function_security_definer_without_search_path_is_reported() -> None:
    findings = schema_findings("ALTER FUNCTION api.f() SECURITY DEFINER;")
    assert rules(findings) == ["definer-search-path"]


def test_alter_function_security_definer_with_search_path_passes() -> None:
    sql = "ALTER FUNCTION api.f() SECURITY DEFINER SET search_path = pg_catalog, pg_temp;"
    assert schema_findings(sql) == []


# clock


def test_now_in_plpgsql_is_reported() -> None:
    findings = schema_findings(plpgsql_function("PERFORM now();"))
    assert [(f.line, f.rule) for f in findings] == [(3, "clock")]
    assert "now()" in findings[0].message


def test_clock_in_plpgsql_assignment_and_declaration_is_reported() -> None:
    sql = (
        "CREATE FUNCTION compute.f() RETURNS timestamptz LANGUAGE plpgsql AS $$\n"
        "DECLARE\n"
        "  v_at timestamptz := clock_timestamp();\n"
        "BEGIN\n"
        "  v_at := pg_catalog.statement_timestamp();\n"
        "  IF v_at < LOCALTIMESTAMP THEN RETURN v_at; END IF;\n"
        "  RETURN 'now'::timestamptz;\n"
        "END\n"
        "$$;"
    )
    findings = schema_findings(sql)
    assert [(f.line, f.rule) for f in findings] == [(line, "clock") for line in (3, 5, 6, 7)]


def test_current_timestamp_in_column_default_is_reported() -> None:
    sql = "CREATE TABLE compute.t (\n  id int,\n  at timestamptz DEFAULT CURRENT_TIMESTAMP\n);"
    findings = schema_findings(sql)
    assert [(f.line, f.rule) for f in findings] == [(3, "clock")]
    assert "CURRENT_TIMESTAMP" in findings[0].message


@pytest.mark.parametrize(
    "expression",
    [
        "now()",
        "pg_catalog.now()",
        "transaction_timestamp()",
        "timeofday()",
        "CURRENT_DATE",
        "CURRENT_TIME",
        "LOCALTIME(3)",
        "'now'::timestamptz",
        "timestamp 'now'",
    ],
)
def test_clock_reads_in_top_level_statements_are_reported(expression: str) -> None:
    assert rules(schema_findings(f"SELECT {expression};")) == ["clock"]


def test_compute_now_and_other_now_functions_pass() -> None:
    sql = "SELECT compute.compute_now(), api.now(), 'now' AS word, 'later'::text;"
    assert schema_findings(sql) == []


def test_now_inside_compute_now_is_allowed() -> None:
    sql = (
        "CREATE OR REPLACE FUNCTION compute.compute_now() RETURNS timestamptz\n"
        "LANGUAGE sql STABLE AS $$ SELECT pg_catalog.now() $$;"
    )
    assert schema_findings(sql) == []


def test_now_in_other_compute_now_is_reported() -> None:
    sql = (
        "CREATE FUNCTION api.compute_now() RETURNS timestamptz\n"
        "LANGUAGE sql AS $$ SELECT now() $$;"
    )
    assert rules(schema_findings(sql)) == ["clock"]


def test_now_in_sql_function_is_reported() -> None:
    sql = (
        "CREATE FUNCTION compute.f() RETURNS timestamptz LANGUAGE sql AS $$\n"
        "  SELECT 1;\n"
        "  SELECT now()\n"
        "$$;"
    )
    findings = schema_findings(sql)
    assert [(f.line, f.rule) for f in findings] == [(3, "clock")]


def test_now_in_sql_standard_body_is_reported() -> None:
    sql = (
        "CREATE FUNCTION compute.f() RETURNS date LANGUAGE sql\n"
        "BEGIN ATOMIC\n  SELECT CURRENT_DATE;\nEND;"
    )
    findings = schema_findings(sql)
    assert [(f.line, f.rule) for f in findings] == [(3, "clock")]


def test_now_in_parameter_default_is_reported() -> None:
    sql = (
        "CREATE FUNCTION compute.f(p_at timestamptz DEFAULT now()) RETURNS int\n"
        "LANGUAGE sql AS $$ SELECT 1 $$;"
    )
    assert rules(schema_findings(sql)) == ["clock"]


def test_now_in_do_block_is_reported() -> None:
    assert rules(schema_findings("DO $$ BEGIN PERFORM now(); END $$;")) == ["clock"]


def test_compute_now_in_plpgsql_passes() -> None:
    assert schema_findings(plpgsql_function("PERFORM compute.compute_now();")) == []


# which files get which rules


def test_pgtap_files_only_get_parse_rule(tmp_path: pathlib.Path) -> None:
    sql = "SELECT now();\n" + plpgsql_function("RAISE EXCEPTION 'bad';")
    write(tmp_path / "pgtap" / "clock_test.sql", sql)
    write(tmp_path / "migrations" / "revert" / "clock.sql", sql)
    write(tmp_path / "migrations" / "verify" / "clock.sql", sql)
    assert lint_paths([tmp_path]) == []


def test_schema_and_deploy_files_get_schema_rules(tmp_path: pathlib.Path) -> None:
    schema = write(tmp_path / "sql" / "010_clock.sql", "SELECT now();\n")
    deploy = write(tmp_path / "migrations" / "deploy" / "clock.sql", "SELECT now();\n")
    findings = lint_paths([tmp_path])
    assert [(f.path, f.rule) for f in findings] == [(str(deploy), "clock"), (str(schema), "clock")]


def test_non_sql_files_are_skipped(tmp_path: pathlib.Path) -> None:
    write(tmp_path / "sql" / "notes.txt", "SELEC now();\n")
    assert lint_paths([tmp_path]) == []


# main


def test_main_reports_bad_file_and_returns_1(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = write(tmp_path / "sql" / "bad.sql", "SELECT 1;\nSELECT now();\n")
    write(tmp_path / "sql" / "good.sql", "SELECT 1;\n")
    assert main([str(tmp_path / "sql")]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{bad}:2: [clock] now()")
    assert out[-1] == "lint: 2 files, 1 findings"


def test_main_returns_0_for_good_files(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path / "sql" / "good.sql", "SELECT compute.compute_now();\n")
    write(tmp_path / "pgtap" / "good_test.sql", "\\set ON_ERROR_STOP 1\nSELECT now();\n")
    assert main([str(tmp_path / "sql"), str(tmp_path / "pgtap")]) == 0
    assert capsys.readouterr().out.splitlines() == ["lint: 2 files, 0 findings"]


def test_main_defaults_to_sql_migrations_and_pgtap(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for directory in ("sql", "migrations/deploy", "pgtap"):
        write(tmp_path / directory / "a.sql", "SELECT 1;\n")
    monkeypatch.chdir(tmp_path)
    assert main([]) == 0
    assert capsys.readouterr().out.splitlines() == ["lint: 3 files, 0 findings"]


@pytest.mark.parametrize("statement", [
    "CREATE TABLE compute.t (x integer PRIMARY KEY)",
    "CREATE TABLE compute.t (x integer CHECK (x > 0))",
    "CREATE TABLE compute.t (x integer, y integer, UNIQUE (x, y))",
    "CREATE TABLE compute.t (x uuid REFERENCES compute.u)",
    "ALTER TABLE compute.t ADD CHECK (x > 1)",
])
def test_an_unnamed_constraint_in_the_declarative_schema_is_reported(statement: str) -> None:
    findings = lint_text(statement + ";", "sql/x.sql", schema_rules=True, naming_rules=True)
    assert [finding.rule for finding in findings] == ["constraint-name"]
    assert lint_text(statement + ";", "migrations/deploy/x.sql", schema_rules=True) == []


def test_named_constraints_and_not_null_pass() -> None:
    statement = ("CREATE TABLE compute.t (x integer NOT NULL CONSTRAINT t_pkey PRIMARY KEY DEFAULT 1, "
                 "CONSTRAINT t_x_positive CHECK (x > 0));")
    assert lint_text(statement, "sql/x.sql", schema_rules=True, naming_rules=True) == []


# booking-state: a booking is written once as held; provisional or active is its reservation's state


def declarative_findings(sql: str) -> list[Finding]:
    return lint_text(sql, "sql/x.sql", schema_rules=True, naming_rules=True)


@pytest.mark.parametrize("statement", [
    "CREATE VIEW ops.v AS SELECT b.node_id FROM compute.bookings AS b WHERE b.state = 'active'",
    "CREATE VIEW ops.v AS SELECT 1 FROM compute.bookings AS b JOIN compute.reservations AS r USING (reservation_id) "
    "WHERE b.state IN ('provisional', 'active')",
    "CREATE FUNCTION compute.f() RETURNS bigint LANGUAGE sql AS $$ SELECT count(*) FROM compute.bookings WHERE state = 'active' $$",
    "CREATE FUNCTION compute.f() RETURNS void LANGUAGE plpgsql AS $$\nBEGIN\n"
    "  PERFORM 1 FROM compute.nodes AS n WHERE EXISTS (SELECT 1 FROM compute.bookings AS x WHERE x.node_id = n.node_id\n"
    "    AND x.state <> 'provisional');\nEND\n$$",
    "CREATE FUNCTION compute.f() RETURNS void LANGUAGE plpgsql AS $$\nBEGIN\n"
    "  UPDATE compute.bookings SET state = 'active' WHERE reservation_id = NULL;\nEND\n$$",
])
def test_a_booking_state_compared_with_a_reservation_state_is_reported(statement: str) -> None:
    assert rules(declarative_findings(statement + ";")) == ["booking-state"]


@pytest.mark.parametrize("statement", [
    "CREATE VIEW ops.v AS SELECT b.node_id FROM compute.active_bookings AS b",
    "CREATE VIEW ops.v AS SELECT 1 FROM compute.bookings AS b JOIN compute.reservations AS r USING (reservation_id) "
    "WHERE b.state = 'held' AND r.state = 'active'",
    "CREATE FUNCTION compute.f() RETURNS bigint LANGUAGE sql AS $$ SELECT count(*) FROM compute.reservations WHERE state = 'active' $$",
])
def test_booking_state_held_and_reservation_states_pass(statement: str) -> None:
    assert declarative_findings(statement + ";") == []


def test_released_migrations_are_not_held_to_the_booking_state_rule() -> None:
    statement = "CREATE VIEW ops.v AS SELECT b.node_id FROM compute.bookings AS b WHERE b.state = 'active';"
    assert lint_text(statement, "migrations/deploy/x.sql", schema_rules=True) == []

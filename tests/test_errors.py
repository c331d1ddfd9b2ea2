"""The error contract: SQL raises it and declares it (compute.error_codes); every process reads it from
there when it opens its pool, and Python keeps only PostgreSQL's own SQLSTATEs."""

from __future__ import annotations

import logging

import psycopg
import pytest
from psycopg_pool import PoolTimeout

from psycopg.rows import dict_row

from better_compute.db import Database
from better_compute.errors import (POSTGRES_SQLSTATES, SQLSTATE_TO_CODE, ContractError, adopt_contract,
                                   from_database)
from worker_support import wait_until


def read_contract(conn: psycopg.Connection) -> None:
    """What a process does when it opens its pool, for a test's own connection."""
    with conn.cursor(row_factory=dict_row) as cursor:
        adopt_contract(cursor.execute("SELECT * FROM ops.error_contract()").fetchall())


def test_python_writes_only_postgresqls_own_sqlstates() -> None:
    assert not any(sqlstate.startswith("BC") for sqlstate in POSTGRES_SQLSTATES)


def test_a_code_the_database_declares_is_mapped_with_nothing_in_python(db: psycopg.Connection, db_dsn: str) -> None:
    """A pool reads the contract when it opens: a code only the database knows maps to its status."""
    db.execute("INSERT INTO compute.error_codes VALUES ('TEAPOT', 'BC418', 418, 'A test code.')")
    db.commit()
    try:
        with Database(db_dsn, max_size=1) as database, pytest.raises(ContractError) as raised:
            database.call("compute.raise_error", "TEAPOT", "short and stout", "tip me over")
        assert (raised.value.code, raised.value.http_status, raised.value.hint) == ("TEAPOT", 418, "tip me over")
        in_database = {sqlstate: (code, status) for code, sqlstate, status in
                       db.execute("SELECT code, sqlstate, http_status FROM compute.error_codes").fetchall()}
        assert {state: mapped for state, mapped in SQLSTATE_TO_CODE.items() if state.startswith("BC")} == in_database
    finally:
        SQLSTATE_TO_CODE.pop("BC418", None)  # the table is the process's: leave it as the other tests expect


@pytest.mark.parametrize("code, status", [
    ("INVALID_ARGUMENT", 400), ("ACCESS_DENIED", 403), ("NOT_FOUND", 404), ("CAPACITY_CONFLICT", 409),
    ("GENERATION_CONFLICT", 409), ("ALREADY_EXISTS", 409), ("IDEMPOTENCY_MISMATCH", 422), ("QUOTA_EXCEEDED", 429), ("FENCED", 409),
    ("UNSUPPORTED", 501),
])
def test_each_contract_code_maps_to_code_hint_and_status(db: psycopg.Connection, code: str, status: int) -> None:
    read_contract(db)
    with pytest.raises(psycopg.Error) as raised:
        db.execute("SELECT compute.raise_error(%s, 'it went wrong', 'try this')", (code,))
    mapped = from_database(raised.value)
    assert (mapped.code, mapped.message, mapped.hint, mapped.http_status) == (code, "it went wrong", "try this", status)
    assert mapped.envelope() == {"error": {"code": code, "message": "it went wrong", "hint": "try this"}}


@pytest.mark.parametrize("sqlstate", ["23P01", "40P01"])
def test_exclusion_violation_and_deadlock_are_capacity_conflicts(db: psycopg.Connection, sqlstate: str) -> None:
    with pytest.raises(psycopg.Error) as raised:
        db.execute(f"DO $$BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '{sqlstate}'; END$$")
    assert (from_database(raised.value).code, from_database(raised.value).http_status) == ("CAPACITY_CONFLICT", 409)


@pytest.mark.parametrize("sqlstate", ["57P01", "57P02", "57P03", "08006", "53300", "25006"])
def test_the_server_going_away_or_full_is_unavailable(db: psycopg.Connection, sqlstate: str) -> None:
    with pytest.raises(psycopg.Error) as raised:
        db.execute(f"DO $$BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '{sqlstate}'; END$$")
    mapped = from_database(raised.value)
    assert (mapped.code, mapped.http_status, mapped.sqlstate) == ("UNAVAILABLE", 503, sqlstate)


def test_a_lost_connection_and_a_pool_timeout_are_unavailable(db_dsn: str) -> None:
    lost = psycopg.connect(db_dsn)
    with psycopg.connect(db_dsn, autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", (lost.info.backend_pid,))
    with pytest.raises(psycopg.OperationalError) as raised:
        lost.execute("SELECT 1")
    lost.close()
    assert (from_database(raised.value).code, from_database(raised.value).http_status) == ("UNAVAILABLE", 503)
    assert from_database(PoolTimeout("couldn't get a connection after 5.00 sec")).code == "UNAVAILABLE"


def test_a_write_on_a_server_that_became_read_only_is_unavailable_and_drops_that_connection(db_dsn: str) -> None:
    """After a failover a pooled connection may reach the old primary, now a standby: a write there
    fails with 25006 (read_only_sql_transaction). That is UNAVAILABLE, and the pool must not hand the
    same connection out again (a new one finds the read-write server: target_session_attrs)."""
    read_only = db_dsn + " options='-c default_transaction_read_only=on'"
    with Database(read_only, max_size=1) as database:
        with database.pool.connection() as conn:
            first = conn.info.backend_pid
        with pytest.raises(ContractError) as raised:
            database.call("compute.site_create", "written-on-a-standby", None)
        with database.pool.connection() as conn:
            second = conn.info.backend_pid
    assert (raised.value.code, raised.value.http_status, raised.value.sqlstate) == ("UNAVAILABLE", 503, "25006")
    assert second != first


def test_after_a_lost_connection_the_pool_checks_its_idle_connections_at_once(db_dsn: str) -> None:
    """A failover ends every pooled connection; the first call to find one dead makes the pool check
    the others, so the next calls do not each meet a dead connection (one 503 each)."""
    with Database(db_dsn, min_size=3, max_size=3) as database:
        database.pool.wait()
        with psycopg.connect(db_dsn, autocommit=True) as other:
            other.execute("""SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                              WHERE datname = current_database() AND pid <> pg_backend_pid()""")
        with pytest.raises(ContractError) as raised:
            database.call("compute.limit", "capacity_search_horizon_seconds")
        assert raised.value.code == "UNAVAILABLE"
        wait_until(lambda: database.pool.get_stats().get("connections_lost", 0) == 2, 10,
                   "the pool's check to find the two other dead connections")
        assert database.call("compute.limit", "capacity_search_horizon_seconds") > 0


def test_unknown_sqlstate_is_internal_and_logged(db: psycopg.Connection, caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(psycopg.Error) as raised:
        db.execute("SELECT 1 / 0")
    with caplog.at_level(logging.ERROR, logger="better_compute.errors"):
        mapped = from_database(raised.value)
    assert (mapped.code, mapped.http_status, mapped.sqlstate) == ("INTERNAL", 500, "22012")
    assert "division by zero" not in mapped.message  # internals stay in the log
    assert "SQLSTATE=22012" in caplog.text


def test_call_helper_raises_contract_errors(db_dsn: str) -> None:
    with Database(db_dsn, max_size=2) as database, pytest.raises(ContractError) as raised:
        database.call("compute.limit", "no_such_limit")
    assert raised.value.code == "NOT_FOUND"
    assert raised.value.hint == "The known limits are listed in ops.limits."
    assert str(raised.value).startswith("NOT_FOUND: no limit named 'no_such_limit'")


def test_call_helper_returns_the_value(db_dsn: str) -> None:
    with Database(db_dsn, max_size=2) as database:
        assert database.call("compute.limit", "http_body_bytes") == 65536


FLAKY = """
CREATE SEQUENCE public.attempts;  -- nextval() survives the rollback of a failed attempt
CREATE FUNCTION public.flaky(p_failures int) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE v_attempt bigint := nextval('public.attempts');
BEGIN
    IF v_attempt <= p_failures THEN
        RAISE EXCEPTION 'could not serialize access' USING ERRCODE = '40001';
    END IF;
    RETURN v_attempt;
END $$;
"""


@pytest.fixture
def flaky_function(db: psycopg.Connection) -> None:
    db.execute(FLAKY)
    db.commit()


def test_serialization_failures_are_retried(db_dsn: str, flaky_function: None) -> None:
    with Database(db_dsn, max_size=2) as database:
        assert database.call("public.flaky", 3) == 4  # three 40001s, then success on the 4th attempt


def test_serialization_retries_are_bounded(db_dsn: str, flaky_function: None) -> None:
    with Database(db_dsn, max_size=2) as database, pytest.raises(ContractError) as raised:
        database.call("public.flaky", 1000)
    assert (raised.value.code, raised.value.sqlstate) == ("INTERNAL", "40001")
    with psycopg.connect(db_dsn) as conn:
        assert conn.execute("SELECT last_value FROM public.attempts").fetchone() == (6,)


def test_call_helper_refuses_unqualified_function_names(db_dsn: str) -> None:
    with Database(db_dsn, max_size=1) as database, pytest.raises(ValueError):
        database.call("limit; DROP TABLE x", 1)

"""Database fixtures: one throwaway cluster per session, the schema migrated once into a template,
a fresh clone of it per test (pytest-postgresql's factories over our embedded cluster)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from pytest_postgresql import factories
from pytest_postgresql.executors import NoopExecutor

from better_compute import embedded, migrate
from better_compute.db import Database
from gateway_support import GatewayProcess, running_gateway, running_worker_process


@pytest.fixture(scope="session")
def pg_server() -> Iterator[embedded.Cluster]:
    """The session's PostgreSQL server (run as `postgres` when we are root)."""
    cluster = embedded.throwaway()
    cluster.start()
    yield cluster
    cluster.destroy()


class ServerExecutor(NoopExecutor):
    """The session's server as pytest-postgresql sees it; databases built on it start from template1."""

    @property
    def template_dbname(self) -> str:
        return "template1"


@pytest.fixture(scope="session")
def bc_cluster(pg_server: embedded.Cluster) -> NoopExecutor:
    return ServerExecutor(host=str(pg_server.socketdir), port=pg_server.port, user=pg_server.user,
                        options="", dbname="postgres")


def load_schema(host: str, port: int, user: str, dbname: str, **_: Any) -> None:
    """Build the template the way production is built: by the migrations; then allow the test clock."""
    dsn = make_conninfo(host=host, port=port, user=user, dbname=dbname)
    migrate.migrate(dsn)
    with psycopg.connect(dsn) as conn:
        conn.execute("SELECT compute.clock_allow_pinning(true)")


bc_template = factories.postgresql_noproc(depends_on="bc_cluster", dbname="bc_test", load=[load_schema])
db = factories.postgresql("bc_template")


def dsn_of(conn: psycopg.Connection) -> str:
    """The conninfo of an open connection (to open more sessions on the same database)."""
    info = conn.info
    return make_conninfo(host=info.host, port=info.port, user=info.user, dbname=info.dbname)


@pytest.fixture
def db_dsn(db: psycopg.Connection) -> str:
    return dsn_of(db)


_database_numbers = itertools.count()


@pytest.fixture
def empty_database(pg_server: embedded.Cluster) -> Iterator[Callable[[], str]]:
    """Make empty databases on the session's server; each is dropped after the test. Returns conninfo."""
    made: list[str] = []

    def make() -> str:
        name = f"bc_empty_{next(_database_numbers)}"
        with psycopg.connect(pg_server.conninfo("postgres"), autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        made.append(name)
        return pg_server.conninfo(name)

    yield make
    with psycopg.connect(pg_server.conninfo("postgres"), autocommit=True) as conn:
        for name in made:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture
def wdb(db_dsn: str) -> Iterator[Database]:
    """A worker's pool on the test database, as role bc_worker (see tests/worker_support.py)."""
    from worker_support import worker_database

    with worker_database(db_dsn) as database:
        yield database


@pytest.fixture(name="sql")
def sql_connection(db_dsn: str) -> Iterator[psycopg.Connection]:
    """A superuser connection in autocommit: the test's eyes, and what an operator or the API does
    beside what the test runs."""
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        yield conn


@pytest.fixture
def gateway(db_dsn: str, tmp_path: Path) -> Iterator[GatewayProcess]:
    """A gateway (its signer beside it) and a worker, as real processes (a test file may define its own)."""
    with running_gateway(db_dsn, tmp_path / "keys") as running, running_worker_process(db_dsn, running.keys):
        yield running

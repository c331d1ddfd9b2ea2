"""The database call helper: a psycopg 3 pool, one transaction per call, bounded retry of 40001."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg
from psycopg import sql
from psycopg.rows import RowFactory, dict_row, tuple_row
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from better_compute.errors import ContractError, from_database

log = logging.getLogger(__name__)

SERIALIZATION_RETRIES = 5
RETRY_BASE_SECONDS = 0.01

T = TypeVar("T")


def function_identifier(name: str) -> sql.Composable:
    """`schema.function` as a quoted identifier; anything else is a programming error."""
    parts = name.split(".")
    if len(parts) != 2 or not all(part.isidentifier() for part in parts):
        raise ValueError(f"not a schema-qualified function name: {name!r}")
    return sql.Identifier(*parts)


def adapt(value: Any) -> Any:
    """Dicts travel as jsonb; everything else as psycopg adapts it (a list is an array: wrap a JSON
    array in Jsonb yourself)."""
    return Jsonb(value) if isinstance(value, dict) else value


class Database:
    """A pool of connections for one role; `call` runs one stored function in one transaction.

    With `role`, every connection runs `SET ROLE role` when it is made: a process that logs in as a
    member of bc_worker (or a superuser, in tests) then reaches only what that role may use.
    """

    def __init__(self, conninfo: str, *, min_size: int = 1, max_size: int = 10, name: str = "better-compute",
                 role: str | None = None):
        self.conninfo = conninfo
        self.role = role
        self.pool = ConnectionPool(conninfo, min_size=min_size, max_size=max_size, open=False, name=name,
                                   configure=self._configure)

    def _configure(self, conn: psycopg.Connection) -> None:
        if self.role is not None:
            conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(self.role)))
            if not conn.autocommit:
                conn.commit()

    def connect(self) -> psycopg.Connection:
        """A connection of its own (outside the pool), in autocommit, as the pool's role: for LISTEN."""
        conn = psycopg.connect(self.conninfo, autocommit=True)
        self._configure(conn)
        return conn

    def open(self) -> None:
        self.pool.open(wait=True)

    def close(self) -> None:
        self.pool.close()

    def __enter__(self) -> Database:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, function: str, *args: Any) -> Any:
        """SELECT function(args...) and return its value; errors come back as ContractError."""
        row = self._run(sql.SQL("SELECT {}({})"), function, args, tuple_row, lambda cursor: cursor.fetchone())
        return row[0] if row else None

    def rows(self, function: str, *args: Any) -> list[dict[str, Any]]:
        """SELECT * FROM function(args...): the rows of a set-returning function, as dicts."""
        return self._run(sql.SQL("SELECT * FROM {}({})"), function, args, dict_row, lambda cursor: cursor.fetchall())

    def _run(self, template: sql.SQL, function: str, args: tuple[Any, ...], row_factory: RowFactory[Any],
             fetch: Callable[[psycopg.Cursor[Any]], T]) -> T:
        """One transaction; a serialization failure (40001) is retried a bounded number of times."""
        query = template.format(function_identifier(function), sql.SQL(", ").join(sql.Placeholder() * len(args)))
        params = [adapt(arg) for arg in args]
        for attempt in range(SERIALIZATION_RETRIES + 1):
            try:
                with self.pool.connection() as conn, conn.cursor(row_factory=row_factory) as cursor:
                    return fetch(cursor.execute(query, params))
            except psycopg.errors.SerializationFailure as error:
                if attempt == SERIALIZATION_RETRIES:
                    raise from_database(error) from error
                log.info("serialization failure in %s, retry %d", function, attempt + 1)
                time.sleep(RETRY_BASE_SECONDS * (2**attempt) * (1 + random.random()))
            except psycopg.Error as error:
                raise from_database(error) from error
        raise AssertionError("unreachable")


__all__ = ["ContractError", "Database"]

"""The database call helpers: a psycopg 3 pool, one transaction per call, bounded retry of 40001.

A call is one statement (`SELECT function(...)`), and pooled connections are in autocommit: the
statement is its own transaction, atomic as before, in one round trip instead of three (BEGIN, the
statement, COMMIT). On a busy machine each round trip is a wake-up of the server process, and the
node acknowledgement path crosses several calls (bench/nodes.py).

`Database` (threads: the worker, the CLI) and `AsyncDatabase` (asyncio: the HTTP relay) share how a
call is written, how the role is set and when a failure is retried; only the waiting differs.

After a failover (docs/operations.md) the pool's connections reach a server that is gone or is a
standby now: a call on one fails as UNAVAILABLE (errors.py), and then (`_after_failure`) a
connection that reached a standby is closed, so that the pool makes a new one (a multi-host DSN
with target_session_attrs=read-write finds the new primary), and the pool checks its idle
connections at once (one check at a time), so that the other calls do not each find a dead one.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import psycopg
from psycopg import sql
from psycopg.rows import AsyncRowFactory, RowFactory, dict_row, tuple_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from better_compute.errors import (CONTRACT_FUNCTION_QUERY, CONTRACT_SCHEMAS, READ_ONLY_SQLSTATE, ContractError,
                                   adopt_contract, contract_function, from_database, unreachable)

log = logging.getLogger(__name__)

AUTOCOMMIT = {"autocommit": True}  # each call's single statement is its own transaction
SERIALIZATION_RETRIES = 5
RETRY_BASE_SECONDS = 0.01
# A content-free notification (bc_work, bc_outbox) is sent by one committing transaction at a time
# (compute.wake_at_commit); writers that skipped it may finish committing just after the one that
# sent it, so a listener looks again this long after a notification, besides its poll.
LOOK_AGAIN_SECONDS = 0.1

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


CALL = sql.SQL("SELECT {}({})")  # one value
ROWS = sql.SQL("SELECT * FROM {}({})")  # the rows of a set-returning function


def function_call(template: sql.SQL, function: str, args: tuple[Any, ...]) -> tuple[sql.Composed, list[Any]]:
    """The query and parameters that run `function(args...)` through `template` (CALL or ROWS)."""
    query = template.format(function_identifier(function), sql.SQL(", ").join(sql.Placeholder() * len(args)))
    return query, [adapt(arg) for arg in args]


def set_role(role: str) -> sql.Composed:
    return sql.SQL("SET ROLE {}").format(sql.Identifier(role))


def retry_delay(error: psycopg.Error, attempt: int, function: str) -> float:
    """Seconds to wait before retrying a failed call (only a serialization failure, a bounded number
    of times, with jittered exponential backoff); otherwise raise the error as the contract's."""
    if isinstance(error, psycopg.errors.SerializationFailure) and attempt < SERIALIZATION_RETRIES:
        log.info("serialization failure in %s, retry %d", function, attempt + 1)
        return RETRY_BASE_SECONDS * (2**attempt) * (1 + random.random())
    raise from_database(error) from error


def reached_a_standby(error: psycopg.Error) -> bool:
    """The connection's server can no longer write (a standby after a failover): it never will again."""
    return error.sqlstate == READ_ONLY_SQLSTATE


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
                                   configure=self._configure, kwargs=AUTOCOMMIT)
        self._checking = threading.Lock()

    def _configure(self, conn: psycopg.Connection) -> None:
        if self.role is not None:
            conn.execute(set_role(self.role))

    def connect(self) -> psycopg.Connection:
        """A connection of its own (outside the pool), in autocommit, as the pool's role: for LISTEN."""
        conn = psycopg.connect(self.conninfo, autocommit=True)
        self._configure(conn)
        return conn

    def open(self) -> None:
        """Open the pool and read the error contract from the database (errors.adopt_contract)."""
        self.pool.open(wait=True)
        with self.pool.connection() as conn:
            found = conn.execute(CONTRACT_FUNCTION_QUERY, {"schemas": CONTRACT_SCHEMAS}).fetchone()
        adopt_contract(self.rows(contract_function(found)))

    def close(self) -> None:
        self.pool.close()

    def __enter__(self) -> Database:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, function: str, *args: Any) -> Any:
        """SELECT function(args...) and return its value; errors come back as ContractError."""
        row = self._run(CALL, function, args, tuple_row, lambda cursor: cursor.fetchone())
        return row[0] if row else None

    def rows(self, function: str, *args: Any) -> list[dict[str, Any]]:
        """SELECT * FROM function(args...): the rows of a set-returning function, as dicts."""
        return self._run(ROWS, function, args, dict_row, lambda cursor: cursor.fetchall())

    def _run(self, template: sql.SQL, function: str, args: tuple[Any, ...], row_factory: RowFactory[Any],
             fetch: Callable[[psycopg.Cursor[Any]], T]) -> T:
        """One transaction; a serialization failure (40001) is retried a bounded number of times."""
        query, params = function_call(template, function, args)
        for attempt in itertools.count():
            try:
                with self.pool.connection() as conn:
                    try:
                        with conn.cursor(row_factory=row_factory) as cursor:
                            return fetch(cursor.execute(query, params))
                    except psycopg.Error as error:
                        if reached_a_standby(error):
                            conn.close()  # the pool replaces a closed connection
                        raise
            except psycopg.Error as error:
                self._after_failure(error)
                time.sleep(retry_delay(error, attempt, function))
        raise AssertionError("unreachable")

    def _after_failure(self, error: psycopg.Error) -> None:
        """The database is out of reach: check the pool's idle connections (in a thread, one at a time)."""
        if unreachable(error) and self._checking.acquire(blocking=False):
            threading.Thread(target=self._check_pool, name="pool-check", daemon=True).start()

    def _check_pool(self) -> None:
        try:
            self.pool.check()
        except Exception as failure:  # the pool closed meanwhile: nothing to check
            log.debug("pool check failed: %s", failure)
        finally:
            self._checking.release()


class AsyncDatabase:
    """`Database` for asyncio: the same calls, role and retry, over an AsyncConnectionPool. A call
    waits at most `timeout` seconds for a connection, then fails as UNAVAILABLE."""

    def __init__(self, conninfo: str, *, min_size: int = 1, max_size: int = 10, name: str = "better-compute",
                 role: str | None = None, timeout: float = 30.0):
        self.conninfo = conninfo
        self.role = role
        self.pool = AsyncConnectionPool(conninfo, min_size=min_size, max_size=max_size, open=False, name=name,
                                        configure=self._configure, timeout=timeout, kwargs=AUTOCOMMIT)
        self._checking: asyncio.Task[None] | None = None

    async def _configure(self, conn: psycopg.AsyncConnection) -> None:
        if self.role is not None:
            await conn.execute(set_role(self.role))

    async def connect(self) -> psycopg.AsyncConnection:
        """A connection of its own (outside the pool), in autocommit, as the pool's role: for LISTEN."""
        conn = await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True)
        await self._configure(conn)
        return conn

    async def open(self, timeout: float = 30.0) -> None:
        """Wait until min_size connections are made (PoolTimeout after `timeout` seconds), then read
        the error contract from the database (errors.adopt_contract)."""
        await self.pool.open(wait=True, timeout=timeout)
        async with self.pool.connection() as conn:
            found = await (await conn.execute(CONTRACT_FUNCTION_QUERY, {"schemas": CONTRACT_SCHEMAS})).fetchone()
        adopt_contract(await self.rows(contract_function(found)))

    async def close(self) -> None:
        if self._checking is not None:
            self._checking.cancel()
        await self.pool.close()

    async def __aenter__(self) -> AsyncDatabase:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def call(self, function: str, *args: Any) -> Any:
        """SELECT function(args...) and return its value; errors come back as ContractError."""
        row = await self._run(CALL, function, args, tuple_row, lambda cursor: cursor.fetchone())
        return row[0] if row else None

    async def rows(self, function: str, *args: Any) -> list[dict[str, Any]]:
        """SELECT * FROM function(args...): the rows of a set-returning function, as dicts."""
        return await self._run(ROWS, function, args, dict_row, lambda cursor: cursor.fetchall())

    async def _run(self, template: sql.SQL, function: str, args: tuple[Any, ...], row_factory: AsyncRowFactory[Any],
                   fetch: Callable[[psycopg.AsyncCursor[Any]], Awaitable[T]]) -> T:
        """One transaction; a serialization failure (40001) is retried a bounded number of times."""
        query, params = function_call(template, function, args)
        for attempt in itertools.count():
            try:
                async with self.pool.connection() as conn:
                    try:
                        async with conn.cursor(row_factory=row_factory) as cursor:
                            await cursor.execute(query, params)
                            return await fetch(cursor)
                    except psycopg.Error as error:
                        if reached_a_standby(error):
                            await conn.close()  # the pool replaces a closed connection
                        raise
            except psycopg.Error as error:
                self._after_failure(error)
                await asyncio.sleep(retry_delay(error, attempt, function))
        raise AssertionError("unreachable")

    def _after_failure(self, error: psycopg.Error) -> None:
        """The database is out of reach: check the pool's idle connections (one check at a time)."""
        if unreachable(error) and (self._checking is None or self._checking.done()):
            self._checking = asyncio.create_task(self._check_pool())

    async def _check_pool(self) -> None:
        try:
            await self.pool.check()
        except Exception as failure:  # the pool closed meanwhile: nothing to check
            log.debug("pool check failed: %s", failure)


__all__ = ["AsyncDatabase", "ContractError", "Database"]

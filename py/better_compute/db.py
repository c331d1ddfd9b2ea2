"""The database call helper: a psycopg 3 pool, one transaction per call, bounded retry of 40001."""

from __future__ import annotations

import logging
import random
import time
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from better_compute.errors import ContractError, from_database

log = logging.getLogger(__name__)

SERIALIZATION_RETRIES = 5
RETRY_BASE_SECONDS = 0.01


def function_identifier(name: str) -> sql.Composable:
    """`schema.function` as a quoted identifier; anything else is a programming error."""
    parts = name.split(".")
    if len(parts) != 2 or not all(part.isidentifier() for part in parts):
        raise ValueError(f"not a schema-qualified function name: {name!r}")
    return sql.Identifier(*parts)


def adapt(value: Any) -> Any:
    """Dicts and lists travel as jsonb; everything else as psycopg adapts it."""
    return Jsonb(value) if isinstance(value, (dict, list)) else value


class Database:
    """A pool of connections for one role; `call` runs one stored function in one transaction."""

    def __init__(self, conninfo: str, *, min_size: int = 1, max_size: int = 10, name: str = "better-compute"):
        self.pool = ConnectionPool(conninfo, min_size=min_size, max_size=max_size, open=False, name=name)

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
        query = sql.SQL("SELECT {}({})").format(
            function_identifier(function), sql.SQL(", ").join(sql.Placeholder() * len(args))
        )
        params = [adapt(arg) for arg in args]
        for attempt in range(SERIALIZATION_RETRIES + 1):
            try:
                with self.pool.connection() as conn:
                    row = conn.execute(query, params).fetchone()
                    return row[0] if row else None
            except psycopg.errors.SerializationFailure as error:
                if attempt == SERIALIZATION_RETRIES:
                    raise from_database(error) from error
                log.info("serialization failure in %s, retry %d", function, attempt + 1)
                time.sleep(RETRY_BASE_SECONDS * (2**attempt) * (1 + random.random()))
            except psycopg.Error as error:
                raise from_database(error) from error
        raise AssertionError("unreachable")


__all__ = ["ContractError", "Database"]

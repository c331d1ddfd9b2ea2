"""The error contract's Python side (docs/architecture.md §13): SQLSTATE -> stable code and HTTP status.

SQL raises contract codes through compute.raise_error; their SQLSTATEs, codes and HTTP statuses are
the rows of compute.error_codes, the one place they are written. A process reads them when it opens
its database pool (`Database.open`, `AsyncDatabase.open`: the error_contract() function of its
role's schema) into SQLSTATE_TO_CODE, which holds beforehand only PostgreSQL's own SQLSTATEs that
the contract names. Python never branches on message text. An SQLSTATE not in the table is INTERNAL
(500) and is logged with its SQLSTATE.

A database out of reach is UNAVAILABLE (503, with Retry-After over HTTP), not INTERNAL: a lost
connection (psycopg's OperationalError without an SQLSTATE: refused, reset, closed), the pool's
timeout waiting for a connection, a connection exception (class 08), the server shutting down or
starting (57P01 admin_shutdown, 57P02 crash_shutdown, 57P03 cannot_connect_now), out of
connection slots (53300), or a write on a server that can no longer write (25006
read_only_sql_transaction: a connection made to the primary before a failover that reaches it as a
standby now; docs/operations.md). The request may be sent again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import psycopg

log = logging.getLogger(__name__)

POSTGRES_SQLSTATES: dict[str, tuple[str, int]] = {
    "23P01": ("CAPACITY_CONFLICT", 409),  # exclusion_violation: two bookings of one slice and instant
    "40P01": ("CAPACITY_CONFLICT", 409),  # deadlock_detected on the booking path
}
# PostgreSQL's own SQLSTATEs above, and the database's contract (compute.error_codes) once read.
SQLSTATE_TO_CODE: dict[str, tuple[str, int]] = dict(POSTGRES_SQLSTATES)
# The function that answers the contract, one in each client schema; a session calls the first it
# may execute (each client role may execute only its own schema's; an operator, ops'; a superuser, any).
CONTRACT_SCHEMAS = ["api", "node_api", "worker_api", "ops", "site_api"]
CONTRACT_FUNCTION_QUERY = ("SELECT n.nspname || '.error_contract' FROM pg_catalog.pg_proc AS p"
                           " JOIN pg_catalog.pg_namespace AS n ON n.oid = p.pronamespace"
                           " WHERE p.proname = 'error_contract' AND n.nspname = ANY (%(schemas)s)"
                           " AND has_schema_privilege(n.oid, 'USAGE') AND has_function_privilege(p.oid, 'EXECUTE')"
                           " ORDER BY array_position(%(schemas)s, n.nspname::text) LIMIT 1")
INTERNAL = ("INTERNAL", 500)
UNAVAILABLE = ("UNAVAILABLE", 503)
READ_ONLY_SQLSTATE = "25006"  # read_only_sql_transaction: the server is a standby (after a failover)
UNAVAILABLE_SQLSTATES = frozenset({"57P01", "57P02", "57P03", "53300", READ_ONLY_SQLSTATE})
RETRY_AFTER_SECONDS = 2  # what an UNAVAILABLE answer tells the client to wait (HTTP Retry-After)


def contract_function(found: tuple[Any, ...] | None) -> str:
    """The function CONTRACT_FUNCTION_QUERY found, or why the process cannot start."""
    if found is None:
        raise RuntimeError("this database role may call no error_contract() function: "
                           "migrate the database (better-compute db migrate) or log in as a client role")
    return str(found[0])


def adopt_contract(rows: Iterable[Mapping[str, Any]]) -> None:
    """Take the database's contract (rows of error_contract(): code, sqlstate, http_status)."""
    SQLSTATE_TO_CODE.update({row["sqlstate"]: (row["code"], row["http_status"]) for row in rows})


def code_statuses() -> dict[str, int]:
    """Every code the contract knows, with its HTTP status (INTERNAL and UNAVAILABLE included)."""
    return {code: status for code, status in SQLSTATE_TO_CODE.values()} | dict([INTERNAL, UNAVAILABLE])


@dataclass(frozen=True)
class ContractError(Exception):
    """An error as clients see it: a stable code, a message, a hint, an HTTP status."""

    code: str
    message: str
    hint: str | None
    http_status: int
    sqlstate: str | None = None

    def __str__(self) -> str:
        return f"{self.code}: {self.message}" + (f"\nHint: {self.hint}" if self.hint else "")

    def envelope(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, "hint": self.hint}}


def unreachable(error: psycopg.Error) -> bool:
    """The database is out of reach (see above), as opposed to refusing this request."""
    sqlstate = error.sqlstate
    if sqlstate is None:
        return isinstance(error, psycopg.OperationalError)  # psycopg_pool's PoolTimeout is one too
    return sqlstate.startswith("08") or sqlstate in UNAVAILABLE_SQLSTATES


def from_database(error: psycopg.Error) -> ContractError:
    """Map a database error to the contract; unknown SQLSTATEs become INTERNAL and are logged."""
    sqlstate = error.sqlstate
    if unreachable(error):
        log.warning("the database is unavailable (SQLSTATE %s, %s): %s", sqlstate, type(error).__name__, error)
        return ContractError(UNAVAILABLE[0], "the database is unavailable",
                             f"Send the request again in {RETRY_AFTER_SECONDS} s or more.", UNAVAILABLE[1], sqlstate)
    code, status = SQLSTATE_TO_CODE.get(sqlstate or "", INTERNAL)
    if code == INTERNAL[0]:
        log.error("unmapped database error SQLSTATE=%s: %s", sqlstate, error)
        return ContractError(code, f"internal error (SQLSTATE {sqlstate})", None, status, sqlstate)
    diag = error.diag
    return ContractError(code, diag.message_primary or str(error), diag.message_hint, status, sqlstate)

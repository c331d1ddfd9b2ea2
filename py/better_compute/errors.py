"""The error contract's relay side (DESIGN §13): SQLSTATE -> stable code and HTTP status.

SQL raises contract codes through compute.raise_error (table compute.error_codes); this table is the
one place Python maps them, and tests/test_errors.py keeps the two equal. Python never branches on
message text. An SQLSTATE not listed here is INTERNAL (500) and is logged with its SQLSTATE.

A database out of reach is UNAVAILABLE (503, with Retry-After over HTTP), not INTERNAL: a lost
connection (psycopg's OperationalError without an SQLSTATE: refused, reset, closed), the pool's
timeout waiting for a connection, a connection exception (class 08), the server shutting down or
starting (57P01 admin_shutdown, 57P02 crash_shutdown, 57P03 cannot_connect_now) or out of
connection slots (53300). The request may be sent again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import psycopg

log = logging.getLogger(__name__)

SQLSTATE_TO_CODE: dict[str, tuple[str, int]] = {
    "BC400": ("INVALID_ARGUMENT", 400),
    "BC403": ("ACCESS_DENIED", 403),
    "BC404": ("NOT_FOUND", 404),
    "BC409": ("CAPACITY_CONFLICT", 409),
    "23P01": ("CAPACITY_CONFLICT", 409),  # exclusion_violation: two bookings of one slice and instant
    "40P01": ("CAPACITY_CONFLICT", 409),  # deadlock_detected on the booking path
    "BC412": ("GENERATION_CONFLICT", 409),
    "BC419": ("ALREADY_EXISTS", 409),
    "BC422": ("IDEMPOTENCY_MISMATCH", 422),
    "BC429": ("QUOTA_EXCEEDED", 429),
    "BC410": ("FENCED", 409),
    "BC501": ("UNSUPPORTED", 501),
}
INTERNAL = ("INTERNAL", 500)
UNAVAILABLE = ("UNAVAILABLE", 503)
UNAVAILABLE_SQLSTATES = frozenset({"57P01", "57P02", "57P03", "53300"})
RETRY_AFTER_SECONDS = 2  # what an UNAVAILABLE answer tells the client to wait (HTTP Retry-After)


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

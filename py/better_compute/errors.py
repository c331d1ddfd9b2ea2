"""The error contract's relay side (DESIGN §13): SQLSTATE -> stable code and HTTP status.

SQL raises contract codes through compute.raise_error (table compute.error_codes); this table is the
one place Python maps them, and tests/test_errors.py keeps the two equal. Python never branches on
message text. An SQLSTATE not listed here is INTERNAL (500) and is logged with its SQLSTATE.
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


def from_database(error: psycopg.Error) -> ContractError:
    """Map a database error to the contract; unknown SQLSTATEs become INTERNAL and are logged."""
    sqlstate = error.sqlstate
    code, status = SQLSTATE_TO_CODE.get(sqlstate or "", INTERNAL)
    if code == INTERNAL[0]:
        log.error("unmapped database error SQLSTATE=%s: %s", sqlstate, error)
        return ContractError(code, f"internal error (SQLSTATE {sqlstate})", None, status, sqlstate)
    diag = error.diag
    return ContractError(code, diag.message_primary or str(error), diag.message_hint, status, sqlstate)

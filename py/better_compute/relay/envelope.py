"""The two answers of every endpoint: `{"data": …}` and `{"error": {"code", "message", "hint"}}`.

Statuses come from the error contract (docs/architecture.md §13: compute.error_codes, read at start-up); the relay adds only
what the contract leaves to HTTP: 413 for a body over the bound (still INVALID_ARGUMENT), 405,
UNAUTHENTICATED (401, with WWW-Authenticate) for a call without a credential, and UNAVAILABLE
(503, with Retry-After) when the database is unreachable or the relay is at its stream bound.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from starlette.responses import JSONResponse

from better_compute.errors import INTERNAL, RETRY_AFTER_SECONDS, UNAVAILABLE, ContractError, code_statuses

log = logging.getLogger(__name__)

UNAUTHENTICATED = ("UNAUTHENTICATED", 401)
CHALLENGE = {"WWW-Authenticate": 'Bearer realm="better-compute"'}  # what a 401 must name (RFC 9110)
RETRY_LATER = {"Retry-After": str(RETRY_AFTER_SECONDS)}  # every 503: the database, the stream bound, stopping


def error(code: str, message: str, hint: str | None = None, status: int | None = None) -> ContractError:
    """A contract error made by the relay itself (not by SQL)."""
    return ContractError(code, message, hint, status or code_statuses()[code])


def invalid_argument(message: str, hint: str | None = None, status: int = 400) -> ContractError:
    return error("INVALID_ARGUMENT", message, hint, status)


def unavailable(message: str, hint: str | None = None) -> ContractError:
    return error(UNAVAILABLE[0], message, hint, UNAVAILABLE[1])


def unauthenticated(message: str, hint: str) -> ContractError:
    return error(UNAUTHENTICATED[0], message, hint, UNAUTHENTICATED[1])


def from_envelope(document: Mapping[str, Any]) -> ContractError:
    """The `{"error": …}` answer of a function that must commit (api.admit's deny); a code outside the
    contract is INTERNAL, logged, so a typo in SQL never reaches clients as a new code."""
    code = document.get("code")
    if code not in code_statuses() or code == UNAVAILABLE[0]:
        log.error("unknown error code in a database answer: %r", code)
        return error(INTERNAL[0], "internal error (unknown error code)")
    return error(code, str(document.get("message") or code), document.get("hint"))


def data_response(data: Any) -> JSONResponse:
    return JSONResponse({"data": data})


def error_response(failure: ContractError) -> JSONResponse:
    headers = {UNAUTHENTICATED[1]: CHALLENGE, UNAVAILABLE[1]: RETRY_LATER}.get(failure.http_status)
    return JSONResponse(failure.envelope(), status_code=failure.http_status, headers=headers)

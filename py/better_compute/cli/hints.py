"""Hints in the CLI's terms: the database and the relay write hints for every client (psql, HTTP,
this CLI); here the ones that name an API method or a SQL function a tenant cannot call name the
command instead, and a credential IAM does not know says to check the token."""

from __future__ import annotations

import re

from better_compute.cli.client import ApiError

TOKEN_HINT = ("Check your token: --token, BETTER_COMPUTE_TOKEN or the profile's (`better-compute whoami` shows "
              "which one is used and where it comes from).")
UNKNOWN_CREDENTIAL = re.compile(r"^denied: (unknown|no) credential\b")
# SQL functions that hints name and the API method a tenant calls for the same answer.
SQL_FUNCTIONS = {"capacity_earliest": "capacity.earliest", "capacity_free": "capacity.free"}
SQL_FUNCTION = re.compile(r"\b(?:compute|ops)\.(" + "|".join(SQL_FUNCTIONS) + r")\b")
METHOD = re.compile(r"(?<![\w./-])([a-z][A-Za-z]*)\.([a-z][A-Za-z]*)\b(?![\w(/-])")


def command(group: str, method: str) -> str | None:
    """`better-compute capacity earliest` for a catalog method, else None."""
    from better_compute.cli.methods import find, kebab  # the catalog loads only when a hint needs it

    known = find(f"{group}.{method}")
    return f"`better-compute {kebab(known.group)} {known.command}`" if known else None


def in_cli_terms(error: ApiError) -> str | None:
    if error.code in ("ACCESS_DENIED", "UNAUTHENTICATED") and (
            UNKNOWN_CREDENTIAL.match(error.message) or error.code == "UNAUTHENTICATED"):
        return TOKEN_HINT
    if not error.hint:
        return error.hint
    hint = SQL_FUNCTION.sub(lambda match: SQL_FUNCTIONS[match.group(1)], error.hint)
    return METHOD.sub(lambda match: command(match.group(1), match.group(2)) or match.group(0), hint)

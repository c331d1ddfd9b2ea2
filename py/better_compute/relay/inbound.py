"""What a request brings: a bounded JSON body, the caller's credential and the tenant.

The credential is opaque here: it goes to the IAM port as it came and is never logged.
"""

from __future__ import annotations

import uuid
from typing import Any

from starlette.requests import ClientDisconnect, Request

from better_compute import strictjson
from better_compute.errors import ContractError
from better_compute.ports.iam import IamPort
from better_compute.relay.envelope import invalid_argument, unauthenticated

HTTP_BODY_BYTES = 65536  # compute.limits 'http_body_bytes' (P12); tests/test_relay_http.py keeps them equal
TENANT_HEADER = "x-tenant-id"


def too_large() -> ContractError:
    return invalid_argument(f"the request body is larger than {HTTP_BODY_BYTES} bytes",
                            "Send less: list methods page with limit.", status=413)


async def read_body(request: Request) -> bytes:
    """The body, refused on its declared length and again while it streams (a chunked body, or a
    client that lies, declares nothing or too little). A client gone before its body arrived (closed,
    or cut at the relay's body deadline) gets an answer nobody reads, not a logged traceback."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise invalid_argument("Content-Length is not a number")
        if int(declared) > HTTP_BODY_BYTES:
            raise too_large()
    body = bytearray()
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > HTTP_BODY_BYTES:
                raise too_large()
    except ClientDisconnect as gone:
        raise invalid_argument("the connection ended before the body arrived",
                               "Send the whole body at once, within the relay's body bound.") from gone
    return bytes(body)


async def read_object(request: Request) -> dict[str, Any]:
    """The body as a JSON object (strict JSON: no NaN or Infinity, no number beyond a double)."""
    body = await read_body(request)
    try:
        document = strictjson.loads(body)
    except (ValueError, RecursionError) as failure:
        raise invalid_argument(f"the body is not JSON: {failure}"[:300], "Send a JSON object, {} for no fields.") \
            from failure
    if not isinstance(document, dict):
        raise invalid_argument("the body must be a JSON object", "Send {} when a method takes no fields.")
    if strictjson.holds_nul(document):
        raise invalid_argument("a string holds \\u0000", "PostgreSQL text cannot hold NUL characters.")
    return document


def bearer(request: Request) -> str | None:
    """The credential of `Authorization: Bearer …`; anything else is no credential."""
    scheme, _, credential = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        return None
    return credential.strip() or None


def caller_credential(request: Request) -> str:
    """The caller's bearer credential; without one the call is UNAUTHENTICATED (401) before anything
    else is read or asked: there is nobody to ask IAM about, and nothing to audit."""
    credential = bearer(request)
    if credential is None:
        raise unauthenticated("no credential",
                              "Send Authorization: Bearer <your token> (the CLI: --token or BETTER_COMPUTE_TOKEN).")
    return credential


def tenant(request: Request, iam: IamPort, credential: str | None) -> uuid.UUID:
    """X-Tenant-Id, else the tenant the IAM port knows for the credential (static files), else 400."""
    text = request.headers.get(TENANT_HEADER) or iam.tenant_of(credential)
    if text is None:
        raise invalid_argument("no tenant", "Send X-Tenant-Id (the Better IAM tenant you act in).")
    try:
        return uuid.UUID(text)
    except ValueError as failure:
        raise invalid_argument("X-Tenant-Id is not a uuid", "Send the tenant's uuid.") from failure

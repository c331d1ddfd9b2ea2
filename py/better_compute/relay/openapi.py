"""OpenAPI 3.1 of the method API, generated from the catalog (so it cannot drift from what is served).

One POST path per method: its input schema is the request body, `{data}` answers 200, the error
envelope answers everything else, `X-Better-Compute: 1` is a required header and the credential a
bearer token. IAM details ride along as `x-` extensions for tooling. A creating method's 200 links
its answer's id (a listing method's, its first item's) to the methods that take it, so tools can
chain calls.
"""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

from better_compute.relay.catalog import Catalog, Link, Method

ERROR_STATUSES = {
    "400": "INVALID_ARGUMENT: the input does not fit the method's schema, or a header is missing.",
    "401": "UNAUTHENTICATED: no credential (send Authorization: Bearer …).",
    "403": "ACCESS_DENIED: IAM denied the request.",
    "404": "NOT_FOUND: no such resource in the tenant, or no such method.",
    "409": "CAPACITY_CONFLICT, GENERATION_CONFLICT, ALREADY_EXISTS or FENCED.",
    "413": "INVALID_ARGUMENT: the body is larger than 64 KiB.",
    "422": "IDEMPOTENCY_MISMATCH: the idempotency key was used for another request.",
    "429": "QUOTA_EXCEEDED.",
    "500": "INTERNAL.",
    "501": "UNSUPPORTED.",
    "503": "UNAVAILABLE: the database cannot be reached.",
}

COMPONENTS: dict[str, Any] = {
    "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                                   "description": "The caller's credential, passed to IAM as it is."}},
    "parameters": {
        "BetterCompute": {"name": "X-Better-Compute", "in": "header", "required": True,
                          "description": "Must be 1 (marks a deliberate API call).",
                          "schema": {"type": "string", "enum": ["1"]}},
        "TenantId": {"name": "X-Tenant-Id", "in": "header", "required": False,
                     "description": "The tenant acted in; without it, the tenant the credential belongs to.",
                     "schema": {"type": "string", "format": "uuid"}},
    },
    "schemas": {
        "Error": {
            "type": "object", "required": ["error"], "additionalProperties": False,
            "properties": {"error": {
                "type": "object", "required": ["code", "message", "hint"], "additionalProperties": False,
                "properties": {"code": {"type": "string"}, "message": {"type": "string"},
                               "hint": {"type": ["string", "null"]}}}},
        },
        "Data": {"type": "object", "required": ["data"], "additionalProperties": False, "properties": {"data": {}}},
    },
}


def operation(method: Method, links: list[Link]) -> dict[str, Any]:
    error = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    done: dict[str, Any] = {"description": "Done.",
                            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Data"}}}}
    if links:  # the id this method answers, into the methods that take it (api.catalog_links)
        done["links"] = {link.target: {"operationId": link.target,
                                       "requestBody": {link.key: f"$response.body#{link.pointer}"}}
                         for link in links}
    return {
        "operationId": method.name,
        "summary": method.summary,
        "tags": [method.group],
        "parameters": [{"$ref": "#/components/parameters/BetterCompute"}, {"$ref": "#/components/parameters/TenantId"}],
        "requestBody": {"required": True, "content": {"application/json": {"schema": dict(method.input.schema)}}},
        "responses": {
            "200": done,
            **{status: {"description": description, **error} for status, description in ERROR_STATUSES.items()},
        },
        "x-iam-action": method.action,
        "x-resource-type": method.resource_type,
        "x-kind": method.kind,
    }


def document(catalog: Catalog) -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {"title": "Better Compute API", "version": version("better-compute"),
                 "description": "Every method is POST /api/compute/{group}/{method} with a JSON object; "
                                "answers are {data} or {error: {code, message, hint}}."},
        "paths": {method.path: {"post": operation(method, catalog.links_from(method))} for method in catalog},
        "security": [{"bearer": []}],
        "components": COMPONENTS,
    }

"""The one admission flow every method goes through (docs/architecture.md §7): no per-method code.

    api.prepare(method, tenant, input, credential_sha256) → {admission_id, iam}
    iam.authorize(credential, iam)         → one decision (the port never raises: failure = deny)
    api.admit(admission_id, decision)      → {data} | {error}   (mutations)
    api.read(method, tenant, input, decision) → {data} | {error}  (reads)

The database audits every deny (and every admitted mutation), so a deny still reaches SQL. The credential reaches
the database only as its SHA-256, which bounds the admissions it may have pending.

When the database refuses the request in api.prepare (NOT_FOUND, a conflict, a bound…), the one
decision is made all the same, on the method in the tenant (resource "*"), before the refusal is
answered: a caller IAM does not allow gets ACCESS_DENIED whether or not the ids it named exist, so
it learns nothing about what the tenant has; an allowed caller gets the refusal. Such a deny of a
read is audited on "*" (api.read); a mutation's is not (no admission was written).
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

from better_compute.db import AsyncDatabase
from better_compute.errors import SQLSTATE_TO_CODE, ContractError
from better_compute.ports.iam import AuthorizeRequest, Decision, IamPort
from better_compute.relay.catalog import Method
from better_compute.relay.envelope import error, from_envelope
from better_compute.relay.metrics import RelayMetrics

ALL_RESOURCES = "*"


class Admission:
    def __init__(self, db: AsyncDatabase, iam: IamPort, metrics: RelayMetrics):
        self.db = db
        self.iam = iam
        self.metrics = metrics

    async def run(self, method: Method, tenant: uuid.UUID, document: dict[str, Any], credential: str | None) -> Any:
        """The data of an admitted call; a refusal raises ContractError."""
        try:
            prepared = await self.db.call("api.prepare", method.name, tenant, document, fingerprint(credential))
        except ContractError as refusal:
            if refusal.sqlstate not in SQLSTATE_TO_CODE:
                raise
            await self.require_allowed(method, tenant, credential)
            raise
        decision = await self.decide(credential, AuthorizeRequest.from_json(prepared["iam"]))
        if method.is_mutation:
            answer = await self.db.call("api.admit", uuid.UUID(prepared["admission_id"]), decision.as_json())
        else:
            answer = await self.db.call("api.read", method.name, tenant, document, decision.as_json())
        if "error" in answer:
            raise from_envelope(answer["error"])
        return answer["data"]

    async def decide(self, credential: str | None, request: AuthorizeRequest) -> Decision:
        """Ask the IAM port once, and count the outcome."""
        decision = await self.iam.authorize(credential, request)
        self.metrics.decided(decision.allowed)
        return decision

    async def require_allowed(self, method: Method, tenant: uuid.UUID, credential: str | None) -> None:
        """Decide once on the method in the tenant (resource "*"); ACCESS_DENIED unless allowed."""
        decision = await self.decide(credential, AuthorizeRequest(str(tenant), method.action, method.resource_type,
                                                                  ALL_RESOURCES))
        if not decision.allowed:
            raise await self.refuse_read(method, tenant, decision) if not method.is_mutation else denied(method, decision)

    async def refuse_read(self, method: Method, tenant: uuid.UUID, decision: Decision) -> ContractError:
        """The refusal of a read denied without a document (the event stream): audited by api.read."""
        answer = await self.db.call("api.read", method.name, tenant, {}, decision.as_json())
        return from_envelope(answer["error"])


def fingerprint(credential: str | None) -> str | None:
    """What the database knows of a credential: its SHA-256 (lowercase hex)."""
    return hashlib.sha256(credential.encode()).hexdigest() if credential else None


def denied(method: Method, decision: Decision) -> ContractError:
    return error("ACCESS_DENIED", f"denied: {decision.reason}",
                 f"Ask your administrator for the permission {method.action}.")

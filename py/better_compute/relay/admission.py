"""The one admission flow every method goes through (DESIGN §7): no per-method code.

    api.prepare(method, tenant, input)     → {admission_id, iam}
    iam.authorize(credential, iam)         → one decision (the port never raises: failure = deny)
    api.admit(admission_id, decision)      → {data} | {error}   (mutations)
    api.read(method, tenant, input, decision) → {data} | {error}  (reads)

The database audits every deny (and every admitted mutation), so a deny still reaches SQL.
"""

from __future__ import annotations

import uuid
from typing import Any

from better_compute.db import AsyncDatabase
from better_compute.errors import ContractError
from better_compute.ports.iam import AuthorizeRequest, Decision, IamPort
from better_compute.relay.catalog import Method
from better_compute.relay.envelope import from_envelope
from better_compute.relay.metrics import RelayMetrics


class Admission:
    def __init__(self, db: AsyncDatabase, iam: IamPort, metrics: RelayMetrics):
        self.db = db
        self.iam = iam
        self.metrics = metrics

    async def run(self, method: Method, tenant: uuid.UUID, document: dict[str, Any], credential: str | None) -> Any:
        """The data of an admitted call; a refusal raises ContractError."""
        prepared = await self.db.call("api.prepare", method.name, tenant, document)
        decision = await self.decide(credential, AuthorizeRequest.from_json(prepared["iam"]))
        if method.is_mutation:
            answer = await self.db.call("api.admit", uuid.UUID(prepared["admission_id"]), decision.as_json())
        else:
            answer = await self.db.call("api.read", method.name, tenant, document, decision.as_json())
        if "error" in answer:
            raise from_envelope(answer["error"])
        return answer["data"]

    async def refuse_read(self, method: Method, tenant: uuid.UUID, decision: Decision) -> ContractError:
        """The refusal of a read denied without a document (the event stream): audited by api.read."""
        answer = await self.db.call("api.read", method.name, tenant, {}, decision.as_json())
        return from_envelope(answer["error"])

    async def decide(self, credential: str | None, request: AuthorizeRequest) -> Decision:
        """Ask the IAM port once, and count the outcome."""
        decision = await self.iam.authorize(credential, request)
        self.metrics.decided(decision.allowed)
        return decision

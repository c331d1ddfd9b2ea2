"""The one admission flow every method goes through (DESIGN §7): no per-method code.

    api.prepare(method, tenant, input)     → {admission_id, iam}
    iam.authorize(credential, iam)         → one decision (the port never raises: failure = deny)
    api.admit(admission_id, decision)      → {data} | {error}   (mutations)
    api.read(method, tenant, input, decision) → data            (reads; ACCESS_DENIED on a deny)

The database audits the decision either way, so a deny still reaches SQL.
"""

from __future__ import annotations

import uuid
from typing import Any

from better_compute.db import AsyncDatabase
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
            if "error" in answer:
                raise from_envelope(answer["error"])
            return answer["data"]
        return await self.db.call("api.read", method.name, tenant, document, decision.as_json())

    async def decide(self, credential: str | None, request: AuthorizeRequest) -> Decision:
        """Ask the IAM port once, and count the outcome."""
        decision = await self.iam.authorize(credential, request)
        self.metrics.decided(decision.allowed)
        return decision

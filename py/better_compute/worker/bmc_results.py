"""BMC results signed by the site agent (P14, sql/700_machines.sql): whoever relays a result (the
agent's database login today, a gateway later) only appends its envelope to the running op; this
handler verifies it with the agent's registered Ed25519 signing key and checks that it covers that
op, epoch, machine and agent, and only then does the database apply it. A result that does not
verify is rejected (the reason kept on the op) and never applied."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from better_compute.db import Database
from better_compute.pki import PkiError
from better_compute.pki.signing import EnvelopeError, open_envelope
from better_compute.worker.runtime import AT_ONCE, Handler, WorkItem

PURPOSE = "bmc.result"


def verified_body(op_id: int, pending: dict[str, Any]) -> dict[str, Any]:
    """The body of the relayed result when the agent's signing key signed it for this op; EnvelopeError otherwise."""
    if pending["signing_key"] is None:
        raise EnvelopeError("the site agent has no signing key registered (ops.site_agent_signing_key_set)")
    try:
        key = Ed25519PublicKey.from_public_bytes(base64.b64decode(pending["signing_key"], validate=True))
    except (binascii.Error, ValueError) as error:
        raise EnvelopeError(f"the site agent's signing key is not readable: {error}") from None
    body = open_envelope(pending["envelope"], key, PURPOSE)
    expected = {"op_id": op_id, "epoch": pending["epoch"], "machine_id": pending["machine_id"], "agent_id": pending["agent_id"]}
    if {name: body.get(name) for name in expected} != expected:
        raise EnvelopeError("the result's signature covers another agent, machine, operation or epoch")
    return body


def apply_bmc_result(db: Database) -> Handler:
    """Verify the result relayed for an op (the item's key), then apply it, or reject it."""
    def run(item: WorkItem) -> float | None:
        op_id = int(item.key)
        pending = db.call("worker_api.bmc_op_result_to_verify", op_id)
        if pending is None:
            return None
        envelope = pending["envelope"]
        try:
            verified_body(op_id, pending)
        except PkiError as error:
            db.call("worker_api.bmc_op_result_rejected", op_id, envelope, str(error))
            return None
        said = db.call("worker_api.bmc_op_result_verified", op_id, envelope, base64.b64decode(pending["signing_key"]))
        return AT_ONCE if said == "changed" else None
    return run

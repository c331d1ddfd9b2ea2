"""Work 'node.reports' (the item's key: a node id): verify what the node reported, then have the
database apply it (P14, sql/640_node_reports.sql).

Gateways append a node's report envelopes as received; PostgreSQL 15 cannot check their
signatures, so the worker does: each pending report, in the order the database gives, is opened
with the node's registered public key (and a node.key report's new key must prove itself too).
One that verifies goes back as verified (worker_api.node_report_verified), and the database checks
the rest (node, session epoch, increasing sequence number) and applies it; one that does not is
rejected with the reason (worker_api.node_report_rejected) and never applied. After a node.key
report is applied, the node's later reports verify with its new key.
"""

from __future__ import annotations

import base64
from typing import Any
from uuid import UUID

from better_compute.db import Database
from better_compute.nodeproto import KEY_REPORT, REPORTS
from better_compute.pki import EnvelopeError, PkiError, open_envelope
from better_compute.pki.signing import VerifyingKey, check_key_proof, load_der_public_key
from better_compute.worker.runtime import AT_ONCE, Handler, WorkItem

REPORTS_PER_RUN = 100  # one run verifies at most this many of a node's reports, then runs again


def check_report(envelope: Any, public_key: VerifyingKey) -> bytes | None:
    """Check that the report is signed by the node's key: None, or for a node.key report (whose new
    key proved itself too) the new key's DER. EnvelopeError when it is not a signed node report."""
    purpose = envelope.get("purpose") if isinstance(envelope, dict) else None
    if purpose not in REPORTS:
        raise EnvelopeError(f"{str(purpose)[:64]!r} is not the purpose of a node report")
    body = open_envelope(envelope, public_key, purpose)
    if purpose != KEY_REPORT:
        return None
    check_key_proof(body)
    return base64.b64decode(body["public_key"], validate=True)


def apply_node_reports(db: Database, batch: int = REPORTS_PER_RUN) -> Handler:
    def apply(item: WorkItem) -> float | None:
        rows = db.rows("worker_api.node_reports_pending", UUID(item.key), batch)
        registered: bytes | None = None
        for row in rows:
            registered = registered or row["public_key"]
            try:
                if registered is None:
                    raise PkiError("the node has no registered key (it never joined)")
                new_key = check_report(row["envelope"], load_der_public_key(registered))
            except (EnvelopeError, PkiError) as refused:
                db.call("worker_api.node_report_rejected", row["report_id"], str(refused))
                continue
            if db.call("worker_api.node_report_verified", row["report_id"], registered) and new_key is not None:
                registered = new_key
        return AT_ONCE if len(rows) == batch else None
    return apply

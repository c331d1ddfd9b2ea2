"""The worker's first handlers, one per work kind; each is a few calls into worker_api.

`default_handlers` builds the map the composition root passes to the Worker (the core never
imports this module, P10). Periodic kinds come from compute.work_periodic (sql/450): a sweep that
works in bounded batches runs again at once while it finds something, and otherwise waits for its
period.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Protocol
from uuid import UUID

from better_compute.audit import AuditSigner, checkpoint_due
from better_compute.db import Database
from better_compute.pki import IntentSigner
from better_compute.ports.ledger import Ledger, LedgerEntry
from better_compute.sealing import SealingError, SecretKeyring
from better_compute.webhooks import Delivery, DeliveryResult
from better_compute.worker.bmc_results import apply_bmc_result
from better_compute.worker.node_reports import apply_node_reports
from better_compute.worker.runtime import AT_ONCE, Handler, WorkItem

DELIVERIES_PER_RUN = 100  # one webhook.deliver run sends at most this many, then runs again
DELIVERY_RUN_SECONDS = 10.0  # ... and stops after this long: short runs complete (and reset their attempts) often
CHECKPOINTS_PER_RUN = 100  # one audit.checkpoint run signs at most this many, then runs again
USAGE_METER = "gpu_seconds"


class Sender(Protocol):
    def send(self, delivery: Delivery, timeout: float) -> DeliveryResult: ...


def default_handlers(db: Database, ledger: Ledger, sender: Sender, signer: AuditSigner,
                     intent: IntentSigner, keyring: SecretKeyring) -> dict[str, Handler]:
    return {
        "audit.checkpoint": sign_audit_checkpoints(db, signer),
        "node.spec.sign": sign_node_spec(db, intent),
        "node.command.sign": sign_node_command(db, intent),
        "node.reports": apply_node_reports(db),
        "work.prune": sweep(db, "worker_api.work_prune"),
        "reservations.expire": batched_sweep(db, "worker_api.reservations_expire"),
        "admissions.expire": batched_sweep(db, "worker_api.admissions_expire"),
        "node_specs.tick": batched_sweep(db, "worker_api.node_specs_tick"),
        "node_specs.resend": sweep(db, "worker_api.node_specs_resend"),
        "nodes.drains": sweep(db, "worker_api.node_drains_complete"),
        "tables.analyze": sweep(db, "worker_api.tables_analyze"),
        "outbox.fan_out": batched_sweep(db, "worker_api.webhooks_fan_out"),
        "outbox.prune": sweep(db, "worker_api.outbox_prune"),
        "webhook.deliver": deliver_webhooks(db, sender, keyring),
        "usage.export": export_usage(db, ledger),
        "machines.sweep": sweep(db, "worker_api.machines_sweep"),
        "machines.reconcile": reconcile_machine(db),
        "bmc_ops.sign": sign_bmc_op(db, intent),
        "bmc_ops.result": apply_bmc_result(db),
    }


def sweep(db: Database, function: str) -> Handler:
    """Call a sweep once per period."""
    def run(_item: WorkItem) -> None:
        db.call(function)
    return run


def reconcile_machine(db: Database) -> Handler:
    """Bare metal (sql/700): the next step of one machine, decided in the database; never waits on a BMC."""
    def run(item: WorkItem) -> None:
        db.call("worker_api.machine_reconcile", item.key)
    return run


def sign_bmc_op(db: Database, intent: IntentSigner) -> Handler:
    """Sign a BMC operation (the item's key) for its site agent (P14: purpose bmc.op); nothing to do once signed or over."""
    def sign(item: WorkItem) -> None:
        body = db.call("worker_api.bmc_op_to_sign", int(item.key))
        if body is not None:
            db.call("worker_api.bmc_op_signed", int(item.key), intent.sign("bmc.op", body))
    return sign


def batched_sweep(db: Database, function: str) -> Handler:
    """Call a sweep that handles a bounded batch and returns how many it handled; while it handles
    something it runs again at once (through the queue, so each run stays short and fenced)."""
    def run(_item: WorkItem) -> float | None:
        return AT_ONCE if db.call(function) else None
    return run


def deliver_webhooks(db: Database, sender: Sender, keyring: SecretKeyring, batch: int = DELIVERIES_PER_RUN) -> Handler:
    """Send the due deliveries of one webhook (the item's key), in order, recording each attempt;
    run again when the next pending one is due. Every write is fenced by the lease epoch. A run
    ends after DELIVERY_RUN_SECONDS even if more are due (it then runs again at once), so that a
    slow endpoint and killed workers do not use up the item's attempts. The secret is opened with
    the worker's keys; one it cannot open is a failed attempt that says why (and is retried)."""
    def deliver(item: WorkItem) -> float | None:
        timeout = db.call("worker_api.webhook_timeout_seconds")
        deadline = time.monotonic() + DELIVERY_RUN_SECONDS
        opened: dict[bytes, str] = {}  # the rows of a run are one webhook's: its secret is opened once
        for row in db.rows("worker_api.webhook_due", item.work_id, item.lease_epoch, batch):
            if time.monotonic() > deadline:
                break
            box = bytes(row["secret_sealed"])
            try:
                secret = opened[box] if box in opened else keyring.open(row["secret_key_id"], box)
            except SealingError as error:
                result = DeliveryResult(False, None, str(error))
            else:
                opened[box] = secret
                result = sender.send(Delivery.from_row(row, secret), timeout)
            db.call("worker_api.webhook_result", item.work_id, item.lease_epoch, row["delivery_id"],
                    result.ok, result.status, result.error)
        return db.call("worker_api.webhook_next_due_seconds", UUID(item.key))
    return deliver


def export_usage(db: Database, ledger: Ledger) -> Handler:
    """Compute the usage windows that have closed, send the unsent ones to the ledger, mark them
    sent. A window sent but not marked (a crash in between) is sent again: the ledger keeps one
    entry per idempotency key."""
    def export(_item: WorkItem) -> float | None:
        computed = db.call("worker_api.usage_compute")
        unsent = db.rows("worker_api.usage_unsent", None)  # NULL: the database's batch bound
        sent: list[str] = []
        try:
            for row in unsent:
                ledger.record(usage_entry(row))
                sent.append(row["ledger_key"])
        finally:
            if sent:
                db.call("worker_api.usage_mark_sent", sent)
        return AT_ONCE if computed or unsent else None
    return export


def sign_audit_checkpoints(db: Database, signer: AuditSigner) -> Handler:
    """Sign the tenant-hours of audit events that have closed; run again at once after a full batch."""
    def sign(_item: WorkItem) -> float | None:
        return AT_ONCE if checkpoint_due(db, signer, CHECKPOINTS_PER_RUN) == CHECKPOINTS_PER_RUN else None
    return sign


def sign_node_spec(db: Database, intent: IntentSigner) -> Handler:
    """Sign the newest spec of a node (the item's key) with the intent key, so that gateways relay
    it and cannot change it (P14). node_spec_signed keeps only the newest generation: a spec that
    changed again meanwhile was poked anew and is signed by that run."""
    def sign(item: WorkItem) -> None:
        node_id = UUID(item.key)
        for row in db.rows("worker_api.node_spec_to_sign", node_id):
            # The trust bundle and the intent keys ride along: how a rotation of the node CA or of
            # the intent key reaches the nodes (docs/nodes.md).
            body = {"node_id": str(node_id), "generation": row["generation"], "spec": row["spec"],
                    "trust_bundle": db.call("worker_api.node_trust_bundle"),
                    "intent_keys": db.call("worker_api.node_intent_keys")}
            db.call("worker_api.node_spec_signed", node_id, row["generation"], intent.sign("spec", body))
    return sign


def sign_node_command(db: Database, intent: IntentSigner) -> Handler:
    """Sign a command (the item's key) with the intent key; nothing to do once signed or finished."""
    def sign(item: WorkItem) -> None:
        command_id = UUID(item.key)
        for row in db.rows("worker_api.command_to_sign", command_id):
            db.call("worker_api.command_signed", command_id, intent.sign("command", row["command"]))
    return sign


def usage_entry(window: Mapping[str, Any]) -> LedgerEntry:
    attributes = {
        "reservation_id": str(window["reservation_id"]),
        "project_id": None if window["project_id"] is None else str(window["project_id"]),
        "pool_id": str(window["pool_id"]),
        "shape": window["shape"],
        "window_start": window["window_start"].isoformat(),
        "atom_seconds": str(window["atom_seconds"]),
    }
    return LedgerEntry(window["ledger_key"], window["tenant_id"], USAGE_METER, window["gpu_seconds"], attributes,
                       window["window_start"])

"""Audit checkpoints (docs/architecture.md §10): sign each closed tenant-hour's Merkle root, verify offline.

The tree is the one sql/440_audit.sql builds (RFC 6962 style): leaf = sha256(0x00 || event text),
node = sha256(0x01 || left || right), leaves in event_id order, an odd node at the end of a level
carried up unchanged. A checkpoint is an Ed25519 signature over `checkpoint_message`; the worker
signs the roots of closed hours, and `verify_export` / `verify_proof` check an export or a proof
with nothing but the text they are given (no database).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import defaultdict
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import cached_property
from pathlib import Path
from typing import Any
from uuid import UUID

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from better_compute.db import ContractError, Database
from better_compute.pki.keys import create_file_once

log = logging.getLogger(__name__)

CHECKPOINT_MESSAGE_PREFIX = b"better-compute audit checkpoint v1\n"
LEAF_PREFIX = b"\x00"
NODE_PREFIX = b"\x01"
KEY_ID_HEX_CHARS = 16


# The Merkle tree, exactly as compute.audit_merkle_levels and compute.audit_proof build it.

def merkle_leaf(event_text: str) -> bytes:
    return hashlib.sha256(LEAF_PREFIX + event_text.encode("utf-8")).digest()


def merkle_node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(NODE_PREFIX + left + right).digest()


def merkle_root(leaves: list[bytes]) -> bytes:
    """The root over leaves in order; an odd node at the end of a level is carried up unchanged."""
    if not leaves:
        raise ValueError("a Merkle tree needs at least one leaf")
    level = leaves
    while len(level) > 1:
        level = [merkle_node(level[i], level[i + 1]) if i + 1 < len(level) else level[i]
                 for i in range(0, len(level), 2)]
    return level[0]


def proof_sides(index: int, leaf_count: int) -> list[str]:
    """The side ('left'/'right') of each sibling on the path from leaf `index` (0-based) to the root."""
    sides: list[str] = []
    position, width = index, leaf_count
    while width > 1:
        if position % 2 == 1:
            sides.append("left")
        elif position + 1 < width:
            sides.append("right")
        position, width = position // 2, (width + 1) // 2
    return sides


def root_from_path(leaf: bytes, path: Iterable[tuple[str, bytes]]) -> bytes:
    node = leaf
    for side, sibling in path:
        node = merkle_node(sibling, node) if side == "left" else merkle_node(node, sibling)
    return node


# Checkpoints: the signed message, the signer, the key id.

def hour_text(hour: datetime | str) -> str:
    """An hour as checkpoints name it: 'YYYY-MM-DDTHH:00:00Z' (UTC)."""
    moment = datetime.fromisoformat(hour) if isinstance(hour, str) else hour
    if moment.tzinfo is None:
        raise ValueError(f"hour {hour!r} has no time zone")
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:00:00Z")


def checkpoint_message(tenant_id: str, hour: str, leaf_count: int, root_hex: str) -> bytes:
    """What a checkpoint signs (and what verification checks the signature against)."""
    return CHECKPOINT_MESSAGE_PREFIX + f"{tenant_id}\n{hour}\n{leaf_count}\n{root_hex}".encode("ascii")


def key_id_of(public_key: bytes) -> str:
    return hashlib.sha256(public_key).hexdigest()[:KEY_ID_HEX_CHARS]


def signature_is_valid(public_key: bytes, signature: bytes, message: bytes) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(signature, message)
    except (InvalidSignature, ValueError):
        return False
    return True


class AuditSigner:
    """The worker's Ed25519 key, kept in a PEM file; the file is created (mode 0600) on first use."""

    def __init__(self, key_path: Path | str):
        self.key_path = Path(key_path)

    @cached_property
    def private_key(self) -> Ed25519PrivateKey:
        if not self.key_path.exists():
            self._create_key_file()
        key = serialization.load_pem_private_key(self.key_path.read_bytes(), password=None)
        if not isinstance(key, Ed25519PrivateKey):
            raise ValueError(f"{self.key_path} does not hold an Ed25519 private key")
        return key

    @cached_property
    def public_key(self) -> bytes:
        return self.private_key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)

    @property
    def key_id(self) -> str:
        return key_id_of(self.public_key)

    def sign(self, message: bytes) -> bytes:
        return self.private_key.sign(message)

    def _create_key_file(self) -> None:
        """A new key, linked in whole: a concurrent creator's key wins (pki.keys.create_file_once)."""
        create_file_once(self.key_path, Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()), 0o600)


# The worker's handler for kind audit.checkpoint.

@dataclass(frozen=True)
class DueCheckpoint:
    tenant_id: UUID
    hour: datetime
    leaf_count: int
    root: bytes

    def message(self) -> bytes:
        return checkpoint_message(str(self.tenant_id), hour_text(self.hour), self.leaf_count, self.root.hex())


def checkpoints_due(db: Database, limit: int) -> list[DueCheckpoint]:
    """worker_api.audit_checkpoints_due: closed tenant-hours with events and no checkpoint."""
    return [DueCheckpoint(row["tenant_id"], row["hour"], row["leaf_count"], bytes(row["root"]))
            for row in db.rows("worker_api.audit_checkpoints_due", limit)]


def checkpoint_due(db: Database, signer: AuditSigner, limit: int = 100) -> int:
    """Sign and store the checkpoints that are due; returns how many were stored.

    A GENERATION_CONFLICT means the hour's events changed after they were read: that hour is
    skipped and the next run signs its current root.
    """
    db.call("worker_api.audit_key_register", signer.key_id, signer.public_key)
    stored = 0
    for due in checkpoints_due(db, limit):
        try:
            stored += bool(db.call("worker_api.audit_checkpoint_store", due.tenant_id, due.hour, due.leaf_count,
                                   due.root, signer.key_id, signer.sign(due.message())))
        except ContractError as error:
            if error.code != "GENERATION_CONFLICT":
                raise
            log.info("audit checkpoint of %s at %s skipped: %s", due.tenant_id, hour_text(due.hour), error.message)
    return stored


# Offline verification.

@dataclass(frozen=True)
class ExportedEvent:
    event_id: int
    hour: str
    text: str


def event_problems(event: ExportedEvent, tenant_id: str) -> list[str]:
    """An event's text must be the event the export says it is: its id, tenant and hour."""
    try:
        body = json.loads(event.text)
        claims = (body["event_id"], body["tenant_id"], hour_text(body["occurred_at"]))
    except (ValueError, KeyError, TypeError) as error:
        return [f"event {event.event_id}: its text is not an audit event ({error})"]
    expected = (event.event_id, tenant_id, event.hour)
    if claims != expected:
        return [f"event {event.event_id} (hour {event.hour}): its text says event {claims[0]} of tenant {claims[1]} "
                f"at hour {claims[2]}"]
    return []


def checkpoint_problems(checkpoint: dict[str, Any], events: list[ExportedEvent], tenant_id: str,
                        keys: dict[str, bytes]) -> list[str]:
    """One checkpoint against its hour's events: leaf count, recomputed root, signature."""
    hour = checkpoint["hour"]
    problems: list[str] = []
    leaves = [merkle_leaf(event.text) for event in sorted(events, key=lambda event: event.event_id)]
    if len(leaves) != checkpoint["leaf_count"]:
        problems.append(f"hour {hour}: {len(leaves)} events, but the checkpoint counts {checkpoint['leaf_count']}")
    elif merkle_root(leaves).hex() != checkpoint["root"]:
        ids = ", ".join(str(event.event_id) for event in events)
        problems.append(f"hour {hour}: the events ({ids}) do not hash to the checkpoint's root "
                        f"(an event was changed, added or removed)")
    public_key = keys.get(checkpoint["key_id"])
    message = checkpoint_message(tenant_id, hour, checkpoint["leaf_count"], checkpoint["root"])
    if public_key is None:
        problems.append(f"hour {hour}: signed with key {checkpoint['key_id']}, which is not a trusted key")
    elif not signature_is_valid(public_key, bytes.fromhex(checkpoint["signature"]), message):
        problems.append(f"hour {hour}: the checkpoint's signature does not verify with key {checkpoint['key_id']} "
                        f"(the root, leaf count or signature was changed)")
    return problems


def export_keys(export: dict[str, Any], trusted_keys: Collection[bytes] | None) -> dict[str, bytes]:
    """The export's keys by key id; with trusted_keys, only those among them."""
    keys = {key["key_id"]: bytes.fromhex(key["public_key"]) for key in export["keys"]}
    return keys if trusted_keys is None else {key_id: key for key_id, key in keys.items() if key in trusted_keys}


def verify_export(export: dict[str, Any], trusted_keys: Collection[bytes] | None = None) -> list[str]:
    """Every problem of an audit export (ops.audit_export); an empty list means it verified.

    Signatures are checked with the export's own keys, or only with trusted_keys when given (an
    export's keys are what the database says; a verifier who knows the worker's key passes it).
    """
    tenant_id = str(export["tenant_id"])
    keys = export_keys(export, trusted_keys)
    events_by_hour: dict[str, list[ExportedEvent]] = defaultdict(list)
    problems: list[str] = []
    for raw in export["events"]:
        event = ExportedEvent(raw["event_id"], raw["hour"], raw["text"])
        problems += event_problems(event, tenant_id)
        events_by_hour[event.hour].append(event)
    checkpointed_hours = set()
    for checkpoint in export["checkpoints"]:
        checkpointed_hours.add(checkpoint["hour"])
        if checkpoint["hour"] not in events_by_hour:
            problems.append(f"hour {checkpoint['hour']}: a checkpoint of {checkpoint['leaf_count']} events, "
                            f"but the export has no event of that hour")
            continue
        problems += checkpoint_problems(checkpoint, events_by_hour[checkpoint["hour"]], tenant_id, keys)
    for hour in sorted(events_by_hour.keys() - checkpointed_hours):
        ids = ", ".join(str(event.event_id) for event in events_by_hour[hour])
        problems.append(f"hour {hour}: events {ids} have no checkpoint (not signed yet, or the checkpoint was removed)")
    return problems


def verify_proof(proof: dict[str, Any], public_key: bytes) -> list[str]:
    """Every problem of an inclusion proof (ops.audit_proof) under the given signer's key."""
    event = f"event {proof['event_id']}"
    leaf = merkle_leaf(proof["event_text"])
    problems: list[str] = []
    if leaf.hex() != proof["leaf"]:
        problems.append(f"{event}: its text does not hash to the proof's leaf")
    sides = [step["side"] for step in proof["path"]]
    if sides != proof_sides(proof["index"], proof["leaf_count"]):
        problems.append(f"{event}: the path does not fit leaf {proof['index']} of {proof['leaf_count']}")
    root = root_from_path(leaf, ((step["side"], bytes.fromhex(step["hash"])) for step in proof["path"]))
    if root.hex() != proof["root"]:
        problems.append(f"{event}: the path leads to root {root.hex()}, not to the proof's root {proof['root']}")
    checkpoint = proof.get("checkpoint")
    if checkpoint is None:
        return problems + [f"{event}: its hour has no checkpoint yet"]
    hour = hour_text(proof["hour"])
    if (checkpoint["root"], checkpoint["leaf_count"]) != (root.hex(), proof["leaf_count"]):
        problems.append(f"{event}: the checkpoint of hour {hour} has another root or leaf count than the proof")
    if checkpoint["key_id"] != key_id_of(public_key):
        problems.append(f"{event}: the checkpoint was signed with key {checkpoint['key_id']}, not with the given key")
    message = checkpoint_message(str(proof["tenant_id"]), hour, checkpoint["leaf_count"], checkpoint["root"])
    if not signature_is_valid(public_key, bytes.fromhex(checkpoint["signature"]), message):
        problems.append(f"{event}: the checkpoint's signature of hour {hour} does not verify")
    return problems

"""Audit checkpoints: the worker signs closed hours, `audit verify` checks an export offline and
catches tampering, proofs verify at every position, a stale root is never stored."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from psycopg.conninfo import make_conninfo

from better_compute.audit import (AuditSigner, checkpoint_due, key_id_of, merkle_leaf, proof_sides, root_from_path,
                                  verify_export, verify_proof)
from better_compute.db import ContractError, Database

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "better_compute.cli.main", "audit"]
HOUR_10 = "2030-06-01T10:00:00Z"
HOUR_11 = "2030-06-01T11:00:00Z"


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "py")}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60, check=False, env=env)


def as_role(dsn: str, role: str, now: str | None = None) -> str:
    """Conninfo of a session in `role`, its test clock pinned at `now` (UTC, ISO 8601)."""
    options = f"-c role={role}" + (f" -c bc.now={now}" if now else "")
    return make_conninfo(dsn, options=options)


def record(db: psycopg.Connection, tenant: uuid.UUID, principal: str = "alice") -> int:
    return db.execute("SELECT compute.audit_record(%s, %s, 'reservation.create', 'reservation', %s, 'allow')",
                      (tenant, principal, str(uuid.uuid4()))).fetchone()[0]


def sign_due(dsn: str, signer: AuditSigner, now: str) -> int:
    """Run the worker's handler as bc_worker with its clock at `now`."""
    with Database(as_role(dsn, "bc_worker", now), max_size=1) as worker:
        return checkpoint_due(worker, signer)


def export(dsn: str, tenant: uuid.UUID) -> dict[str, Any]:
    with psycopg.connect(as_role(dsn, "bc_operator")) as conn:
        return conn.execute("SELECT ops.audit_export(%s, %s, %s)",
                            (tenant, "2030-06-01T00:00:00Z", "2030-06-02T00:00:00Z")).fetchone()[0]


@pytest.fixture
def signer(tmp_path: Path) -> AuditSigner:
    return AuditSigner(tmp_path / "keys" / "audit.pem")


@pytest.fixture
def tenant(db: psycopg.Connection) -> uuid.UUID:
    """A tenant with three events in hour 10 and two in hour 11 (committed)."""
    tenant_id = uuid.uuid4()
    db.execute("SELECT compute.clock_pin('2030-06-01 10:05:00+00')")
    for principal in ("alice", "bob", "carol"):
        record(db, tenant_id, principal)
    db.execute("SELECT compute.clock_advance('1 hour')")
    for principal in ("dave", "erin"):
        record(db, tenant_id, principal)
    db.commit()
    return tenant_id


@pytest.fixture
def signed(db_dsn: str, tenant: uuid.UUID, signer: AuditSigner) -> uuid.UUID:
    assert sign_due(db_dsn, signer, "2030-06-01T12:30:00Z") == 2
    return tenant


def test_signer_creates_its_key_once_with_owner_only_permissions(signer: AuditSigner) -> None:
    key_id = signer.key_id
    assert signer.key_path.stat().st_mode & 0o777 == 0o600
    assert key_id == key_id_of(signer.public_key) and len(key_id) == 16
    assert AuditSigner(signer.key_path).key_id == key_id
    assert [path.name for path in signer.key_path.parent.iterdir()] == ["audit.pem"]


def test_only_closed_hours_are_signed(db_dsn: str, tenant: uuid.UUID, signer: AuditSigner) -> None:
    assert sign_due(db_dsn, signer, "2030-06-01T11:30:00Z") == 1
    assert [c["hour"] for c in export(db_dsn, tenant)["checkpoints"]] == [HOUR_10]
    assert sign_due(db_dsn, signer, "2030-06-01T12:00:00Z") == 1
    assert sign_due(db_dsn, signer, "2030-06-01T13:00:00Z") == 0
    checkpoints = export(db_dsn, tenant)["checkpoints"]
    assert [(c["hour"], c["leaf_count"], c["key_id"]) for c in checkpoints] == [
        (HOUR_10, 3, signer.key_id), (HOUR_11, 2, signer.key_id)]


def test_export_verifies_offline(db_dsn: str, signed: uuid.UUID, tmp_path: Path) -> None:
    path = tmp_path / "audit.json"
    exported = run_cli("export", "--dsn", as_role(db_dsn, "bc_operator"), "--tenant", str(signed),
                       "--from", "2030-06-01T10:30:00Z", "--to", "2030-06-01T11:10:00Z", "-o", str(path))
    assert exported.returncode == 0, exported.stderr
    assert [event["hour"] for event in json.loads(path.read_text())["events"]] == [HOUR_10] * 3 + [HOUR_11] * 2
    verified = run_cli("verify", str(path))
    assert (verified.returncode, verified.stdout) == (0, "verified: 5 events in 2 checkpoints\n"), verified.stderr


def test_tampered_event_fails_verification(db: psycopg.Connection, db_dsn: str, signed: uuid.UUID,
                                           tmp_path: Path) -> None:
    victim = db.execute("SELECT min(event_id) FROM compute.audit_events WHERE tenant_id = %s", (signed,)).fetchone()[0]
    db.execute("UPDATE compute.audit_events SET principal = 'mallory' WHERE event_id = %s", (victim,))
    db.commit()
    path = tmp_path / "audit.json"
    path.write_text(json.dumps(export(db_dsn, signed)))
    verified = run_cli("verify", str(path))
    assert verified.returncode == 1
    assert verified.stdout.splitlines() == [
        f"FAILED: hour {HOUR_10}: the events ({victim}, {victim + 1}, {victim + 2}) do not hash to the checkpoint's root "
        "(an event was changed, added or removed)"]


def test_checkpoint_altered_in_the_database_fails_verification(db: psycopg.Connection, db_dsn: str,
                                                                signed: uuid.UUID, tmp_path: Path) -> None:
    db.execute("UPDATE compute.audit_checkpoints SET root = sha256('forged') WHERE tenant_id = %s AND hour = %s",
               (signed, HOUR_11))
    db.commit()
    path = tmp_path / "audit.json"
    path.write_text(json.dumps(export(db_dsn, signed)))
    verified = run_cli("verify", str(path))
    assert verified.returncode == 1
    assert f"FAILED: hour {HOUR_11}: the events" in verified.stdout
    assert f"FAILED: hour {HOUR_11}: the checkpoint's signature does not verify" in verified.stdout
    assert HOUR_10 not in verified.stdout


def test_altered_signature_in_the_export_fails_verification(db_dsn: str, signed: uuid.UUID) -> None:
    altered = export(db_dsn, signed)
    signature = bytearray.fromhex(altered["checkpoints"][0]["signature"])
    signature[0] ^= 1
    altered["checkpoints"][0]["signature"] = signature.hex()
    assert verify_export(altered) == [
        f"hour {HOUR_10}: the checkpoint's signature does not verify with key {altered['checkpoints'][0]['key_id']} "
        "(the root, leaf count or signature was changed)"]


def test_removed_events_and_checkpoints_are_reported(db_dsn: str, signed: uuid.UUID) -> None:
    trail = export(db_dsn, signed)
    without_hour_10_events = {**trail, "events": [e for e in trail["events"] if e["hour"] != HOUR_10]}
    assert verify_export(without_hour_10_events) == [
        f"hour {HOUR_10}: a checkpoint of 3 events, but the export has no event of that hour"]
    dropped = trail["events"][1]["event_id"]
    without_one_event = {**trail, "events": [e for e in trail["events"] if e["event_id"] != dropped]}
    assert verify_export(without_one_event) == [f"hour {HOUR_10}: 2 events, but the checkpoint counts 3"]
    without_hour_11_checkpoint = {**trail, "checkpoints": trail["checkpoints"][:1]}
    ids = ", ".join(str(e["event_id"]) for e in trail["events"][3:])
    assert verify_export(without_hour_11_checkpoint) == [
        f"hour {HOUR_11}: events {ids} have no checkpoint (not signed yet, or the checkpoint was removed)"]


def test_signatures_are_checked_against_trusted_keys(db_dsn: str, signed: uuid.UUID, signer: AuditSigner) -> None:
    trail = export(db_dsn, signed)
    assert verify_export(trail, {signer.public_key}) == []
    stranger = Ed25519PrivateKey.generate().public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    assert verify_export(trail, {stranger}) == [
        f"hour {hour}: signed with key {signer.key_id}, which is not a trusted key" for hour in (HOUR_10, HOUR_11)]


def root_of(proof: dict[str, Any]) -> str:
    path = [(step["side"], bytes.fromhex(step["hash"])) for step in proof["path"]]
    return root_from_path(merkle_leaf(proof["event_text"]), path).hex()


@pytest.mark.parametrize("leaf_count", [1, 2, 3, 5, 8])
def test_proofs_verify_at_every_position(db: psycopg.Connection, db_dsn: str, signer: AuditSigner,
                                         leaf_count: int) -> None:
    tenant_id = uuid.uuid4()
    db.execute("SELECT compute.clock_pin('2030-06-01 10:05:00+00')")
    event_ids = [record(db, tenant_id) for _ in range(leaf_count)]
    db.commit()
    assert sign_due(db_dsn, signer, "2030-06-01T11:00:00Z") == 1
    for index in sorted({0, leaf_count // 2, leaf_count - 1}):
        proof = db.execute("SELECT compute.audit_proof(%s)", (event_ids[index],)).fetchone()[0]
        assert (proof["index"], proof["leaf_count"]) == (index, leaf_count)
        assert [step["side"] for step in proof["path"]] == proof_sides(index, leaf_count)
        assert verify_proof(proof, signer.public_key) == []
        forged_text = {**proof, "event_text": proof["event_text"].replace('"alice"', '"mallory"')}
        assert verify_proof(forged_text, signer.public_key)[:2] == [
            f"event {event_ids[index]}: its text does not hash to the proof's leaf",
            f"event {event_ids[index]}: the path leads to root {root_of(forged_text)}, not to the proof's root {proof['root']}"]
        forged_leaf = {**proof, "leaf": "00" * 32}
        assert verify_proof(forged_leaf, signer.public_key) == [
            f"event {event_ids[index]}: its text does not hash to the proof's leaf"]


def test_proof_of_an_unsigned_hour_says_so(db: psycopg.Connection, signer: AuditSigner) -> None:
    db.execute("SELECT compute.clock_pin('2030-06-01 10:05:00+00')")
    event_id = record(db, uuid.uuid4())
    proof = db.execute("SELECT compute.audit_proof(%s)", (event_id,)).fetchone()[0]
    assert verify_proof(proof, signer.public_key) == [f"event {event_id}: its hour has no checkpoint yet"]


def test_store_refuses_a_root_that_is_not_current(db_dsn: str, tenant: uuid.UUID, signer: AuditSigner) -> None:
    with Database(as_role(db_dsn, "bc_worker"), max_size=1) as worker:
        worker.call("worker_api.audit_key_register", signer.key_id, signer.public_key)
        with pytest.raises(ContractError) as raised:
            worker.call("worker_api.audit_checkpoint_store", tenant, HOUR_10, 3, b"\x00" * 32, signer.key_id,
                        b"\x00" * 64)
    assert (raised.value.code, raised.value.sqlstate) == ("GENERATION_CONFLICT", "BC412")


class RecordingSigner(AuditSigner):
    """Signs, but first records one more event into the hour being signed (a late writer)."""

    def __init__(self, key_path: Path, db: psycopg.Connection, tenant: uuid.UUID):
        super().__init__(key_path)
        self.db, self.tenant, self.late_events = db, tenant, 0

    def sign(self, message: bytes) -> bytes:
        if self.late_events == 0:
            record(self.db, self.tenant, "late")
            self.db.commit()
            self.late_events += 1
        return super().sign(message)


def test_changed_events_are_skipped_and_signed_by_the_next_run(db: psycopg.Connection, db_dsn: str,
                                                               tmp_path: Path) -> None:
    tenant_id = uuid.uuid4()
    db.execute("SELECT compute.clock_pin('2030-06-01 10:05:00+00')")
    record(db, tenant_id)
    db.commit()
    racing = RecordingSigner(tmp_path / "audit.pem", db, tenant_id)
    assert sign_due(db_dsn, racing, "2030-06-01T11:00:00Z") == 0
    assert sign_due(db_dsn, racing, "2030-06-01T11:00:00Z") == 1
    assert verify_export(export(db_dsn, tenant_id)) == []


def test_recording_into_a_signed_hour_is_refused(db: psycopg.Connection, db_dsn: str, signed: uuid.UUID) -> None:
    db.execute("SELECT compute.clock_pin('2030-06-01 10:59:59+00')")
    with pytest.raises(psycopg.Error) as raised:
        record(db, signed)
    assert raised.value.sqlstate == "BC412"


@pytest.fixture
def open_writer(db_dsn: str, tenant: uuid.UUID) -> Iterator[psycopg.Connection]:
    """A transaction that began in hour 10 and has recorded an event there, not yet committed."""
    with psycopg.connect(db_dsn) as writer:
        writer.execute("SELECT compute.clock_pin('2030-06-01 10:59:59+00')")
        record(writer, tenant, "slow")
        yield writer


def wait_for_advisory_lock_waiter(db: psycopg.Connection, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        waiting = db.execute("SELECT count(*) FROM pg_catalog.pg_locks WHERE locktype = 'advisory' AND NOT granted"
                             ).fetchone()[0]
        db.rollback()
        if waiting:
            return
        time.sleep(0.02)
    raise AssertionError("the checkpoint never waited for the open writer")


def test_checkpoint_waits_for_a_writer_of_its_hour(db: psycopg.Connection, db_dsn: str, tenant: uuid.UUID,
                                                   signer: AuditSigner, open_writer: psycopg.Connection) -> None:
    results: list[int] = []
    worker = threading.Thread(target=lambda: results.append(sign_due(db_dsn, signer, "2030-06-01T11:30:00Z")))
    worker.start()
    wait_for_advisory_lock_waiter(db)
    open_writer.commit()
    worker.join(timeout=10)
    assert results == [0]  # the root it read lacked the writer's event: skipped, not signed
    assert sign_due(db_dsn, signer, "2030-06-01T11:30:00Z") == 1
    hour_10 = export(db_dsn, tenant)["checkpoints"][0]
    assert (hour_10["hour"], hour_10["leaf_count"]) == (HOUR_10, 4)

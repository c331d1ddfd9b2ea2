"""The site agent runs only operations a worker signed (P14): an op signed by another key is answered
`failed` and never reaches a BMC; a signed op reaches the address the signature covers. The
database takes a signature only over the op as it is (another address in the body is dropped)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import psycopg

from better_compute.db import Database
from better_compute.pki import IntentSigner
from better_compute.sealing import SecretKeyring, seal
from better_compute.siteagent.agent import DatabaseLink, SiteAgent
from better_compute.siteagent.cli import raw_public_key
from better_compute.worker.bmc_results import apply_bmc_result
from better_compute.worker.runtime import WorkItem
from better_compute.siteagent.redfish import Credentials
from fleet import H200_MODEL


class RecordingBmc:
    calls: list[tuple[str, str, str]] = []

    def __init__(self, address: str, credentials: Credentials):
        self.address, self.credentials = address, credentials

    def run(self, kind: str, args: dict[str, Any], seconds_left: float) -> dict[str, Any]:
        RecordingBmc.calls.append((self.address, kind, self.credentials.password))
        return {"system_uuid": args["system_uuid"]}


def machine_with_an_op(db: psycopg.Connection, keyring: SecretKeyring, signer: IntentSigner) -> tuple[uuid.UUID, uuid.UUID, int]:
    site = db.execute("SELECT compute.site_create('rack-sig')").fetchone()[0]
    pool = db.execute("SELECT compute.pool_create(%s, 'h200', %s)", (site, H200_MODEL)).fetchone()[0]
    agent = db.execute("SELECT ops.site_agent_register(%s, 'agent', %s, %s)",
                       (site, keyring.public_key, raw_public_key(signer))).fetchone()[0]
    machine = uuid.uuid4()
    box = seal(keyring.public_key, json.dumps({"username": "root", "password": "pw"}), aad=str(machine).encode())
    db.execute("SELECT ops.machine_enroll(%s, %s, %s, 'bm-1', 'https://10.0.0.7', %s, 'http://images/bcd.iso', %s, %s)",
               (machine, agent, pool, str(uuid.uuid4()), box.key_id, box.box))
    db.execute("SELECT ops.machine_manage('bm-1')")
    db.execute("SELECT compute.machine_reconcile(%s)", (machine,))
    op_id = db.execute("SELECT op_id FROM compute.bmc_ops WHERE machine_id = %s", (machine,)).fetchone()[0]
    db.commit()
    return agent, machine, op_id


def run_once(db_dsn: str, agent_id: uuid.UUID, keyring: SecretKeyring, intent: IntentSigner, signer: IntentSigner, op_id: int) -> None:
    """Claim and run one op with the agent, then apply its result as the worker does."""
    with Database(db_dsn, role="bc_site_agent") as agent_db:
        agent = SiteAgent(agent_id, keyring, intent.private_key.public_key(), signer, 1, RecordingBmc)  # type: ignore[arg-type]
        ops = agent_db.call("site_api.ops_claim", agent_id, agent.room())
        assert len(ops) == 1
        agent.start(ops, DatabaseLink(agent_db, agent))
        agent.stop()
    apply_result(db_dsn, op_id)


def apply_result(db_dsn: str, op_id: int) -> None:
    """What the worker's bmc_ops.result handler does with the result relayed for an op."""
    with Database(db_dsn, role="bc_worker") as worker_db:
        apply_bmc_result(worker_db)(WorkItem(0, "bmc_ops.result", str(op_id), {}, 1, 1))


def test_an_op_signed_by_another_key_never_reaches_the_bmc(db: psycopg.Connection, db_dsn: str, tmp_path: Path) -> None:
    keyring, intent, forger = SecretKeyring(tmp_path / "agent.key"), IntentSigner(tmp_path / "intent.key"), IntentSigner(tmp_path / "forger.key")
    signer = IntentSigner(tmp_path / "signing.key")
    agent, machine, op_id = machine_with_an_op(db, keyring, signer)
    body = db.execute("SELECT worker_api.bmc_op_to_sign(%s)", (op_id,)).fetchone()[0]
    moved = body | {"bmc_address": "https://attacker.example"}
    assert db.execute("SELECT worker_api.bmc_op_signed(%s, %s)", (op_id, json.dumps(intent.sign("bmc.op", moved)))).fetchone()[0] is False
    assert db.execute("SELECT worker_api.bmc_op_signed(%s, %s)", (op_id, json.dumps(forger.sign("bmc.op", body)))).fetchone()[0] is True
    db.commit()
    RecordingBmc.calls = []
    run_once(db_dsn, agent, keyring, intent, signer, op_id)
    assert RecordingBmc.calls == []
    assert db.execute("SELECT state, error FROM compute.bmc_ops WHERE op_id = %s", (op_id,)).fetchone()[0] == "failed"
    assert "signature does not verify" in db.execute("SELECT last_error FROM compute.machines WHERE machine_id = %s",
                                                     (machine,)).fetchone()[0]


def test_a_signed_op_reaches_the_address_it_covers(db: psycopg.Connection, db_dsn: str, tmp_path: Path) -> None:
    keyring, intent = SecretKeyring(tmp_path / "agent.key"), IntentSigner(tmp_path / "intent.key")
    signer = IntentSigner(tmp_path / "signing.key")
    agent, machine, op_id = machine_with_an_op(db, keyring, signer)
    body = db.execute("SELECT worker_api.bmc_op_to_sign(%s)", (op_id,)).fetchone()[0]
    db.execute("SELECT worker_api.bmc_op_signed(%s, %s)", (op_id, json.dumps(intent.sign("bmc.op", body))))
    db.commit()
    RecordingBmc.calls = []
    run_once(db_dsn, agent, keyring, intent, signer, op_id)
    assert RecordingBmc.calls == [("https://10.0.0.7", "verify", "pw")]
    assert db.execute("SELECT state FROM compute.machines WHERE machine_id = %s", (machine,)).fetchone()[0] == "verifying"
    assert db.execute("SELECT step FROM compute.machines WHERE machine_id = %s", (machine,)).fetchone()[0] == 1

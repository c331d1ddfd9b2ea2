"""A BMC result takes effect only when the site agent's own key signed it (P14): whoever can call
site_api (the agent's database login, a gateway) can relay a result but not forge one. An unsigned
result is refused; one signed by another key, or for another op or epoch, is rejected by the worker
and never applied; the agent's own signed result is applied."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest

from better_compute.db import Database
from better_compute.errors import ContractError
from better_compute.pki import IntentSigner
from better_compute.sealing import SecretKeyring
from test_site_agent_signatures import apply_result, machine_with_an_op


def test_a_result_not_signed_by_the_agents_key_is_never_applied(db: psycopg.Connection, db_dsn: str, tmp_path: Path) -> None:
    keyring, signer = SecretKeyring(tmp_path / "agent.key"), IntentSigner(tmp_path / "signing.key")
    forger = IntentSigner(tmp_path / "forger.key")
    agent, machine, op_id = machine_with_an_op(db, keyring, signer)
    body = db.execute("SELECT worker_api.bmc_op_to_sign(%s)", (op_id,)).fetchone()[0]
    db.execute("SELECT worker_api.bmc_op_signed(%s, %s)", (op_id, json.dumps(IntentSigner(tmp_path / "intent.key").sign("bmc.op", body))))
    db.commit()
    result = {"op_id": op_id, "epoch": body["epoch"], "machine_id": str(machine), "agent_id": str(agent),
              "outcome": "succeeded", "result": {"system_uuid": body["args"]["system_uuid"]}, "error": None}

    def step() -> int:
        return int(db.execute("SELECT step FROM compute.machines WHERE machine_id = %s", (machine,)).fetchone()[0])

    with Database(db_dsn, role="bc_site_agent") as relay:
        assert len(relay.call("site_api.ops_claim", agent, 1)) == 1
        with pytest.raises(ContractError) as unsigned:  # the old call: the result as plain arguments
            relay.call("site_api.op_result", agent, op_id, body["epoch"], "succeeded", result["result"], None)
        assert unsigned.value.code == "UNSUPPORTED" and "signed" in unsigned.value.message
        with pytest.raises(ContractError) as bare:
            relay.call("site_api.op_result", agent, {"v": 1, "purpose": "bmc.result", "body": result})
        assert bare.value.code == "INVALID_ARGUMENT" and "signing key" in bare.value.hint
        with pytest.raises(ContractError) as stale:
            relay.call("site_api.op_result", agent, signer.sign("bmc.result", result | {"epoch": body["epoch"] + 1}))
        assert stale.value.code == "FENCED"
        for forged in (forger.sign("bmc.result", result),                                  # another key
                       signer.sign("bmc.result", result) | {"body": result | {"outcome": "failed"}}):  # a changed body
            assert relay.call("site_api.op_result", agent, forged) == "relayed"
            apply_result(db_dsn, op_id)
            db.rollback()
            assert step() == 0
            assert "does not verify" in db.execute("SELECT result_rejected FROM compute.bmc_ops WHERE op_id = %s", (op_id,)).fetchone()[0]
        assert relay.call("site_api.op_result", agent, signer.sign("bmc.result", result)) == "relayed"
    apply_result(db_dsn, op_id)
    db.rollback()
    assert step() == 1
    assert db.execute("SELECT state FROM compute.bmc_ops WHERE op_id = %s", (op_id,)).fetchone()[0] == "succeeded"

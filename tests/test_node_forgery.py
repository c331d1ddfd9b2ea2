"""Relays cannot forge (P14): a gateway's database login can say nothing on a node's behalf.

Each test logs in as a real LOGIN role that is a member of bc_gateway (what `serve gateway` runs
as) and tries to make one kind of node message take effect without the node's signature: a
command result, a replacement of the node's key, an empty inventory, a spec acknowledgement with
conditions. It tries the direct way (a node_api function that writes the effect) and the relayed
way (node_api.report with an envelope the node did not sign, or signed and changed afterwards, or
signed for another purpose). Nothing changes; the worker (`serve worker`, a real process) rejects
each relayed forgery and records it. Genuine reports take effect, once: a replayed one is rejected.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from psycopg import sql as sqltext
from psycopg.types.json import Jsonb

from better_compute.pki import generate_node_key, sign_envelope
from better_compute.pki.binding import join_token_binding
from fleet import h200_inventory, make_pool
from gateway_support import running_worker_process
from worker_support import wait_until

FORGER = "bc_test_forger"  # a login of the gateway's group role, as a deployment creates one
SETTLE_SECONDS = 15.0


def der(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


@pytest.fixture
def gateway_login(sql: psycopg.Connection, db_dsn: str) -> Iterator[psycopg.Connection]:
    """A connection as a LOGIN role granted bc_gateway (no SET ROLE: its privileges are the group's)."""
    sql.execute(sqltext.SQL("DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = {name}) THEN "
                            "CREATE ROLE {role} LOGIN; END IF; END $$").format(
        name=sqltext.Literal(FORGER), role=sqltext.Identifier(FORGER)))
    sql.execute(sqltext.SQL("GRANT bc_gateway TO {}").format(sqltext.Identifier(FORGER)))
    with psycopg.connect(db_dsn, user=FORGER, autocommit=True) as conn:
        assert conn.execute("SELECT current_user").fetchone()[0] == FORGER
        yield conn


@pytest.fixture
def worker(db_dsn: str, tmp_path: Path) -> Iterator[None]:
    with running_worker_process(db_dsn, tmp_path / "keys"):
        yield


@dataclass
class Node:
    """A joined node as the database knows it, the key it joined with, and its session's counter."""

    node_id: str
    hostname: str
    key: ec.EllipticCurvePrivateKey
    epoch: int = 0
    seq: int = 0
    sent: list[dict[str, Any]] = field(default_factory=list)

    def report(self, purpose: str, payload: dict[str, Any], key: ec.EllipticCurvePrivateKey | None = None,
               node_id: str | None = None) -> dict[str, Any]:
        """An envelope as the daemon makes it (node id, session epoch, next sequence number, payload)."""
        self.seq += 1
        body = {"node_id": node_id or self.node_id, "epoch": self.epoch, "seq": self.seq, **payload}
        return sign_envelope(purpose, body, key or self.key)


@pytest.fixture
def node(sql: psycopg.Connection, gateway_login: psycopg.Connection) -> Node:
    """A node joined (token, inventory of two GPUs, its public key) with a session the gateway opened."""
    pool_id = make_pool(sql, [], shapes=("gpu",))
    token = sql.execute("SELECT compute.api_join_tokens_create(NULL, %s, %s) ->> 'token'",
                        (str(uuid.uuid4()), Jsonb({"pool_id": str(pool_id)}))).fetchone()[0]
    hostname, key = f"forge-{uuid.uuid4().hex[:8]}", generate_node_key()
    token_ref, proof = join_token_binding(token, der(key))
    joined = gateway_login.execute("SELECT node_api.join_request(%s, %s, %s, %s, 'csr', 'gw-forge')",
                                   (base64.b64decode(token_ref), base64.b64decode(proof),
                                    Jsonb(h200_inventory(hostname, 2)), der(key))).fetchone()[0]
    node = Node(joined["node_id"], hostname, key)
    node.epoch = gateway_login.execute("SELECT node_api.session_open(%s, 'gw-forge', %s)",
                                       (node.node_id, der(key))).fetchone()[0]
    return node


def forge_directly(gateway_login: psycopg.Connection, statement: str, args: tuple[Any, ...]) -> None:
    """Call a node_api function through which a gateway once wrote an effect itself: it only answers
    UNSUPPORTED now (kept for released verify scripts and older gateways)."""
    with pytest.raises(psycopg.Error) as refused:
        gateway_login.execute(statement, args)
    assert refused.value.sqlstate == "BC501", refused.value


def relay(gateway_login: psycopg.Connection, node: Node, envelope: dict[str, Any]) -> None:
    """What a gateway may do with a node's envelope: append it to the node's inbox, as received."""
    gateway_login.execute("SELECT node_api.report(%s, %s, %s)", (node.node_id, node.epoch, Jsonb(envelope)))


def settled(sql: psycopg.Connection, node: Node) -> list[tuple[str, str]]:
    """Once the worker has decided every report of the node: (purpose, reason) of each rejected one."""
    pending = "SELECT count(*) FROM compute.node_reports WHERE node_id = %s AND state = 'pending'"
    wait_until(lambda: sql.execute(pending, (node.node_id,)).fetchone()[0] == 0, SETTLE_SECONDS,
               "the worker to decide every report")
    return sql.execute("SELECT envelope ->> 'purpose', reason FROM compute.node_reports "
                       "WHERE node_id = %s AND state = 'rejected' ORDER BY report_id", (node.node_id,)).fetchall()


def rejection_events(sql: psycopg.Connection, node: Node) -> int:
    return sql.execute("SELECT count(*) FROM compute.outbox WHERE aggregate_id = %s AND event_type = 'node.report_rejected'",
                       (node.node_id,)).fetchone()[0]


def forgeries(node: Node, purpose: str, payload: dict[str, Any], tampered: dict[str, Any]) -> list[dict[str, Any]]:
    """The relayed forgeries of one message: signed by a key the node does not hold, the node's
    signature over another body, the node's signature made for another purpose, no signature."""
    stranger = node.report(purpose, payload, key=generate_node_key())
    changed = node.report(purpose, payload)
    changed["body"].update(tampered)
    other_purpose = node.report("node.heartbeat", payload)
    other_purpose["purpose"] = purpose
    unsigned = node.report(purpose, payload)
    unsigned["sig"] = base64.b64encode(b"\0" * 64).decode()
    return [stranger, changed, other_purpose, unsigned]


def assert_rejected(sql: psycopg.Connection, node: Node, purpose: str, count: int) -> None:
    rejected = settled(sql, node)
    assert [kind for kind, _reason in rejected] == [purpose] * count, rejected
    assert all("signature" in reason or "verify" in reason for _kind, reason in rejected), rejected
    assert rejection_events(sql, node) == count


# -- one test per kind of node message ----------------------------------------------------------------

def test_a_gateway_cannot_forge_a_command_result(sql: psycopg.Connection, gateway_login: psycopg.Connection,
                                                 node: Node, worker: None) -> None:
    command_id = str(sql.execute("SELECT (compute.command_enqueue(%s, 'reboot', '{}', 'k-1')).command_id",
                                 (node.node_id,)).fetchone()[0])

    def state() -> tuple[str, str | None]:
        return sql.execute("SELECT state, output FROM compute.node_commands WHERE command_id = %s", (command_id,)).fetchone()

    forge_directly(gateway_login, "SELECT node_api.command_result(%s, %s, %s, 'succeeded', 'forged')",
                   (node.node_id, node.epoch, command_id))
    assert state() == ("pending", None), "a gateway wrote a command result the node never sent"
    forged = forgeries(node, "node.result", {"command_id": command_id, "status": "failed", "output": "x"},
                       {"status": "succeeded", "output": "forged"})
    for envelope in forged:
        relay(gateway_login, node, envelope)
    assert_rejected(sql, node, "node.result", len(forged))
    assert state() == ("pending", None)


def test_a_gateway_cannot_replace_a_nodes_key(sql: psycopg.Connection, gateway_login: psycopg.Connection,
                                              node: Node, worker: None) -> None:
    registered = "SELECT public_key FROM compute.node_identities WHERE node_id = %s"
    joined_with = sql.execute(registered, (node.node_id,)).fetchone()[0]
    stranger = generate_node_key()
    forge_directly(gateway_login, "SELECT node_api.node_key_renewed(%s, %s, %s)", (node.node_id, node.epoch, der(stranger)))
    assert sql.execute(registered, (node.node_id,)).fetchone()[0] == joined_with, "a gateway replaced the node's key"

    def key_change(outer: ec.EllipticCurvePrivateKey, new: ec.EllipticCurvePrivateKey) -> dict[str, Any]:
        from better_compute.pki.signing import key_proof  # (here: before the fix it did not exist)
        node.seq += 1
        body = {"node_id": node.node_id, "epoch": node.epoch, "seq": node.seq,
                "public_key": base64.b64encode(der(new)).decode()}
        return sign_envelope("node.key", {**body, "proof": key_proof(body, new)}, outer)

    forged = [key_change(stranger, stranger),  # the new key vouches for itself: not the node's
              *forgeries(node, "node.key", {"public_key": base64.b64encode(der(stranger)).decode(), "proof": "AA=="},
                         {"public_key": base64.b64encode(der(generate_node_key())).decode()})]
    for envelope in forged:
        relay(gateway_login, node, envelope)
    assert_rejected(sql, node, "node.key", len(forged))
    assert sql.execute(registered, (node.node_id,)).fetchone()[0] == joined_with


def test_a_gateway_cannot_report_an_empty_inventory(sql: psycopg.Connection, gateway_login: psycopg.Connection,
                                                    node: Node, worker: None) -> None:
    def present() -> list[bool]:
        return [row[0] for row in sql.execute("SELECT present FROM compute.devices WHERE node_id = %s ORDER BY index",
                                              (node.node_id,))]

    empty = h200_inventory(node.hostname, 2) | {"devices": []}
    forge_directly(gateway_login, "SELECT node_api.inventory_report(%s, %s, %s)", (node.node_id, node.epoch, Jsonb(empty)))
    assert present() == [True, True], "a gateway reported the node's GPUs gone"
    forged = forgeries(node, "node.inventory", {"inventory": h200_inventory(node.hostname, 2)}, {"inventory": empty})
    for envelope in forged:
        relay(gateway_login, node, envelope)
    assert_rejected(sql, node, "node.inventory", len(forged))
    assert present() == [True, True]


def test_a_gateway_cannot_acknowledge_a_spec_or_set_conditions(sql: psycopg.Connection,
                                                                gateway_login: psycopg.Connection,
                                                                node: Node, worker: None) -> None:
    spec = "SELECT signed_generation, observed_generation, conditions FROM compute.node_specs WHERE node_id = %s"
    wait_until(lambda: sql.execute(spec, (node.node_id,)).fetchone()[0], SETTLE_SECONDS, "the signed spec")
    generation = sql.execute(spec, (node.node_id,)).fetchone()[0]
    assert sql.execute(spec, (node.node_id,)).fetchone()[1:] == (None, [])
    forged_conditions = [{"type": "Ready", "status": "True", "message": "forged"}]
    forge_directly(gateway_login, "SELECT node_api.spec_observed(%s, %s, %s, %s)",
                   (node.node_id, node.epoch, generation, Jsonb(forged_conditions)))
    assert sql.execute(spec, (node.node_id,)).fetchone()[1:] == (None, []), "a gateway acknowledged a spec for the node"
    forged = forgeries(node, "node.observed", {"generation": generation, "conditions": []},
                       {"conditions": forged_conditions})
    for envelope in forged:
        relay(gateway_login, node, envelope)
    assert_rejected(sql, node, "node.observed", len(forged))
    assert sql.execute(spec, (node.node_id,)).fetchone()[1:] == (None, [])


# -- what the node did sign takes effect, once ---------------------------------------------------------

def test_signed_reports_take_effect_once_and_a_replay_is_rejected(sql: psycopg.Connection,
                                                                   gateway_login: psycopg.Connection,
                                                                   node: Node, worker: None) -> None:
    one_gpu = h200_inventory(node.hostname, 2)
    one_gpu["devices"] = one_gpu["devices"][:1]
    both = node.report("node.inventory", {"inventory": h200_inventory(node.hostname, 2)})
    relay(gateway_login, node, both)
    relay(gateway_login, node, node.report("node.inventory", {"inventory": one_gpu}))
    assert settled(sql, node) == []
    present = "SELECT array_agg(present ORDER BY index) FROM compute.devices WHERE node_id = %s"
    assert sql.execute(present, (node.node_id,)).fetchone()[0] == [True, False]

    relay(gateway_login, node, both)  # the gateway replays what the node signed before
    assert [kind for kind, _reason in settled(sql, node)] == ["node.inventory"]
    assert sql.execute(present, (node.node_id,)).fetchone()[0] == [True, False], "a replayed inventory took effect"

    # A report another node signed, relayed as this node's, is rejected too.
    other = Node(node.node_id, node.hostname, generate_node_key(), node.epoch, node.seq)
    relay(gateway_login, node, other.report("node.inventory", {"inventory": h200_inventory(node.hostname, 2)},
                                            node_id=str(uuid.uuid4())))
    assert len(settled(sql, node)) == 2

    # The node changes its key: the old key signs the new one, which proves it holds it.
    from better_compute.pki.signing import key_proof
    new_key = generate_node_key()
    node.seq += 1
    body = {"node_id": node.node_id, "epoch": node.epoch, "seq": node.seq,
            "public_key": base64.b64encode(der(new_key)).decode()}
    relay(gateway_login, node, sign_envelope("node.key", {**body, "proof": key_proof(body, new_key)}, node.key))
    old_key, node.key = node.key, new_key
    relay(gateway_login, node, node.report("node.inventory", {"inventory": h200_inventory(node.hostname, 2)}))
    relay(gateway_login, node, node.report("node.inventory", {"inventory": one_gpu}, key=old_key))  # the old key no more
    assert [kind for kind, _reason in settled(sql, node)] == ["node.inventory"] * 3
    assert sql.execute("SELECT public_key FROM compute.node_identities WHERE node_id = %s",
                       (node.node_id,)).fetchone()[0] == der(new_key)
    assert sql.execute(present, (node.node_id,)).fetchone()[0] == [True, True]


def test_a_gateway_cannot_spend_a_relayed_join_token_on_a_key_of_its_own(
        sql: psycopg.Connection, gateway_login: psycopg.Connection) -> None:
    """What a join puts in the gateway's hands (token_ref and the proof for the node's key) does not
    join another key: ACCESS_DENIED, and the token stays unspent for the node (issue 20)."""
    pool_id = make_pool(sql, [], shapes=("gpu",))
    minted = sql.execute("SELECT compute.api_join_tokens_create(NULL, %s, %s)",
                         (str(uuid.uuid4()), Jsonb({"pool_id": str(pool_id)}))).fetchone()[0]
    node_key, gateway_key = generate_node_key(), generate_node_key()
    token_ref, proof = (base64.b64decode(part) for part in join_token_binding(minted["token"], der(node_key)))
    with pytest.raises(psycopg.Error) as refused:
        gateway_login.execute("SELECT node_api.join_request(%s, %s, %s, %s, 'csr', 'gw-forge')",
                              (token_ref, proof, Jsonb(h200_inventory("gw-own", 1)), der(gateway_key)))
    assert refused.value.sqlstate == "BC403"
    assert sql.execute("SELECT state FROM compute.join_tokens WHERE token_id = %s",
                       (minted["token_id"],)).fetchone()[0] == "active"


def test_a_gateway_cannot_decide_a_certificate_request(node: Node, gateway_login: psycopg.Connection) -> None:
    """Issuance is the signer's (bc_worker): a gateway login may not hand back a certificate."""
    for statement in ("SELECT worker_api.svid_issued(gen_random_uuid(), NULL, 'pem', '\\x00')",
                      "SELECT worker_api.svid_requests_due(1)"):
        with pytest.raises(psycopg.Error) as refused:
            gateway_login.execute(statement)
        assert refused.value.sqlstate == "42501"  # insufficient privilege

"""The node gateway (`better-compute serve gateway`) end to end: the real gateway (and, where intent
must be signed, the real worker) as child processes, and a minimal node built from nodeproto + pki
(tests/gateway_support.py).

Joining (a token works once; the inventory must be signed with the CSR's key), sessions (hello
with an epoch; a newer session fences the older: error FENCED and close code 4001), heartbeats of
50 sessions in one statement per interval, a spec signed by the worker reaching the node within
seconds of a booking, reports the node did not sign (or that were changed after signing) relayed
and rejected by the worker, never applied, a killed node shown disconnected with nothing else
changed, oversize and unknown frames refused, renewal and a key change signed by the old and the
new key, and SIGTERM closing sessions with 1001.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from psycopg.types.json import Jsonb
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidHandshake
from websockets.frames import CloseCode

from better_compute.nodeproto import (FENCED, NODE_MESSAGE_BYTES, SESSION_PATH, TYPES, UNSUPPORTED, Certificate,
                                      Command, Error, Heartbeat, Hello, Inventory, Join, Key, Observed, ProtocolError,
                                      Renew, Result, Spec, decode, encode, read_intent_key, report_body)
from better_compute.pki import (CertificateAuthority, IntentSigner, generate_node_key, issue_svid, make_csr,
                                open_envelope, verify_svid)
from better_compute.pki.binding import public_key_der
from better_compute.pki.signing import key_proof
from fleet import make_pool
from gateway_support import (GatewayProcess, NodeRefused, NodeSession, TestNode, running_gateway,
                             running_worker_process)

TENANT = "00000000-0000-0000-0000-00000000a7e5"
TRUST_DOMAIN = "better-compute.local"
SPEC_SECONDS = 10.0  # a booking's spec reaches the node within this


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def pool_id(sql: psycopg.Connection) -> uuid.UUID:
    """An empty H200 pool (nodes join it) that offers whole GPUs."""
    return make_pool(sql, [], shapes=("gpu",))


@pytest.fixture
def gateway(db_dsn: str, tmp_path: Path) -> Iterator[GatewayProcess]:
    with running_gateway(db_dsn, tmp_path / "keys") as process:
        yield process


def mint_token(sql: psycopg.Connection, pool_id: uuid.UUID) -> str:
    return sql.execute("SELECT compute.api_join_tokens_create(NULL, %s, %s) ->> 'token'",
                       (str(uuid.uuid4()), Jsonb({"pool_id": str(pool_id)}))).fetchone()[0]


async def joined_node(gateway: GatewayProcess, sql: psycopg.Connection, pool_id: uuid.UUID, tmp_path: Path,
                      hostname: str | None = None) -> TestNode:
    hostname = hostname or f"node-{uuid.uuid4().hex[:8]}"
    node = TestNode(hostname, 1, tmp_path / hostname)
    await node.join(gateway, mint_token(sql, pool_id))
    return node


async def eventually(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll `condition` (without blocking the event loop for long) until it is truthy; its value."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.05)
    return value


def connection_of(sql: psycopg.Connection, node_id: str) -> dict[str, Any]:
    return sql.execute("SELECT compute.node_connection(%s)", (node_id,)).fetchone()[0]


def reserve_now(sql: psycopg.Connection, pool_id: uuid.UUID) -> str:
    request = {"tenant_id": TENANT, "pool_id": str(pool_id), "shape": "gpu", "count": 1,
               "end": (sql.execute("SELECT compute.compute_now()").fetchone()[0] + timedelta(hours=1)).isoformat()}
    reservation_id = sql.execute("SELECT compute.reserve(%s) ->> 'reservation_id'", (Jsonb(request),)).fetchone()[0]
    sql.execute("SELECT compute.reservation_activate(%s)", (reservation_id,))
    return reservation_id


# -- the protocol module --------------------------------------------------------------------------

def test_the_message_bound_is_the_database_limit(sql: psycopg.Connection) -> None:
    limit = sql.execute("SELECT value FROM compute.limits WHERE name = 'node_message_bytes'").fetchone()[0]
    assert NODE_MESSAGE_BYTES == limit
    assert all(cls.LIMIT <= NODE_MESSAGE_BYTES for cls in TYPES.values())


def test_messages_round_trip_and_bad_frames_are_refused() -> None:
    for message in (Hello(3, 5.0), Heartbeat(), Error("FENCED", "gone"), Renew("csr", {"v": 1}), Certificate("pem"),
                    Spec({"v": 1}), Join("ref", "proof", "csr", {"v": 1})):
        assert decode(encode(message)) == message
    refusals = {
        '{"v": 2, "type": "heartbeat"}': UNSUPPORTED,
        '{"v": 1, "type": "teleport"}': UNSUPPORTED,
        '{"type": "heartbeat"}': UNSUPPORTED,
        '{"v": 1, "type": "hello", "epoch": "1", "heartbeat_seconds": 5}': "INVALID_ARGUMENT",
        '{"v": 1, "type": "hello", "epoch": true, "heartbeat_seconds": 5}': "INVALID_ARGUMENT",
        '{"v": 1, "type": "renew"}': "INVALID_ARGUMENT",
        '[1, 2]': "INVALID_ARGUMENT",
        'not json': "INVALID_ARGUMENT",
        '{"v": 1, "type": "heartbeat", "load": NaN}': "INVALID_ARGUMENT",  # Python reads it; nothing else does
        '{"v": 1, "type": "heartbeat", "load": 1e400}': "INVALID_ARGUMENT",  # beyond a double: inf
        '{"v": 1, "type": "renew", "csr": "a\\u0000b"}': "INVALID_ARGUMENT",  # PostgreSQL text cannot hold it
        json.dumps({"v": 1, "type": "heartbeat", "pad": "x" * 2000}): "INVALID_ARGUMENT",  # heartbeats are small
    }
    for frame, code in refusals.items():
        with pytest.raises(ProtocolError) as refused:
            decode(frame)
        assert refused.value.code == code, frame
    with pytest.raises(ProtocolError):
        decode(b'{"v": 1, "type": "heartbeat"}')  # binary frames are not the protocol
    with pytest.raises(ProtocolError):
        encode(Inventory({"pad": "x" * NODE_MESSAGE_BYTES}))
    assert decode('{"v": 1, "type": "heartbeat", "added_later": 1}') == Heartbeat()  # unknown fields are ignored


# -- join -----------------------------------------------------------------------------------------

@pytest.mark.anyio
async def test_a_node_joins_once_with_a_token(gateway: GatewayProcess, sql: psycopg.Connection,
                                              pool_id: uuid.UUID, tmp_path: Path) -> None:
    token = mint_token(sql, pool_id)
    node = TestNode("gpu-host-1", 2, tmp_path / "node")
    # An inventory signed with another key than the CSR's is refused, and the token is not used up.
    forged = node.join_message(token)
    forged = Join(forged.token_ref, forged.proof, forged.csr,
                  node.signed("inventory", node.inventory, generate_node_key()))
    with pytest.raises(NodeRefused) as refused:
        await node.join(gateway, token, forged)
    assert refused.value.error.code == "INVALID_ARGUMENT"

    joined = await node.join(gateway, token)
    row = sql.execute("SELECT pool_id, name, (SELECT count(*) FROM compute.devices AS d WHERE d.node_id = n.node_id) "
                      "FROM compute.nodes AS n WHERE node_id = %s", (joined.node_id,)).fetchone()
    assert row == (pool_id, "gpu-host-1", 2)
    assert joined.ca.encode() == gateway.ca_path.read_bytes()
    ca = x509.load_pem_x509_certificate(gateway.ca_path.read_bytes())
    identity = verify_svid(ca, node.certificate, sql.execute("SELECT now()").fetchone()[0])
    assert str(identity.node_id) == joined.node_id and joined.trust_domain == TRUST_DOMAIN
    assert node.certificate.public_key() == node.key.public_key()
    assert read_intent_key(joined.intent_key) == IntentSigner(gateway.keys / "intent.key").private_key.public_key()

    another = TestNode("gpu-host-2", 1, tmp_path / "another")
    with pytest.raises(NodeRefused) as refused:
        await another.join(gateway, token)
    assert refused.value.error.code == "ACCESS_DENIED"
    assert sql.execute("SELECT count(*) FROM compute.nodes WHERE pool_id = %s", (pool_id,)).fetchone()[0] == 1


# -- sessions -------------------------------------------------------------------------------------

@pytest.mark.anyio
async def test_a_newer_session_fences_the_older(gateway: GatewayProcess, sql: psycopg.Connection,
                                                pool_id: uuid.UUID, tmp_path: Path) -> None:
    node = await joined_node(gateway, sql, pool_id, tmp_path)
    async with node.session(gateway) as first:
        assert first.hello is not None and first.hello.heartbeat_seconds == 1
        async with node.session(gateway) as second:  # on this gateway
            assert second.hello is not None and second.hello.epoch == first.hello.epoch + 1
            assert (await first.expect(Error)).code == "FENCED"
            assert await first.closed_with() == FENCED
            # At another gateway: the database fences this one; its next write is refused and closed.
            sql.execute("SELECT node_api.session_open(%s, 'gw-elsewhere', %s)",
                        (node.node_id, public_key_der(node.key.public_key())))
            await second.send(Inventory(second.report("node.inventory", {"inventory": node.inventory})))
            assert (await second.expect(Error)).code == "FENCED"
            assert await second.closed_with() == FENCED
    assert connection_of(sql, node.node_id)["gateway"] == "gw-elsewhere"


@pytest.mark.anyio
async def test_a_session_needs_an_svid_of_the_gateway_ca(gateway: GatewayProcess, sql: psycopg.Connection,
                                                         pool_id: uuid.UUID, tmp_path: Path) -> None:
    node = await joined_node(gateway, sql, pool_id, tmp_path)
    async with connect(gateway.url + SESSION_PATH, ssl=gateway.tls()) as connection:  # no client certificate
        session = NodeSession(node, connection)
        assert (await session.expect(Error)).code == "ACCESS_DENIED"
        assert await session.closed_with() == CloseCode.POLICY_VIOLATION
    # The node's id in a certificate of another CA: the TLS handshake fails already.
    now = sql.execute("SELECT now()").fetchone()[0]
    stranger = CertificateAuthority.open(tmp_path / "stranger.key", TRUST_DOMAIN, now)
    node.write_certificate(issue_svid(stranger, make_csr(node.key, node.hostname), uuid.UUID(node.node_id), now))
    with pytest.raises(InvalidHandshake):
        async with node.session(gateway):
            pass
    assert sql.execute("SELECT count(*) FROM compute.node_sessions").fetchone()[0] == 0  # none was opened


@pytest.mark.anyio
async def test_a_certificate_whose_key_is_not_the_nodes_registered_key_opens_no_session(
        gateway: GatewayProcess, sql: psycopg.Connection, pool_id: uuid.UUID, tmp_path: Path) -> None:
    """An SVID stays valid until it expires, but it opens a session only while its key is the node's
    registered key: a released machine's old identity (key deleted) and a replaced key get nothing."""
    node = await joined_node(gateway, sql, pool_id, tmp_path)
    async with node.session(gateway) as session:
        assert session.hello is not None
    other = public_key_der(generate_node_key().public_key())
    sql.execute("SELECT compute.node_key_replace(%s, %s)", (node.node_id, other))  # as a key report does
    async with node.session(gateway, expect_hello=False) as session:
        assert (await session.expect(Error)).code == "ACCESS_DENIED"
        assert await session.closed_with() == CloseCode.POLICY_VIOLATION
    sql.execute("DELETE FROM compute.node_identities WHERE node_id = %s", (node.node_id,))  # as a machine release does
    async with node.session(gateway, expect_hello=False) as session:
        assert (await session.expect(Error)).code == "ACCESS_DENIED"
    assert connection_of(sql, node.node_id)["connected"] is False


@pytest.mark.anyio
async def test_heartbeats_and_the_poll_of_fifty_sessions_are_one_statement_per_interval_each(
        gateway: GatewayProcess, sql: psycopg.Connection, pool_id: uuid.UUID, tmp_path: Path) -> None:
    nodes = [await joined_node(gateway, sql, pool_id, tmp_path, f"hb-{index:02}") for index in range(50)]
    interval = 1.0  # gateway_support starts the gateway with --heartbeat-seconds 1
    async with contextlib.AsyncExitStack() as stack:
        sessions = [await stack.enter_async_context(node.session(gateway)) for node in nodes]
        heard_before = dict(sql.execute("SELECT node_id::text, last_heard_at FROM compute.node_sessions").fetchall())
        assert len(heard_before) == 50
        before, started = gateway.metrics(), time.monotonic()

        async def beat(session: NodeSession) -> None:
            while True:
                await session.send(Heartbeat())
                await asyncio.sleep(interval / 4)

        beating = [asyncio.create_task(beat(session)) for session in sessions]
        await asyncio.sleep(4.5 * interval)
        after, elapsed = gateway.metrics(), time.monotonic() - started
        for task in beating:
            task.cancel()
    statements = after["bc_gateway_heartbeat_statements_total"] - before["bc_gateway_heartbeat_statements_total"]
    written = after["bc_gateway_heartbeat_sessions_total"] - before["bc_gateway_heartbeat_sessions_total"]
    assert 1 <= statements <= elapsed / interval + 1  # one statement per interval for all sessions
    assert written == 50 * statements
    polls = after["bc_gateway_poll_statements_total"] - before["bc_gateway_poll_statements_total"]
    assert 1 <= polls <= elapsed / interval + 1  # --spec-poll-seconds 1: one node_api.push_due for all 50
    heard_after = dict(sql.execute("SELECT node_id::text, last_heard_at FROM compute.node_sessions").fetchall())
    assert all(heard_after[node_id] > heard_before[node_id] for node_id in heard_before)
    assert after['bc_gateway_messages_total{direction="in",type="heartbeat"}'] >= 50 * statements
    assert after["bc_gateway_sessions"] == 50
    await eventually(lambda: gateway.metrics()["bc_gateway_sessions"] == 0, 5, "the sessions to close")


@pytest.mark.anyio
async def test_a_booking_reaches_the_node_as_a_signed_spec(gateway: GatewayProcess, sql: psycopg.Connection,
                                                           pool_id: uuid.UUID, tmp_path: Path, db_dsn: str) -> None:
    node = await joined_node(gateway, sql, pool_id, tmp_path)
    intent = node.intent_key
    with running_worker_process(db_dsn, gateway.keys):
        async with node.session(gateway) as session:
            first = await session.expect(Spec)  # the spec of a node without bookings, sent on connect
            assert open_envelope(first.envelope, intent, "spec")["spec"]["devices"] == []
            reservation_id = reserve_now(sql, pool_id)
            booked_at = time.monotonic()

            def books(spec: Spec) -> bool:
                return any(device["reservation_id"] == reservation_id
                           for device in spec.envelope["body"]["spec"]["devices"])

            spec = await session.expect(Spec, books, timeout=SPEC_SECONDS)
            assert time.monotonic() - booked_at < SPEC_SECONDS
            body = open_envelope(spec.envelope, intent, "spec")  # the control plane's signature
            assert body["node_id"] == node.node_id and body["generation"] > first.envelope["body"]["generation"]
            [device] = body["spec"]["devices"]
            assert device["device_uuid"] == node.inventory["devices"][0]["uuid"] and device["cdi_name"]

            await session.send(Observed(session.report("node.observed", {"generation": body["generation"],
                                                                          "conditions": []})))
            observed = "SELECT observed_generation FROM compute.node_specs WHERE node_id = %s"
            await eventually(lambda: sql.execute(observed, (node.node_id,)).fetchone()[0] == body["generation"], 5,
                             "the observed generation")
            # The reconciler's poke (node_specs.resend) sends the spec again, though the node has it.
            received = len(session.received)
            sql.execute("SELECT pg_notify('bc_node_spec', %s)", (node.node_id,))
            again = await session.expect(Spec)
            assert again.envelope == spec.envelope and len(session.received) == received + 1


@pytest.mark.anyio
async def test_results_the_node_did_not_sign_are_rejected_by_the_worker(
        gateway: GatewayProcess, sql: psycopg.Connection, pool_id: uuid.UUID, tmp_path: Path, db_dsn: str) -> None:
    node = await joined_node(gateway, sql, pool_id, tmp_path)
    intent = node.intent_key

    def state() -> tuple[str, str | None]:
        return sql.execute("SELECT state, output FROM compute.node_commands WHERE command_id = %s",
                           (command_id,)).fetchone()

    def rejected() -> list[str]:
        return [row[0] for row in sql.execute("SELECT reason FROM ops.node_reports_rejected WHERE node_id = %s "
                                              "ORDER BY report_id", (node.node_id,))]

    with running_worker_process(db_dsn, gateway.keys):
        async with node.session(gateway) as session:
            enqueue = "SELECT (compute.command_enqueue(%s, 'collect_diagnostics', '{}', 'k-1')).command_id"
            command_id = str(sql.execute(enqueue, (node.node_id,)).fetchone()[0])
            command = await session.expect(Command, timeout=SPEC_SECONDS)
            assert open_envelope(command.envelope, intent, "command") == {
                "command_id": command_id, "node_id": node.node_id, "kind": "collect_diagnostics", "args": {}}
            # Without a result it is delivered again, by the poll timer (no notification).
            sql.execute("UPDATE compute.limits SET value = 1 WHERE name = 'node_command_redelivery_seconds'")
            assert (await session.expect(Command, timeout=5)).envelope == command.envelope

            # The gateway relays what it gets; the worker rejects what the node did not sign.
            tampered = session.report("node.result", {"command_id": command_id, "status": "failed", "output": "disk on fire"})
            tampered["body"]["status"] = "succeeded"  # changed after signing
            stranger = session.report("node.result", {"command_id": command_id, "status": "succeeded", "output": ""},
                                      key=generate_node_key())
            other_purpose = session.report("node.observed", {"command_id": command_id, "status": "succeeded",
                                                             "output": ""})
            other_purpose["purpose"] = "node.result"
            for forged in (tampered, stranger, other_purpose):
                await session.send(Result(forged))
            await eventually(lambda: len(rejected()) == 3, 5, "the worker to reject three results")
            assert all("does not verify" in reason for reason in rejected())
            assert state() == ("pending", None)

            await session.send(Result(session.report("node.result", {"command_id": command_id, "status": "succeeded",
                                                                     "output": "ok"})))
            await eventually(lambda: state() == ("succeeded", "ok"), 5, "the signed result")
            assert not [message for message in session.received if isinstance(message, Error)]


@pytest.mark.anyio
async def test_a_killed_node_is_disconnected_and_nothing_else_changes(
        gateway: GatewayProcess, sql: psycopg.Connection, pool_id: uuid.UUID, tmp_path: Path) -> None:
    node = await joined_node(gateway, sql, pool_id, tmp_path)
    reservation_id = reserve_now(sql, pool_id)

    def world() -> list[Any]:
        return [sql.execute(query, (node.node_id,)).fetchall() for query in (
            "SELECT reservation_id::text, state, during FROM compute.reservations WHERE reservation_id IN "
            "(SELECT reservation_id FROM compute.bookings WHERE node_id = %s)",
            "SELECT atom_id, state, during FROM compute.bookings WHERE node_id = %s ORDER BY atom_id",
            "SELECT name, inventory FROM compute.nodes WHERE node_id = %s",
            "SELECT device_id, present, layout FROM compute.devices WHERE node_id = %s ORDER BY device_id",
            "SELECT flag FROM compute.node_flags WHERE node_id = %s")]

    async with node.session(gateway) as session:
        assert connection_of(sql, node.node_id)["connected"] is True
        before = world()
        session.connection.transport.abort()  # as if the process died: no close frame
        await eventually(lambda: connection_of(sql, node.node_id)["connected"] is False, 10, "Connected=False")
    assert world() == before
    [(booked, state, _during)] = before[0]
    assert (booked, state) == (reservation_id, "active")


@pytest.mark.anyio
async def test_bad_frames_are_answered_and_oversize_ones_close_the_connection(
        gateway: GatewayProcess, sql: psycopg.Connection, pool_id: uuid.UUID, tmp_path: Path) -> None:
    node = await joined_node(gateway, sql, pool_id, tmp_path)
    async with node.session(gateway) as session:
        for frame, code in (('{"v": 1, "type": "teleport"}', "UNSUPPORTED"),
                            ('{"v": 9, "type": "heartbeat"}', "UNSUPPORTED"),
                            (json.dumps({"v": 1, "type": "heartbeat", "pad": "x" * 4096}), "INVALID_ARGUMENT"),
                            (encode(Spec({"v": 1})), "INVALID_ARGUMENT")):  # a node does not send specs
            await session.connection.send(frame)
            assert (await session.expect(Error)).code == code, frame
        await session.send(Heartbeat())  # still open
        oversize = {"v": 1, "type": "inventory", "envelope": {"pad": "x" * NODE_MESSAGE_BYTES}}
        await session.connection.send(json.dumps(oversize))
        assert await session.closed_with() == CloseCode.MESSAGE_TOO_BIG
    metrics = gateway.metrics()
    assert metrics['bc_gateway_messages_total{direction="in",type="unknown"}'] >= 3
    assert metrics['bc_gateway_errors_total{code="UNSUPPORTED"}'] == 2


@pytest.mark.anyio
async def test_a_node_renews_its_certificate_and_changes_its_key_over_the_session(
        gateway: GatewayProcess, sql: psycopg.Connection, pool_id: uuid.UUID, tmp_path: Path, db_dsn: str) -> None:
    node = await joined_node(gateway, sql, pool_id, tmp_path)
    new_key = generate_node_key()
    registered = "SELECT public_key FROM compute.node_identities WHERE node_id = %s"
    new_der = new_key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    with running_worker_process(db_dsn, gateway.keys):
        async with node.session(gateway) as session:
            await session.send(session.renew(new_key))  # signed by the registered key, for the new one
            renewed = x509.load_pem_x509_certificate((await session.expect(Certificate)).certificate.encode())
            assert renewed.public_key() == new_key.public_key()
            ca = x509.load_pem_x509_certificate(gateway.ca_path.read_bytes())
            assert str(verify_svid(ca, renewed, sql.execute("SELECT now()").fetchone()[0]).node_id) == node.node_id
            assert sql.execute(registered, (node.node_id,)).fetchone()[0] != new_der  # a certificate is no key change
            # The node says so: its old key signs the new one, which proves itself (pki.key_proof).
            assert session.hello is not None
            session.seq += 1
            body = report_body(node.node_id, session.hello.epoch, session.seq,
                               {"public_key": base64.b64encode(new_der).decode()})
            await session.send(Key(node.signed("node.key", body | {"proof": key_proof(body, new_key)})))
            await eventually(lambda: sql.execute(registered, (node.node_id,)).fetchone()[0] == new_der, 5,
                             "the new key registered")
            # What the node signs with its new key is accepted in this session already.
            inventory = node.inventory
            inventory["renewed"] = True
            await session.send(Inventory(session.report("node.inventory", {"inventory": inventory}, new_key)))
            await eventually(lambda: sql.execute("SELECT inventory ? 'renewed' FROM compute.nodes WHERE node_id = %s",
                                                 (node.node_id,)).fetchone()[0], 5, "the inventory")
            # A long session renews again and again: each renewal presents the newest certificate.
            await session.send(session.renew(new_key, new_key))  # the new key is the registered one now
            again = x509.load_pem_x509_certificate((await session.expect(Certificate)).certificate.encode())
            assert again.serial_number != renewed.serial_number and again.public_key() == new_key.public_key()
    node.key = new_key
    node.write_certificate(renewed.public_bytes(serialization.Encoding.PEM).decode())
    async with node.session(gateway) as session:  # and the new certificate opens sessions
        assert session.hello is not None


def test_sigterm_closes_sessions_as_going_away(db_dsn: str, sql: psycopg.Connection, pool_id: uuid.UUID,
                                               tmp_path: Path) -> None:
    async def scenario() -> None:
        with running_gateway(db_dsn, tmp_path / "keys") as gateway:
            node = await joined_node(gateway, sql, pool_id, tmp_path)
            async with node.session(gateway) as session:
                assert session.hello is not None
                gateway.server.process.send_signal(signal.SIGTERM)
                assert await session.closed_with() == CloseCode.GOING_AWAY
            assert gateway.server.process.wait(15) == 0
            assert connection_of(sql, node.node_id)["connected"] is False
            assert sql.execute("SELECT closed_at IS NOT NULL FROM compute.node_sessions WHERE node_id = %s",
                               (node.node_id,)).fetchone()[0]

    asyncio.run(scenario())

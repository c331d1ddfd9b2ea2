"""The machine CA never sits on a relay (issue 20): a gateway without a CA key, a signer that issues
what the database authorises, revocation at our lifetimes, and the node CA's rotation.

Real processes throughout: `serve signer`, `serve gateway` (no CA key), `serve worker`, `bcd`; the
minimal protocol node of tests/gateway_support.py where a test must misbehave.
"""

from __future__ import annotations

import re
import socket
import ssl
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from websockets.exceptions import ConnectionClosed

from better_compute.daemon.state import NodeState
from better_compute.nodeproto import FENCED, Certificate, Error
from better_compute.pki import IntentSigner, generate_node_key, open_envelope, verify_svid
from better_compute.pki.keys import load_or_create_private_key
from gateway_support import (CLI, REPO, GatewayProcess, TestNode, running_gateway, running_gateway_alone,
                             running_signer, running_worker_process)
from node_support import cdi_devices, join_node, running_bcd, spec_state, wait_until
from test_gateway import anyio_backend, eventually, joined_node, mint_token, pool_id, reserve_now  # noqa: F401

SVID_SECONDS = 60  # the shortest lifetime the signer issues: bcd renews at 2/3, 40 s in
HEARTBEAT_SECONDS = 1.0  # gateway_support starts the gateway with --heartbeat-seconds 1


@pytest.fixture
def gateway(db_dsn: str, tmp_path: Path) -> Iterator[GatewayProcess]:
    with running_gateway(db_dsn, tmp_path / "keys") as process:
        yield process


def ca_private_value(keys: Path) -> bytes:
    key = load_or_create_private_key(keys / "ca.key", lambda: pytest.fail("no CA key"))
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return key.private_numbers().private_value.to_bytes(32, "big")


def memory_holds(pid: int, needle: bytes) -> bool:
    """Whether any readable mapping of process `pid` holds `needle` (read through /proc/PID/mem)."""
    found = False
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as memory:
        for line in maps:
            match = re.match(r"([0-9a-f]+)-([0-9a-f]+) r", line)
            if not match or "[vvar]" in line or "[vsyscall]" in line:
                continue
            start, end = int(match[1], 16), int(match[2], 16)
            try:
                memory.seek(start)
                found = found or needle in memory.read(end - start)
            except OSError:
                continue
    return found


def open_files(pid: int) -> list[str]:
    return [str(link.readlink()) for link in Path(f"/proc/{pid}/fd").iterdir() if link.is_symlink()]


def serves_certificate_of(gateway: GatewayProcess, ca_file: Path) -> bool:
    """Whether the gateway's TLS certificate chains to the CA of `ca_file`."""
    host, port = gateway.url.removeprefix("wss://").rsplit(":", 1)
    context = ssl.create_default_context(cafile=str(ca_file))
    try:
        with socket.create_connection((host, int(port)), timeout=5) as raw, context.wrap_socket(raw, server_hostname=host):
            return True
    except ssl.SSLCertVerificationError:
        return False


def test_a_gateway_given_a_ca_key_refuses_to_start(db_dsn: str, tmp_path: Path) -> None:
    done = subprocess.run([*CLI, "gateway", "--dsn", db_dsn, "--port", "0", "--ca-key", str(tmp_path / "ca.key")],
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 2, done.stderr
    assert "the gateway holds no CA key" in done.stderr
    assert not (tmp_path / "ca.key").exists()


def test_three_bcd_join_and_renew_through_a_gateway_that_holds_no_ca_key(
        db_dsn: str, sql: psycopg.Connection, pool_id: uuid.UUID, tmp_path: Path) -> None:  # noqa: F811
    keys = tmp_path / "keys"
    with (running_signer(db_dsn, keys, ["--svid-lifetime-seconds", str(SVID_SECONDS)]),
          running_gateway_alone(db_dsn, keys) as gateway, running_worker_process(db_dsn, keys)):
        nodes = [join_node(gateway, mint_token(sql, pool_id), tmp_path, f"bcd-{n}") for n in range(3)]
        first = {node.node_id: NodeState(node.state_dir).load().certificate for node in nodes}
        with (running_bcd(gateway, nodes[0].state_dir, nodes[0].hostname, nodes[0].cdi_path) as one,
              running_bcd(gateway, nodes[1].state_dir, nodes[1].hostname, nodes[1].cdi_path),
              running_bcd(gateway, nodes[2].state_dir, nodes[2].hostname, nodes[2].cdi_path)):
            def all_renewed() -> bool:
                return all(NodeState(node.state_dir).load().certificate.serial_number
                           != first[node.node_id].serial_number for node in nodes)
            wait_until(all_renewed, "every node renewed its SVID", one.log, timeout=SVID_SECONDS)
            renewals = sql.execute("SELECT kind, count(*) FROM compute.svid_requests WHERE state = 'issued' "
                                   "AND node_id = ANY(%s) GROUP BY kind ORDER BY kind",
                                   ([node.node_id for node in nodes],)).fetchall()
            assert dict(renewals)["join"] == 3 and dict(renewals)["renew"] >= 3
            assert sql.execute("SELECT count(*) FROM ops.nodes WHERE node_id = ANY(%s) AND connected",
                               ([node.node_id for node in nodes],)).fetchone()[0] == 3
        # The gateway was never given the CA key: it is in none of its files, nor its memory.
        pid = gateway.server.process.pid
        assert not any(path.endswith("ca.key") for path in open_files(pid))
        assert "ca.key" not in Path(f"/proc/{pid}/cmdline").read_text()
        assert not memory_holds(pid, ca_private_value(keys))
        assert memory_holds(pid, gateway.ca_path.read_bytes()[:64])  # the scan does find what it holds


@pytest.mark.anyio
async def test_a_quarantined_node_cannot_renew_and_its_session_is_closed(
        gateway: GatewayProcess, sql: psycopg.Connection, pool_id: uuid.UUID, tmp_path: Path) -> None:  # noqa: F811
    node = await joined_node(gateway, sql, pool_id, tmp_path)
    async with node.session(gateway) as session:
        await session.send(session.renew())
        await session.expect(Certificate)
        sql.execute("SELECT compute.node_flag_set(%s, 'quarantined', 'test', 'failed remediation')", (node.node_id,))
        await session.send(session.renew())
        refused = await session.expect(Error)
        assert refused.code == "ACCESS_DENIED" and "quarantined" in refused.message
        # Closed at the next heartbeat statement: well within session_timeout_seconds.
        assert await session.closed_with(timeout=3 * HEARTBEAT_SECONDS + 5) == FENCED
    assert not sql.execute("SELECT compute.node_connection(%s) -> 'connected'", (node.node_id,)).fetchone()[0]
    async with node.session(gateway, expect_hello=False) as session:
        assert (await session.expect(Error)).code == "ACCESS_DENIED"  # and no new session opens


@pytest.mark.anyio
async def test_a_deleted_node_cannot_renew(gateway: GatewayProcess, sql: psycopg.Connection, pool_id: uuid.UUID,
                                           tmp_path: Path) -> None:  # noqa: F811
    node = await joined_node(gateway, sql, pool_id, tmp_path)
    async with node.session(gateway) as session:
        sql.execute("DELETE FROM compute.atoms WHERE node_id = %s", (node.node_id,))
        sql.execute("DELETE FROM compute.devices WHERE node_id = %s", (node.node_id,))
        sql.execute("DELETE FROM compute.nodes WHERE node_id = %s", (node.node_id,))
        try:
            await session.send(session.renew())
            assert (await session.expect(Error)).code == "FENCED"
        except ConnectionClosed:
            pass  # the heartbeat statement fenced it first
        assert await session.closed_with() == FENCED


@pytest.mark.anyio
async def test_a_renewal_not_signed_by_the_registered_key_is_refused(
        gateway: GatewayProcess, sql: psycopg.Connection, pool_id: uuid.UUID, tmp_path: Path) -> None:  # noqa: F811
    node = await joined_node(gateway, sql, pool_id, tmp_path)
    stranger = generate_node_key()
    async with node.session(gateway) as session:
        # What a gateway would do to get a certificate for its own key: sign the renewal itself.
        await session.send(session.renew(stranger, signer=stranger))
        refused = await session.expect(Error)
        assert refused.code == "ACCESS_DENIED" and "signature" in refused.message
        # The session's epoch is bound too: a renewal signed for another session is refused.
        assert session.hello is not None
        session.hello = type(session.hello)(session.hello.epoch + 1, session.hello.heartbeat_seconds)
        await session.send(session.renew())
        assert "another node, session or key" in (await session.expect(Error)).message
    reasons = sql.execute("SELECT reason FROM ops.svid_requests WHERE node_id = %s AND state = 'refused'",
                          (node.node_id,)).fetchall()
    assert len(reasons) == 2


@pytest.mark.anyio
async def test_the_node_ca_rotates_without_a_disconnect(db_dsn: str, sql: psycopg.Connection,  # noqa: F811
                                                        pool_id: uuid.UUID, tmp_path: Path) -> None:
    keys, new_keys = tmp_path / "keys", tmp_path / "new-keys"
    with running_gateway(db_dsn, keys) as gateway:
        node = await joined_node(gateway, sql, pool_id, tmp_path)
        old_certificate = node.certificate
        with running_signer(db_dsn, new_keys):  # the new CA: published, trusted, not issuing yet
            new_ca = x509.load_pem_x509_certificate((new_keys / "ca.crt").read_bytes())
            fingerprint = new_ca.fingerprint(hashes.SHA256()).hex()
            old_fingerprint = x509.load_pem_x509_certificate((keys / "ca.crt").read_bytes()).fingerprint(
                hashes.SHA256()).hex()
            assert sql.execute("SELECT state FROM ops.node_cas WHERE ca_sha256 = %s", (fingerprint,)).fetchone()[0] \
                == "trusted"
            await eventually(lambda: len(gateway.ca_path.read_bytes().split(b"BEGIN CERTIFICATE")) == 3, 10,
                             "the gateway serving a bundle of both CAs")
            async with node.session(gateway) as session:
                sql.execute("SELECT ops.node_ca_activate(%s)", (fingerprint,))
                await session.send(session.renew())
                renewed = x509.load_pem_x509_certificate((await session.expect(Certificate)).certificate.encode())
                now = sql.execute("SELECT now()").fetchone()[0]
                verify_svid(new_ca, renewed, now)  # issued by the new CA, in the same session
                # A node that joins now gets an SVID of the new CA.
                other = await joined_node(gateway, sql, pool_id, tmp_path, "late-node")
                verify_svid(new_ca, other.certificate, now)
            # A node that has not renewed yet (its SVID of the old CA) still opens sessions.
            async with node.session(gateway) as session:
                assert session.hello is not None
            # The gateway serves a certificate of the new CA too (runbook: wait for it before retiring).
            await eventually(lambda: serves_certificate_of(gateway, new_keys / "ca.crt"), 10,
                             "the gateway's certificate from the new CA")
            node.write_certificate(renewed.public_bytes(serialization.Encoding.PEM).decode())
            async with node.session(gateway) as session:  # the renewed SVID opens sessions
                assert session.hello is not None
            # The old CA leaves the bundle: an SVID of it is refused from now on, with the reason.
            stale = TestNode("stale", 1, tmp_path / "stale", node.key)
            stale.joined = node.joined
            stale.directory.mkdir()
            stale.write_certificate(old_certificate.public_bytes(serialization.Encoding.PEM).decode())
            sql.execute("SELECT ops.node_ca_retire(%s)", (old_fingerprint,))
            await eventually(lambda: len(gateway.ca_path.read_bytes().split(b"BEGIN CERTIFICATE")) == 2, 10,
                             "the gateway serving the new CA only")
            async with stale.session(gateway, expect_hello=False) as session:
                refused = await session.expect(Error)
                assert refused.code == "ACCESS_DENIED" and "join again" in (refused.hint or "")


def certificates_in(path: Path) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(path.read_bytes())


def test_a_bcd_node_follows_a_node_ca_rotation_without_reconnecting(
        db_dsn: str, sql: psycopg.Connection, pool_id: uuid.UUID, tmp_path: Path) -> None:  # noqa: F811
    """The bundle reaches the node in its signed spec (both CAs, then the new one only); the node
    renews from the new CA; its one session stays open throughout."""
    keys, new_keys = tmp_path / "keys", tmp_path / "new-keys"
    lifetime = ["--svid-lifetime-seconds", str(SVID_SECONDS)]
    with (running_signer(db_dsn, keys, lifetime), running_gateway_alone(db_dsn, keys) as gateway,
          running_worker_process(db_dsn, keys)):
        node = join_node(gateway, mint_token(sql, pool_id), tmp_path, "rotating")
        bundle = node.state_dir / "ca.crt"

        def session() -> tuple[int, bool]:
            return sql.execute("SELECT s.epoch, n.connected FROM compute.node_sessions AS s "
                               "JOIN ops.nodes AS n USING (node_id) WHERE node_id = %s", (node.node_id,)).fetchone()

        with running_bcd(gateway, node.state_dir, node.hostname, node.cdi_path) as bcd:
            wait_until(lambda: (sql.execute("SELECT connected FROM ops.nodes WHERE node_id = %s",
                                            (node.node_id,)).fetchone() or (False,))[0], "connected", bcd.log)
            epoch = session()[0]
            with running_signer(db_dsn, new_keys, lifetime):
                new_ca = certificates_in(new_keys / "ca.crt")[0]
                wait_until(lambda: len(certificates_in(bundle)) == 2, "the bundle of both CAs on the node", bcd.log)
                sql.execute("SELECT ops.node_ca_activate(%s)", (new_ca.fingerprint(hashes.SHA256()).hex(),))
                wait_until(lambda: NodeState(node.state_dir).load().certificate.issuer == new_ca.subject
                           and issued_by(NodeState(node.state_dir).load().certificate, new_ca),
                           "the node's SVID from the new CA", bcd.log, timeout=SVID_SECONDS + 10)
                old_ca = certificates_in(keys / "ca.crt")[0]
                sql.execute("SELECT ops.node_ca_retire(%s)", (old_ca.fingerprint(hashes.SHA256()).hex(),))
                wait_until(lambda: certificates_in(bundle) == [new_ca], "the new CA alone on the node", bcd.log)
                assert session() == (epoch, True)  # the same session, connected, from start to end


def issued_by(certificate: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        certificate.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def test_a_bcd_node_follows_an_intent_key_rollover_without_reconnecting(
        db_dsn: str, sql: psycopg.Connection, pool_id: uuid.UUID, tmp_path: Path) -> None:  # noqa: F811
    """Announce the next intent key (nodes accept both), switch the worker to it (a spec signed by it
    is applied), drop the old one (nodes accept only the new one); one session throughout."""
    keys = tmp_path / "keys"
    old_key, new_key = keys / "intent.key", tmp_path / "intent-next.key"
    old, new = IntentSigner(old_key).private_key.public_key(), IntentSigner(new_key).private_key.public_key()
    with running_gateway(db_dsn, keys) as gateway:
        node = join_node(gateway, mint_token(sql, pool_id), tmp_path, "intent-rollover")
        state = NodeState(node.state_dir)

        def applied() -> bool:
            signed, observed = spec_state(sql, node.node_id)
            return signed is not None and signed == observed

        with running_bcd(gateway, node.state_dir, node.hostname, node.cdi_path) as bcd:
            with running_worker_process(db_dsn, keys):
                wait_until(applied, "the first spec applied", bcd.log)
                epoch = sql.execute("SELECT epoch FROM compute.node_sessions WHERE node_id = %s",
                                    (node.node_id,)).fetchone()[0]
                assert state.load().intent_keys == (old,)
            with running_worker_process(db_dsn, keys, ["--intent-also", str(new_key)]):  # 1: announce the next key
                wait_until(lambda: state.load().intent_keys == (old, new), "both keys on the node", bcd.log)
            with running_worker_process(db_dsn, keys, ["--intent-key", str(new_key), "--intent-also", str(old_key)]):
                reserve_now(sql, pool_id)  # 2: a spec signed by the new key is applied
                wait_until(lambda: cdi_devices(node), "the booked GPU in the CDI file", bcd.log)
                signed = sql.execute("SELECT envelope FROM compute.node_specs WHERE node_id = %s",
                                     (node.node_id,)).fetchone()[0]
                open_envelope(signed, new, "spec")
                wait_until(applied, "the spec signed by the new key applied", bcd.log)
            with running_worker_process(db_dsn, keys, ["--intent-key", str(new_key)]):  # 3: the old key is dropped
                wait_until(lambda: state.load().intent_keys == (new,), "the new key alone on the node", bcd.log)
                wait_until(applied, "the spec of the new key alone applied", bcd.log)
            assert sql.execute("SELECT epoch, closed_at IS NULL FROM compute.node_sessions WHERE node_id = %s",
                               (node.node_id,)).fetchone() == (epoch, True)  # one session throughout

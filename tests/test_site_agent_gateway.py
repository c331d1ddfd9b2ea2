"""A site agent's own identity and its gateway session (issue 14 part 3, P5, P14; docs/bare-metal.md):
a certificate from the signer, proven by the agent's registered Ed25519 signing key and decided by
the database, with the SPIFFE ID `spiffe://<trust domain>/site/<site>/agent/<agent id>`; the
gateway's /agent endpoint opens a session only for that certificate's certified key.

Real processes: `serve signer` (the CA key), `serve gateway`, PostgreSQL, real TLS on 127.0.0.1."""

from __future__ import annotations

import ssl
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from psycopg.types.json import Jsonb
from websockets.sync.client import connect

from bare_metal_support import Agent, enroll, gateway_link, register_agent, running_agent, running_emulator, wait_state
from better_compute.nodeproto import AGENT_PATH, SESSION_PATH, AgentHello, Error, Message, decode
from better_compute.pki import CertificateAuthority, IntentSigner, generate_node_key, issue_svid, make_csr
from better_compute.pki.binding import AGENT_CERTIFICATE_PURPOSE, agent_certificate_body, public_key_der
from better_compute.pki.ca import issue_agent_svid
from better_compute.pki.identity import AgentIdentity
from better_compute.pki.keys import private_key_pem
from better_compute.pki.svid import ca_trust_domain, verify_agent_svid
from better_compute.siteagent.agent import SiteAgent
from better_compute.siteagent.dial import GatewayLink, Refused
from fleet import H200_MODEL
from gateway_support import (GatewayProcess, running_gateway, running_gateway_alone, running_signer,
                             running_worker_process)
from node_support import wait_until

TENANT = uuid.UUID("00000000-0000-0000-0000-0000000000b2")


def new_site(sql: psycopg.Connection, name: str) -> uuid.UUID:
    return uuid.UUID(str(sql.execute("SELECT compute.site_create(%s, %s)", (name, TENANT)).fetchone()[0]))


def ask_certificate(sql: psycopg.Connection, agent_id: uuid.UUID, signed_by: Path, named: uuid.UUID | None = None) -> dict[str, Any]:
    """agent_api.certificate_request for a fresh P-256 key, its agent.certificate envelope signed by
    the key at `signed_by` (naming `named`, by default the agent), then the signer's answer."""
    key = generate_node_key()
    der = public_key_der(key.public_key())
    proof = IntentSigner(signed_by).sign(AGENT_CERTIFICATE_PURPOSE, agent_certificate_body(str(named or agent_id), der))
    request_id = sql.execute("SELECT agent_api.certificate_request(%s, 'gw-test', %s, %s, %s)",
                             (agent_id, make_csr(key, "site-agent"), der, Jsonb(proof))).fetchone()[0]
    deadline = time.monotonic() + 20
    while (answer := sql.execute("SELECT node_api.certificate_get(%s)", (request_id,)).fetchone()[0])["state"] == "pending":
        assert time.monotonic() < deadline, "no signer answered"
        time.sleep(0.05)
    return dict(answer) | {"public_key": der}


def test_an_agent_gets_a_certificate_only_with_its_registered_signing_key(
        sql: psycopg.Connection, db_dsn: str, tmp_path: Path) -> None:
    site_id, other_site = new_site(sql, "rack-1"), new_site(sql, "rack-2")
    agent: Agent = register_agent(sql, site_id, tmp_path / "agent.key")
    other: Agent = register_agent(sql, other_site, tmp_path / "other.key")
    with running_signer(db_dsn, tmp_path / "keys"):
        answer = ask_certificate(sql, agent.agent_id, agent.signing_key)
        assert answer["state"] == "issued", answer
        ca = x509.load_pem_x509_certificate((tmp_path / "keys" / "ca.crt").read_bytes())
        certificate = x509.load_pem_x509_certificate(answer["certificate"].encode())
        identity = verify_agent_svid([ca], certificate, datetime.now(timezone.utc))
        assert identity == AgentIdentity(ca_trust_domain(ca), site_id, agent.agent_id)
        assert identity.spiffe_id == f"spiffe://{ca_trust_domain(ca)}/site/{site_id}/agent/{agent.agent_id}"
        certified = sql.execute("SELECT certified_key FROM compute.site_agent_sessions WHERE agent_id = %s",
                                (agent.agent_id,)).fetchone()[0]
        assert bytes(certified) == answer["public_key"]

        # Another agent's key cannot get this agent a certificate, nor can its own proof be moved.
        forged = ask_certificate(sql, agent.agent_id, other.signing_key)
        assert forged["state"] == "refused" and "signature" in forged["reason"], forged
        moved = ask_certificate(sql, other.agent_id, other.signing_key, named=agent.agent_id)
        assert moved == moved | {"state": "refused", "reason": "the signed request names another agent or key"}

        # An agent that is not registered, or has no signing key, gets no request recorded.
        with pytest.raises(psycopg.Error, match="no site agent .* with a signing key"):
            ask_certificate(sql, uuid.uuid4(), agent.signing_key)
    assert sql.execute("SELECT certified_key FROM compute.site_agent_sessions WHERE agent_id = %s",
                       (agent.agent_id,)).fetchone()[0] == certified


# -- the gateway's endpoint for agents ---------------------------------------------------------------

def linked(agent: Agent, gateway: GatewayProcess) -> GatewayLink:
    """The agent's side of the gateway (siteagent/dial.py), for a test to dial with."""
    site_agent = SiteAgent(agent.agent_id, agent.keyring, IntentSigner(gateway.keys / "intent.key").private_key.public_key(),
                           IntentSigner(agent.signing_key), 1)
    return GatewayLink(site_agent, gateway.url, gateway.ca_path, IntentSigner(agent.signing_key))


def dial(gateway: GatewayProcess, tls: ssl.SSLContext, path: str = AGENT_PATH) -> Message:
    """Dial `path` with the client context `tls`: the gateway's first answer."""
    with connect(gateway.url + path, ssl=tls, open_timeout=10) as connection:
        return decode(connection.recv(timeout=10))


def client_tls(gateway: GatewayProcess, certificate: x509.Certificate, key: ec.EllipticCurvePrivateKey, directory: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(gateway.ca_path))
    (directory / "client.crt").write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    (directory / "client.key").write_bytes(private_key_pem(key))
    context.load_cert_chain(directory / "client.crt", directory / "client.key")
    return context


def test_the_agent_endpoint_opens_a_session_only_for_the_agents_certified_key(
        sql: psycopg.Connection, db_dsn: str, tmp_path: Path) -> None:
    site_id, other_site = new_site(sql, "rack-1"), new_site(sql, "rack-2")
    agent, other = register_agent(sql, site_id, tmp_path / "agent.key"), register_agent(sql, other_site, tmp_path / "other.key")
    with running_gateway(db_dsn, tmp_path / "keys") as gateway:
        link = linked(agent, gateway)
        link.certify()
        assert link.tls is not None
        hello = dial(gateway, link.tls)
        assert isinstance(hello, AgentHello) and hello.epoch == 1 and hello.bmc_sessions == 4, hello

        # Another agent's certificate opens that agent's session, never this one's.
        other_link = linked(other, gateway)
        other_link.certify()
        assert other_link.tls is not None
        assert isinstance(dial(gateway, other_link.tls), AgentHello)
        epochs = dict(sql.execute("SELECT agent_id, epoch FROM compute.site_agent_sessions").fetchall())
        assert epochs == {agent.agent_id: 1, other.agent_id: 1}

        # A node's SVID (a valid one of the same CA) is no agent certificate; an agent's is no node's.
        ca = CertificateAuthority.open(gateway.keys / "ca.key", "better-compute.local", datetime.now(timezone.utc))
        node_key = generate_node_key()
        node_svid = x509.load_pem_x509_certificate(issue_svid(ca, make_csr(node_key, "host-1"), uuid.uuid4(),
                                                              datetime.now(timezone.utc)).encode())
        refused = dial(gateway, client_tls(gateway, node_svid, node_key, tmp_path))
        assert isinstance(refused, Error) and refused.code == "ACCESS_DENIED" and "site agent" in refused.message, refused
        as_node = dial(gateway, link.tls, SESSION_PATH)
        assert isinstance(as_node, Error) and as_node.code == "ACCESS_DENIED", as_node

        # A certificate whose key is not the agent's certified one (a newer one was issued; or the
        # CA signed one for a key the database never certified) opens nothing.
        old_tls = link.tls
        link.certify()
        stale = dial(gateway, old_tls)
        assert isinstance(stale, Error) and "not the key certified" in stale.message, stale
        rogue_key = generate_node_key()
        rogue = x509.load_pem_x509_certificate(issue_agent_svid(ca, make_csr(rogue_key, "site-agent"), site_id, agent.agent_id,
                                                                datetime.now(timezone.utc)).encode())
        assert isinstance(dial(gateway, client_tls(gateway, rogue, rogue_key, tmp_path)), Error)

        # Revoked: the agent's signing key replaced; unregistered: no certificate at all.
        assert link.tls is not None and isinstance(dial(gateway, link.tls), AgentHello)
        sql.execute("SELECT ops.site_agent_signing_key_set(%s, %s)", (agent.agent_id, bytes(32)))
        revoked = dial(gateway, link.tls)
        assert isinstance(revoked, Error) and revoked.code == "ACCESS_DENIED", revoked
        with pytest.raises(Refused, match="ACCESS_DENIED"):
            link.certify()
        stranger = linked(Agent(uuid.uuid4(), agent.keyring, agent.log_path, agent.signing_key), gateway)
        with pytest.raises(Refused, match="ACCESS_DENIED: no site agent"):
            stranger.certify()


def test_the_agent_dials_again_when_the_gateway_was_killed_and_goes_on(
        sql: psycopg.Connection, db_dsn: str, tmp_path: Path) -> None:
    site_id, keys = new_site(sql, "rack-1"), tmp_path / "keys"
    pool_id = sql.execute("SELECT compute.pool_create(%s, 'h200', %s)", (site_id, H200_MODEL)).fetchone()[0]
    agent = register_agent(sql, site_id, tmp_path / "agent.key")
    with (running_signer(db_dsn, keys), running_worker_process(db_dsn, keys),
          running_emulator(tmp_path / "bmc") as emulator):
        machine = enroll(sql, agent, pool_id, "bm-01", emulator, "http://127.0.0.1:9/bcd.iso")
        with running_gateway_alone(db_dsn, keys) as gateway:
            port = gateway.url.rsplit(":", 1)[1]
            with running_agent([*gateway_link(gateway), "--redial-seconds", "1"], agent, keys / "intent.key"):
                sql.execute("SELECT ops.machine_manage('bm-01')")
                wait_state(sql, machine, "manageable", 60, agent)
                gateway.server.process.kill()  # no goodbye: the agent finds out by itself
                gateway.server.process.wait()
                wait_until(lambda: "no session" in agent.log(), "the agent noticed", agent.log)
                with running_gateway_alone(db_dsn, keys, ["--port", port]):
                    sql.execute("SELECT ops.machine_manage('bm-01')")  # verify once more, through the new gateway
                    wait_state(sql, machine, "manageable", 60, agent)
    assert sql.execute("SELECT epoch, gateway FROM ops.site_agent_sessions WHERE agent_id = %s",
                       (agent.agent_id,)).fetchone() == (2, "gw-test")
    assert [kind for (kind,) in sql.execute("SELECT kind FROM compute.bmc_ops WHERE machine_id = %s AND state = 'succeeded'",
                                            (machine,)).fetchall()] == ["verify", "verify"]
    assert "LISTEN bc_bmc_ops" not in agent.log() and "fallback" not in agent.log()
    agent.log_path.unlink(missing_ok=True)

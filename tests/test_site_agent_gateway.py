"""A site agent's own identity (issue 14 part 3, P5, P14; docs/bare-metal.md): a certificate from
the signer, proven by the agent's registered Ed25519 signing key and decided by the database, with
the SPIFFE ID `spiffe://<trust domain>/site/<site>/agent/<agent id>`.

Real processes: `serve signer` (the CA key), PostgreSQL; the gateway's calls are made here as the
gateway makes them (agent_api)."""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cryptography import x509
from psycopg.types.json import Jsonb

from bare_metal_support import Agent, register_agent
from better_compute.pki import IntentSigner, generate_node_key, make_csr
from better_compute.pki.binding import AGENT_CERTIFICATE_PURPOSE, agent_certificate_body, public_key_der
from better_compute.pki.identity import AgentIdentity
from better_compute.pki.svid import ca_trust_domain, verify_agent_svid
from gateway_support import running_signer

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


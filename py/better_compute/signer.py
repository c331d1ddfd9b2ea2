"""The signer (issue 20, P14): the only process that holds the node CA's key. Gateways record
certificate requests in the database (sql/650_svid_issuance.sql) and wait; the signer reads the
pending ones (worker_api.svid_requests_due), checks what only it can check, signs, and hands each
certificate back (worker_api.svid_issued), where the database decides once more whether it
authorises that issuance now: the token was consumed by this node with this key, the node exists
and is not quarantined, the renewal's session is still current.

What the signer checks itself: the CSR (its signature, its key type) and that its key is the key
the request names; for a renewal, the node's `node.renew` envelope with the key the node
registered (PostgreSQL 15 verifies no ECDSA signature). The SPIFFE ID comes from the request's
node id, which the database gave, never from the CSR.

It runs in `serve signer` (alone) or beside the worker (`serve worker --ca-key`). At start it
publishes its CA certificate (worker_api.node_ca_publish): the first CA becomes the active one,
a later one is trusted until an operator activates it (docs/nodes.md, CA rotation). A signer
whose CA is not the active one answers nothing: another signer, holding the active CA, does.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from psycopg import sql

from better_compute.clock import Clock
from better_compute.db import Database
from better_compute.pki import (DEFAULT_LIFETIME, CertificateAuthority, PkiError, issue_svid, open_envelope,
                                read_csr)
from better_compute.pki.binding import AGENT_CERTIFICATE_PURPOSE, RENEW_PURPOSE, public_key_der
from better_compute.pki.ca import issue_agent_svid, issue_server_certificate
from better_compute.pki.signing import load_der_public_key
from better_compute.pki.svid import MAX_LIFETIME

log = logging.getLogger(__name__)

REQUEST_CHANNEL = "bc_svid_request"
REQUESTS_PER_ROUND = 100
GATEWAY_CERT_LIFETIME = MAX_LIFETIME  # a gateway's server certificate; it asks again at 2/3


def ca_sha256(certificate: x509.Certificate) -> bytes:
    return hashlib.sha256(certificate.public_bytes(serialization.Encoding.DER)).digest()


@dataclass
class Signer:
    db: Database
    ca: CertificateAuthority
    clock: Clock
    svid_lifetime: timedelta = DEFAULT_LIFETIME
    poll_seconds: float = 1.0

    def __post_init__(self) -> None:
        self.stopping = threading.Event()
        self.fingerprint = ca_sha256(self.ca.certificate)

    def publish(self) -> str:
        """Put this signer's CA into the trust bundle; answers its state (active, trusted, retired)."""
        pem = self.ca.certificate.public_bytes(serialization.Encoding.PEM).decode("ascii")
        state: str = self.db.call("worker_api.node_ca_publish", pem, self.fingerprint)
        log.info("published: node CA %s is %s", self.fingerprint.hex(), state)
        return state

    def active(self) -> bool:
        states: dict[str, str] = self.db.call("worker_api.node_cas")
        return states.get(self.fingerprint.hex()) == "active"

    def round(self) -> int:
        """Decide the pending requests (a bounded batch); answers how many. Nothing when this
        signer's CA is not the active one."""
        if not self.active():
            return 0
        requests: list[dict[str, Any]] = self.db.call("worker_api.svid_requests_due", REQUESTS_PER_ROUND)
        for request in requests:
            self.decide(request)
        return len(requests)

    def decide(self, request: dict[str, Any]) -> None:
        request_id = UUID(request["request_id"])
        try:
            verified_key, pem = self.sign(request)
        except PkiError as refused:
            log.info("certificate request %s (%s) refused: %s", request_id, request["kind"], refused)
            self.db.call("worker_api.svid_refused", request_id, str(refused)[:1000])
            return
        state = self.db.call("worker_api.svid_issued", request_id, verified_key, pem, self.fingerprint)
        log.info("certificate request %s (%s, node %s, gateway %s): %s", request_id, request["kind"],
                 request["node_id"], request["gateway"], state)

    def sign(self, request: dict[str, Any]) -> tuple[bytes | None, str]:
        """(the node key the request was verified with, the certificate PEM); PkiError to refuse."""
        csr = read_csr(request["csr"])
        if public_key_der(csr.public_key) != base64.b64decode(request["public_key"]):
            raise PkiError("the CSR's key is not the key the request names")
        now = self.clock.now()
        if request["kind"] == "gateway":
            certificate = issue_server_certificate(self.ca, csr.public_key, request["gateway"], request["names"], now,
                                                   GATEWAY_CERT_LIFETIME)
            return None, certificate.public_bytes(serialization.Encoding.PEM).decode("ascii")
        if request["kind"] == "agent":
            return self.sign_agent(request, now)
        verified_key = None
        if request["kind"] == "renew":
            if not request["registered_key"]:
                raise PkiError("the node has no registered key")
            verified_key = base64.b64decode(request["registered_key"])
            open_envelope(request["proof"], load_der_public_key(verified_key), RENEW_PURPOSE)
        return verified_key, issue_svid(self.ca, request["csr"], UUID(request["node_id"]), now, self.svid_lifetime)

    def sign_agent(self, request: dict[str, Any], now: datetime) -> tuple[bytes, str]:
        """A site agent's certificate: its agent.certificate envelope verified with the Ed25519
        signing key the agent registered (the database checks once more that it is that key and
        that the envelope names this agent and key)."""
        if not request["agent_signing_key"]:
            raise PkiError("the site agent has no registered signing key")
        verified_key = base64.b64decode(request["agent_signing_key"])
        open_envelope(request["proof"], Ed25519PublicKey.from_public_bytes(verified_key), AGENT_CERTIFICATE_PURPOSE)
        return verified_key, issue_agent_svid(self.ca, request["csr"], UUID(request["site_id"]), UUID(request["agent_id"]),
                                              now, self.svid_lifetime)

    def stop(self) -> None:
        self.stopping.set()

    def run(self) -> None:
        """Publish the CA, then decide requests as they come (LISTEN bc_svid_request, and a poll)
        until stop()."""
        self.publish()
        while not self.stopping.is_set():
            try:
                with self.db.connect() as conn:
                    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(REQUEST_CHANNEL)))
                    while not self.stopping.is_set():
                        self.guarded_round()
                        for _ in conn.notifies(timeout=self.poll_seconds, stop_after=1):
                            pass
            except psycopg.Error as error:
                log.warning("signer: database connection lost (%s); again in %.1f s", error, self.poll_seconds)
                self.stopping.wait(self.poll_seconds)

    def guarded_round(self) -> None:
        try:
            while self.round() == REQUESTS_PER_ROUND:
                pass
        except psycopg.Error:
            raise
        except Exception:
            log.exception("signer: a round failed; again at the next poll")

"""What binds a node's requests to its key, so that the gateway relaying them cannot reuse them
(P14, issue 20).

Join: the node never sends its token. It sends `token_ref` = sha256(sha256(token)) (which token)
and `proof` = HMAC-SHA256(key = sha256(token), "bc-v1\\njoin\\n" || its public key, DER). The
database keeps sha256(token) and checks both (node_api.join_request); a gateway sees neither the
token nor its hash, so it cannot join a key of its own with a token it relayed.

Renewal: the node signs a `node.renew` envelope with its registered key over its node id, the
session epoch and the SHA-256 of the key to certify; the signer verifies it against the key the
database holds, the database checks what it names (sql/650_svid_issuance.sql).

A site agent's certificate: the agent signs an `agent.certificate` envelope with its registered
Ed25519 signing key over its agent id and the SHA-256 of the (P-256) key to certify; the signer
verifies it with the registered key, the database checks what it names.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes

JOIN_PROOF_PREFIX = b"bc-v1\njoin\n"
RENEW_PURPOSE = "node.renew"
AGENT_CERTIFICATE_PURPOSE = "agent.certificate"


def public_key_der(key: PublicKeyTypes) -> bytes:
    """A public key as the database keeps it: DER SubjectPublicKeyInfo."""
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def join_token_binding(token: str, public_key: bytes) -> tuple[str, str]:
    """(token_ref, proof), base64, for a join with `token` by the key of DER `public_key`."""
    hashed = hashlib.sha256(token.encode("utf-8")).digest()
    proof = hmac.new(hashed, JOIN_PROOF_PREFIX + public_key, hashlib.sha256).digest()
    return (base64.b64encode(hashlib.sha256(hashed).digest()).decode("ascii"),
            base64.b64encode(proof).decode("ascii"))


def renewal_body(node_id: str, epoch: int, public_key: bytes) -> dict[str, Any]:
    """What a node signs (RENEW_PURPOSE) to renew under session `epoch` for the key of DER `public_key`."""
    return {"node_id": node_id, "epoch": epoch, "public_key_sha256": hashlib.sha256(public_key).hexdigest()}


def agent_certificate_body(agent_id: str, public_key: bytes) -> dict[str, Any]:
    """What a site agent signs (AGENT_CERTIFICATE_PURPOSE) with its registered Ed25519 key to ask for
    a certificate for the key of DER `public_key` (sql/710_agent_sessions.sql checks what it names)."""
    return {"agent_id": agent_id, "public_key_sha256": hashlib.sha256(public_key).hexdigest()}

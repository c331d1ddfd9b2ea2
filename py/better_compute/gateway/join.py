"""Path /join: a node with a join token becomes a member of the token's pool and gets its SVID
(docs/architecture.md §11, docs/nodes.md).

The node has no certificate yet, so this is the one path without a client certificate. What it
proves instead: it holds the key of its CSR (the CSR's own signature, and the inventory envelope
signed with the same key: the inventory cannot be swapped for another on the way), and it holds a
token bound to that key (pki/binding.py: the gateway sees a reference and an HMAC over the key,
never the token, so it cannot spend it on a key of its own; node_api.join_request consumes it in
one statement: of two joins with one token, one wins; every invalid token is the same
ACCESS_DENIED). The database records the SVID request; the signer, not this gateway, issues it
(issue 20); the SPIFFE ID carries the node id the database gave, never anything the node asked for.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
from dataclasses import dataclass
from pathlib import Path
from uuid import UUID

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from websockets.frames import CloseCode

from better_compute.db import AsyncDatabase, ContractError
from better_compute.gateway.channel import Channel
from better_compute.gateway.issuance import Issuance
from better_compute.gateway.metrics import GatewayMetrics
from better_compute.nodeproto import INVALID_ARGUMENT, JOIN_PATH, Join, Joined, ProtocolError, intent_key_text
from better_compute.pki import IntentSigner, PkiError, ca_trust_domain, load_public_key, open_envelope, read_csr
from better_compute.pki.binding import public_key_der

log = logging.getLogger(__name__)

JOIN_SECONDS = 30.0  # how long a node may take to send its join after connecting


def intent_public_key(path: Path) -> Ed25519PublicKey:
    """The intent key nodes are given at join. The gateway needs only its public half: in
    production give it a PEM public key file; on one machine it may share the worker's private key
    file (created when missing, like the worker does), of which it reads the public half."""
    if path.exists() and b"PUBLIC KEY" in path.read_bytes():
        key = load_public_key(path.read_bytes())
        if not isinstance(key, Ed25519PublicKey):
            raise PkiError(f"{path} is not an Ed25519 public key")
        return key
    return IntentSigner(path).private_key.public_key()


def bundle_pem(bundle: list[x509.Certificate]) -> str:
    return "".join(ca.public_bytes(serialization.Encoding.PEM).decode("ascii") for ca in bundle)


def base64_field(value: str, name: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ProtocolError(INVALID_ARGUMENT, f"{name} is not base64") from None


@dataclass(frozen=True)
class Joiner:
    db: AsyncDatabase
    issuance: Issuance
    gateway: str
    intent_key: Ed25519PublicKey
    metrics: GatewayMetrics

    async def handle(self, channel: Channel) -> None:
        """One join per connection: answered with `joined`, or an error; then the connection closes."""
        try:
            async with asyncio.timeout(JOIN_SECONDS):
                message = await channel.receive()
            if not isinstance(message, Join):
                raise ProtocolError(INVALID_ARGUMENT, f"send join on {JOIN_PATH}, not {message.TYPE}")
            await channel.send(await self.join(message))
        except (ContractError, ProtocolError, PkiError) as refused:
            log.info("join from %s refused: %s", channel.peer, refused)
            await channel.refuse(refused)
        except TimeoutError:
            await channel.connection.close(CloseCode.POLICY_VIOLATION, "no join message in time")

    async def join(self, message: Join) -> Joined:
        csr = read_csr(message.csr)
        inventory = open_envelope(message.inventory, csr.public_key, "inventory")
        answer = await self.db.call("node_api.join_request", base64_field(message.token_ref, "token_ref"),
                                    base64_field(message.proof, "proof"), inventory, public_key_der(csr.public_key),
                                    message.csr, self.gateway)
        node_id = UUID(answer["node_id"])
        certificate = await self.issuance.certificate(UUID(answer["request_id"]))
        bundle = await self.issuance.bundle()
        self.metrics.joins.inc()
        log.info("node %s (%s) joined pool %s", node_id, csr.hostname, answer["pool_id"])
        return Joined(str(node_id), certificate, bundle_pem(bundle), intent_key_text(self.intent_key),
                      ca_trust_domain(bundle[0]))

"""The daemon's `--state-dir`: who this node is and whom it trusts, kept across restarts.

    node.key     the node's private key (P-256, mode 0600): its SVID's key and what it signs with
    node.crt     its X.509-SVID, replaced on every renewal
    ca.crt       the node CA (what the gateway's server certificate chains to)
    intent.pub   the control plane's Ed25519 intent key (PEM): specs and commands must verify with it
    node.json    {node_id, trust_domain, hostname}: written last at join, so it means "joined"

The command journal (journal.py) lives in the same directory. Every file is replaced atomically
(files.write_atomically): a power cut leaves the old certificate or the new one, never half of one.
What the gateway hands over is checked before it is kept: the certificate must be an SVID of the
CA, for this node's key and node id; a daemon never stores an identity it cannot use.
"""

from __future__ import annotations

import dataclasses
import json
import re
import ssl
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from uuid import UUID

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from better_compute.daemon.files import write_atomically
from better_compute.nodeproto import Joined, read_intent_key
from better_compute.pki import (PkiError, ca_trust_domain, generate_node_key, load_or_create_private_key,
                                load_public_key, verify_svid)

DEFAULT_STATE_DIR = Path("/var/lib/better-compute")
KEY_FILE = "node.key"
CERT_FILE = "node.crt"
CA_FILE = "ca.crt"
INTENT_KEY_FILE = "intent.pub"
NODE_FILE = "node.json"


PEM_PUBLIC_KEY = re.compile(rb"-----BEGIN PUBLIC KEY-----.+?-----END PUBLIC KEY-----\n?", re.DOTALL)


def intent_keys_pem(keys: tuple[Ed25519PublicKey, ...]) -> bytes:
    return b"".join(key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
                    for key in keys)


class NotJoined(RuntimeError):
    """The state directory holds no identity yet: run `bcd join` first."""


@dataclass(frozen=True)
class Credentials:
    """Everything the daemon needs to hold a session, loaded from the state directory."""

    node_id: UUID
    trust_domain: str
    hostname: str  # what the node's CSRs name (for people and logs)
    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate
    ca: list[x509.Certificate]  # the trust bundle: every node CA trusted now (two during a rotation)
    intent_keys: tuple[Ed25519PublicKey, ...]  # what specs and commands may be signed with (two during a rollover)

    @property
    def intent_key(self) -> Ed25519PublicKey:
        """The first intent key (the one the node got at join, until a rollover replaced it)."""
        return self.intent_keys[0]


class NodeState:
    """The files of one node's state directory."""

    def __init__(self, directory: str | Path = DEFAULT_STATE_DIR) -> None:
        self.directory = Path(directory)

    def path(self, name: str) -> Path:
        return self.directory / name

    @property
    def joined(self) -> bool:
        return self.path(NODE_FILE).exists()

    def key(self) -> ec.EllipticCurvePrivateKey:
        """The node's key, made (mode 0600, in a 0700 directory) the first time it is asked for."""
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        key = load_or_create_private_key(self.path(KEY_FILE), generate_node_key)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise PkiError(f"{self.path(KEY_FILE)} does not hold the node's ECDSA key")
        return key

    def save_joined(self, joined: Joined, hostname: str, now: datetime) -> Credentials:
        """Keep what the gateway answered to `join`, after checking it names this node's key."""
        ca = self._bundle(joined.ca)
        intent_key = read_intent_key(joined.intent_key)
        credentials = self._checked(UUID(joined.node_id), joined.trust_domain, hostname,
                                    self._certificate(joined.certificate), ca, (intent_key,), now)
        write_atomically(self.path(CA_FILE), joined.ca.encode("ascii"))
        write_atomically(self.path(INTENT_KEY_FILE), intent_keys_pem((intent_key,)))
        write_atomically(self.path(CERT_FILE), joined.certificate.encode("ascii"))
        write_atomically(self.path(NODE_FILE), (json.dumps(
            {"node_id": joined.node_id, "trust_domain": joined.trust_domain, "hostname": hostname}) + "\n").encode())
        return credentials

    def save_certificate(self, credentials: Credentials, pem: str, now: datetime) -> Credentials:
        """Keep a renewed SVID (the next connection presents it), after the same checks as at join."""
        renewed = self._checked(credentials.node_id, credentials.trust_domain, credentials.hostname,
                                self._certificate(pem), credentials.ca, credentials.intent_keys, now)
        write_atomically(self.path(CERT_FILE), pem.encode("ascii"))
        return renewed

    def save_bundle(self, credentials: Credentials, pem: str) -> Credentials:
        """Keep a new trust bundle (it came in a spec the control plane signed): the gateway is checked
        against it from the next connection on, renewed SVIDs at once."""
        bundle = self._bundle(pem)
        write_atomically(self.path(CA_FILE), pem.encode("ascii"))
        return dataclasses.replace(credentials, ca=bundle)

    def save_intent_keys(self, credentials: Credentials, keys: tuple[Ed25519PublicKey, ...]) -> Credentials:
        """Keep the intent keys a signed spec lists (an intent key rollover)."""
        write_atomically(self.path(INTENT_KEY_FILE), intent_keys_pem(keys))
        return dataclasses.replace(credentials, intent_keys=keys)

    def bundle_text(self) -> str:
        return self.path(CA_FILE).read_text("ascii")

    def session_tls(self) -> ssl.SSLContext:
        """The TLS context of a session: the gateway must chain to the node CA and match the host
        name dialled (its certificate names its hosts); this node presents its current SVID."""
        context = ssl.create_default_context(cafile=self.path(CA_FILE))
        context.load_cert_chain(self.path(CERT_FILE), self.path(KEY_FILE))
        return context

    def load(self) -> Credentials:
        """The node's credentials; NotJoined when `bcd join` has not completed here."""
        try:
            node = json.loads(self.path(NODE_FILE).read_bytes())
        except FileNotFoundError:
            raise NotJoined(f"{self.directory} holds no node identity; run `bcd join` first") from None
        intent_keys = []
        for block in PEM_PUBLIC_KEY.findall(self.path(INTENT_KEY_FILE).read_bytes()):
            intent_key = load_public_key(block)
            if not isinstance(intent_key, Ed25519PublicKey):
                raise PkiError(f"{self.path(INTENT_KEY_FILE)} holds a key that is not an Ed25519 public key")
            intent_keys.append(intent_key)
        if not intent_keys:
            raise PkiError(f"{self.path(INTENT_KEY_FILE)} holds no intent key")
        return Credentials(UUID(node["node_id"]), node["trust_domain"], node["hostname"], self.key(),
                           self._certificate(self.path(CERT_FILE).read_text("ascii")),
                           self._bundle(self.bundle_text()), tuple(intent_keys))

    def _checked(self, node_id: UUID, trust_domain: str, hostname: str, certificate: x509.Certificate,
                 ca: list[x509.Certificate], intent_keys: tuple[Ed25519PublicKey, ...], now: datetime) -> Credentials:
        identity = verify_svid(ca, certificate, now)
        if (identity.node_id, identity.trust_domain) != (node_id, trust_domain):
            raise PkiError(f"the certificate is for {identity.spiffe_id}, not node {node_id} of {trust_domain}")
        key = self.key()
        if certificate.public_key() != key.public_key():
            raise PkiError("the certificate is not for this node's key")
        return Credentials(node_id, trust_domain, hostname, key, certificate, ca, intent_keys)

    @staticmethod
    def _bundle(pem: str) -> list[x509.Certificate]:
        try:
            bundle = x509.load_pem_x509_certificates(pem.encode("ascii"))
        except ValueError as error:
            raise PkiError(f"not a bundle of PEM certificates: {error}") from None
        for ca in bundle:
            ca_trust_domain(ca)  # each is a node CA (one URI SAN, spiffe://{trust-domain})
        return bundle

    @staticmethod
    def _certificate(pem: str) -> x509.Certificate:
        try:
            return x509.load_pem_x509_certificate(pem.encode("ascii"))
        except ValueError as error:
            raise PkiError(f"not a PEM certificate: {error}") from None

"""SPIFFE IDs of nodes: `spiffe://{trust-domain}/node/{node_id}` (docs/architecture.md §11), and of
site agents: `spiffe://{trust-domain}/site/{site_id}/agent/{agent_id}` (docs/bare-metal.md).

The SPIFFE ID in an SVID's one URI SAN is the node's whole identity: nothing else in a certificate
(its subject, a DNS name) names a node. IDs are parsed strictly, in their one canonical spelling
(lowercase trust domain, lowercase hyphenated UUID), so that two spellings never name one node.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from uuid import UUID

from cryptography import x509

from better_compute.pki.keys import PkiError

SCHEME = "spiffe://"
NODE_PATH = "node"
SITE_PATH, AGENT_PATH = "site", "agent"
TRUST_DOMAIN_CHARS_MAX = 253
# Lowercase DNS labels: a subset of what SPIFFE allows in a trust domain ([a-z0-9._-]).
TRUST_DOMAIN = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*")


@dataclass(frozen=True)
class NodeIdentity:
    trust_domain: str
    node_id: UUID

    @property
    def spiffe_id(self) -> str:
        return f"{SCHEME}{self.trust_domain}/{NODE_PATH}/{self.node_id}"


@dataclass(frozen=True)
class AgentIdentity:
    trust_domain: str
    site_id: UUID
    agent_id: UUID

    @property
    def spiffe_id(self) -> str:
        return f"{SCHEME}{self.trust_domain}/{SITE_PATH}/{self.site_id}/{AGENT_PATH}/{self.agent_id}"


def check_trust_domain(trust_domain: str) -> str:
    if len(trust_domain) > TRUST_DOMAIN_CHARS_MAX or not TRUST_DOMAIN.fullmatch(trust_domain):
        raise PkiError(f"trust domain {trust_domain!r:.300} is not lowercase DNS labels joined by dots "
                       f"(at most {TRUST_DOMAIN_CHARS_MAX} characters)")
    return trust_domain


def node_identity(trust_domain: str, node_id: UUID) -> NodeIdentity:
    if not isinstance(node_id, UUID):
        raise PkiError(f"a node id is a UUID, not {type(node_id).__name__}")
    return NodeIdentity(check_trust_domain(trust_domain), node_id)


def parse_node_spiffe_id(uri: str) -> NodeIdentity:
    """The node a SPIFFE ID names; anything but `spiffe://{trust-domain}/node/{uuid}` is refused."""
    if not uri.startswith(SCHEME):
        raise PkiError(f"{uri!r:.300} is not a SPIFFE ID")
    parts = uri[len(SCHEME):].split("/")
    if len(parts) != 3 or parts[1] != NODE_PATH:
        raise PkiError(f"{uri!r:.300} is not a node's SPIFFE ID ({SCHEME}{{trust-domain}}/{NODE_PATH}/{{uuid}})")
    trust_domain, _, node_text = parts
    return node_identity(trust_domain, canonical_uuid(uri, node_text))


def canonical_uuid(uri: str, text: str) -> UUID:
    """The UUID `text` of the SPIFFE ID `uri`, when it is written as a lowercase hyphenated UUID."""
    try:
        value = UUID(text)
    except ValueError:
        raise PkiError(f"{uri!r:.300}: {text!r} is not a UUID") from None
    if str(value) != text:
        raise PkiError(f"{uri!r:.300}: {text!r} is not written as a lowercase hyphenated UUID")
    return value


def parse_agent_spiffe_id(uri: str) -> AgentIdentity:
    """The site agent a SPIFFE ID names; anything but `spiffe://{trust-domain}/site/{uuid}/agent/{uuid}`
    (a node's ID among them) is refused."""
    parts = uri[len(SCHEME):].split("/") if uri.startswith(SCHEME) else []
    if len(parts) != 5 or parts[1] != SITE_PATH or parts[3] != AGENT_PATH:
        raise PkiError(f"{uri!r:.300} is not a site agent's SPIFFE ID "
                       f"({SCHEME}{{trust-domain}}/{SITE_PATH}/{{uuid}}/{AGENT_PATH}/{{uuid}})")
    return AgentIdentity(check_trust_domain(parts[0]), canonical_uuid(uri, parts[2]), canonical_uuid(uri, parts[4]))


def uri_sans(cert: x509.Certificate) -> list[str]:
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return names.get_values_for_type(x509.UniformResourceIdentifier)


def the_uri_san(cert: x509.Certificate) -> str:
    uris = uri_sans(cert)
    if len(uris) != 1:
        raise PkiError(f"an SVID has exactly one URI SAN, this certificate has {len(uris)}")
    return uris[0]


def spiffe_id_of(cert: x509.Certificate) -> NodeIdentity:
    """The node a certificate names, read (not verified: see svid.verify_svid) from its one URI SAN."""
    return parse_node_spiffe_id(the_uri_san(cert))


def agent_spiffe_id_of(cert: x509.Certificate) -> AgentIdentity:
    """The site agent a certificate names, read (not verified: see svid.verify_agent_svid) from its one URI SAN."""
    return parse_agent_spiffe_id(the_uri_san(cert))

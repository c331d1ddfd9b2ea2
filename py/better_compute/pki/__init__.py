"""The machine PKI (docs/architecture.md §11) and signed messages (P14).

Nodes get short-lived X.509-SVIDs (`spiffe://{trust-domain}/node/{node_id}`) from the control
plane's CA, use them as TLS client certificates when they dial out, and sign what they send up
with the same key; the control plane signs intent going down with its own key (signing.py).
"""

from better_compute.pki.ca import CertificateAuthority, CertificateSigner, SvidRequest, issue_svid, renew_svid
from better_compute.pki.csr import NodeCsr, make_csr, read_csr
from better_compute.pki.identity import NodeIdentity, parse_node_spiffe_id, spiffe_id_of
from better_compute.pki.keys import PkiError, generate_node_key, load_or_create_private_key
from better_compute.pki.signing import (EnvelopeError, IntentSigner, canonical, load_public_key, open_envelope,
                                        sign_envelope)
from better_compute.pki.svid import DEFAULT_LIFETIME, MAX_LIFETIME, ca_trust_domain, renew_at, verify_svid

__all__ = [
    "DEFAULT_LIFETIME", "MAX_LIFETIME", "CertificateAuthority", "CertificateSigner", "EnvelopeError", "IntentSigner",
    "NodeCsr", "NodeIdentity", "PkiError", "SvidRequest", "ca_trust_domain", "canonical", "generate_node_key",
    "issue_svid", "load_or_create_private_key", "load_public_key", "make_csr", "open_envelope",
    "parse_node_spiffe_id", "read_csr", "renew_at", "renew_svid", "sign_envelope", "spiffe_id_of", "verify_svid",
]

"""Certificate signing requests: the node proves it holds its key; the control plane decides the rest.

A CSR carries the node's public key and, in its subject's common name, its hostname (for people
and logs). Nothing else in it is used: the SVID's SPIFFE ID, lifetime and usages are the control
plane's (ca.issue_svid), never the node's to ask for.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from better_compute.pki.keys import PkiError, check_certificate_key

CSR_BYTES_MAX = 8192
HOSTNAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # 64: the most a common name may hold


@dataclass(frozen=True)
class NodeCsr:
    """A CSR that passed read_csr: signed by the key it carries, which is of an allowed type."""

    csr: x509.CertificateSigningRequest
    public_key: ec.EllipticCurvePublicKey
    hostname: str


def check_hostname(hostname: str) -> str:
    if not HOSTNAME.fullmatch(hostname):
        raise PkiError(f"hostname {hostname!r:.100} is not 1-64 letters, digits, '.', '_' or '-'")
    return hostname


def make_csr(key: ec.EllipticCurvePrivateKey, hostname: str) -> str:
    """The node's CSR (PEM) for its key."""
    check_certificate_key(key.public_key())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, check_hostname(hostname))])
    csr = x509.CertificateSigningRequestBuilder().subject_name(subject).sign(key, hashes.SHA256())
    return csr.public_bytes(serialization.Encoding.PEM).decode("ascii")


def read_csr(csr_pem: str | bytes) -> NodeCsr:
    """Parse and check a CSR from a node: size, signature, key type, hostname."""
    raw = csr_pem.encode("ascii", "replace") if isinstance(csr_pem, str) else csr_pem
    if len(raw) > CSR_BYTES_MAX:
        raise PkiError(f"the CSR has {len(raw)} bytes, more than {CSR_BYTES_MAX}")
    try:
        csr = x509.load_pem_x509_csr(raw)
    except ValueError as error:
        raise PkiError(f"not a PEM certificate signing request: {error}") from None
    try:
        public_key = check_certificate_key(csr.public_key())
        if not isinstance(csr.signature_hash_algorithm, hashes.SHA256):
            raise PkiError("the CSR must be signed with ECDSA and SHA-256")
    except UnsupportedAlgorithm as error:
        raise PkiError(f"the CSR uses an unsupported algorithm: {error}") from None
    if not csr.is_signature_valid:
        raise PkiError("the CSR's signature does not verify with the key it carries")
    names = csr.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if len(names) != 1 or not isinstance(names[0].value, str):
        raise PkiError("the CSR's subject must have one common name, the node's hostname")
    return NodeCsr(csr, public_key, check_hostname(names[0].value))

"""The control plane's node CA: it signs X.509-SVIDs for nodes that joined (docs/architecture.md §11).

Signing goes through the CertificateSigner port, so an HSM, a cloud KMS or a managed CA can take
the place of the embedded key file (`CertificateAuthority`). Whatever signs, the decisions are made
here: the CSR is checked (csr.read_csr), the SPIFFE ID, validity and profile come from the control
plane, and the certificate that comes back is verified against the request before anyone sees it.

Renewal takes the node id from the certificate the node presents (verified here), never from the
request: a node can renew itself and nobody else.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Protocol
from uuid import UUID

from asn1crypto import x509 as asn1_x509
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from better_compute.pki.csr import check_hostname, read_csr
from better_compute.pki.identity import SCHEME, AgentIdentity, NodeIdentity, check_trust_domain, node_identity
from better_compute.pki.keys import (CERTIFICATE_CURVE, PkiError, check_certificate_key, create_file_once,
                                     load_or_create_private_key)
from better_compute.pki.pkcs11 import Pkcs11CaKey
from better_compute.pki.svid import (BACKDATE, DEFAULT_LIFETIME, ca_trust_domain, svid_validity, utc_seconds,
                                    verify_agent_svid, verify_svid)

CA_LIFETIME = timedelta(days=3650)
CA_NAME = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Better Compute node CA")])


@dataclass(frozen=True)
class SvidRequest:
    """What a signer is asked to certify: the (checked) CSR's key under the node's SPIFFE ID, for
    exactly this period. The CSR itself is passed on for signers (managed CAs) that want it."""

    csr: x509.CertificateSigningRequest
    identity: NodeIdentity | AgentIdentity
    not_before: datetime
    not_after: datetime


class CertificateSigner(Protocol):
    @property
    def certificate(self) -> x509.Certificate:
        """The CA certificate SVIDs chain to: the trust bundle of its trust domain (ca_trust_domain)."""

    def issue(self, request: SvidRequest) -> x509.Certificate:
        """An X.509-SVID (svid.py's profile) for the request's key, SPIFFE ID and validity period."""


CaKey = ec.EllipticCurvePrivateKey | Pkcs11CaKey


def sign_certificate(builder: x509.CertificateBuilder, key: CaKey) -> x509.Certificate:
    """The certificate of `builder`, signed by the CA key (ECDSA, SHA-256), in a file or a PKCS#11 token."""
    if isinstance(key, ec.EllipticCurvePrivateKey):
        return builder.sign(key, hashes.SHA256())
    # cryptography signs only with keys it holds: the to-be-signed part is made with a throwaway key
    # of the same type (so the same signature algorithm), signed in the token, then assembled.
    draft = builder.sign(ec.generate_private_key(CERTIFICATE_CURVE()), hashes.SHA256())
    tbs = draft.tbs_certificate_bytes
    signature = key.sign(tbs)
    try:
        key.public_key().verify(signature, tbs, ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        raise PkiError("the PKCS#11 token's signature does not verify with its public key") from None
    der = asn1_x509.Certificate({"tbs_certificate": asn1_x509.TbsCertificate.load(tbs),
                                 "signature_algorithm": {"algorithm": "sha256_ecdsa"},
                                 "signature_value": signature}).dump()
    return x509.load_der_x509_certificate(der)


class CertificateAuthority:
    """The embedded signer: an ECDSA P-256 key in a PEM file (created, mode 0600, when missing) or in
    a PKCS#11 token (pkcs11.py), and its self-signed CA certificate in a file (created when missing;
    by default next to the key file, .crt)."""

    def __init__(self, key: CaKey, certificate: x509.Certificate):
        if certificate.public_key() != key.public_key():
            raise PkiError("the CA certificate is not the certificate of the CA key")
        self.key = key
        self.certificate = certificate

    @classmethod
    def open(cls, key_path: Path | str, trust_domain: str, now: datetime,
             cert_path: Path | str | None = None) -> CertificateAuthority:
        """The CA of `key_path`, its certificate at `cert_path` (default: the key's path with suffix .crt)."""
        key_path = Path(key_path)
        cert_path = key_path.with_suffix(".crt") if cert_path is None else Path(cert_path)
        key = load_or_create_private_key(key_path, lambda: ec.generate_private_key(CERTIFICATE_CURVE()))
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise PkiError(f"{key_path} does not hold an ECDSA P-256 private key")
        return cls.of_key(key, trust_domain, now, cert_path)

    @classmethod
    def of_key(cls, key: CaKey, trust_domain: str, now: datetime, cert_path: Path) -> CertificateAuthority:
        """The CA of `key` (a file's or a token's), its certificate at `cert_path` (made when missing)."""
        check_certificate_key(key.public_key())
        if not cert_path.exists():
            certificate = self_signed_ca_certificate(key, trust_domain, now)
            create_file_once(cert_path, certificate.public_bytes(serialization.Encoding.PEM), 0o644)
        certificate = x509.load_pem_x509_certificate(cert_path.read_bytes())
        if ca_trust_domain(certificate) != trust_domain:
            raise PkiError(f"{cert_path} is the CA of trust domain {ca_trust_domain(certificate)}, not {trust_domain}")
        return cls(key, certificate)

    def issue(self, request: SvidRequest) -> x509.Certificate:
        public_key = check_certificate_key(request.csr.public_key())
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([]))
            .issuer_name(self.certificate.subject)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(request.not_before)
            .not_valid_after(request.not_after)
            .add_extension(x509.SubjectAlternativeName([x509.UniformResourceIdentifier(request.identity.spiffe_id)]),
                           critical=True)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(key_usage(digital_signature=True), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False)
        )
        return sign_certificate(builder, self.key)


def key_usage(*, digital_signature: bool = False, key_cert_sign: bool = False, crl_sign: bool = False) -> x509.KeyUsage:
    return x509.KeyUsage(digital_signature=digital_signature, content_commitment=False, key_encipherment=False,
                         data_encipherment=False, key_agreement=False, key_cert_sign=key_cert_sign,
                         crl_sign=crl_sign, encipher_only=False, decipher_only=False)


def self_signed_ca_certificate(key: CaKey, trust_domain: str, now: datetime) -> x509.Certificate:
    """The root of a trust domain, itself a signing SVID (X.509-SVID §3.2): URI SAN `spiffe://{trust-domain}`,
    cA true with no CA below it, keyCertSign and cRLSign."""
    public_key = key.public_key()
    start = utc_seconds(now) - BACKDATE
    builder = (
        x509.CertificateBuilder()
        .subject_name(CA_NAME)
        .issuer_name(CA_NAME)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + CA_LIFETIME)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(key_usage(key_cert_sign=True, crl_sign=True), critical=True)
        .add_extension(x509.SubjectAlternativeName(
            [x509.UniformResourceIdentifier(f"{SCHEME}{check_trust_domain(trust_domain)}")]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
    )
    return sign_certificate(builder, key)


def issue_server_certificate(ca: CertificateAuthority, public_key: ec.EllipticCurvePublicKey, name: str,
                             names: Sequence[str], now: datetime, lifetime: timedelta) -> x509.Certificate:
    """A gateway's serverAuth certificate for `public_key`, for the gateway `name` at `names` (DNS names
    or addresses), with the SPIFFE ID `spiffe://{trust-domain}/gateway/{name}`."""
    not_before, not_after = svid_validity(now, lifetime)
    spiffe_id = f"spiffe://{ca_trust_domain(ca.certificate)}/gateway/{check_hostname(name)}"
    check_certificate_key(public_key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca.certificate.subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(subject_alternative_names(names, spiffe_id), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(key_usage(digital_signature=True), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False)
    )
    return sign_certificate(builder, ca.key)


def subject_alternative_names(names: Sequence[str], spiffe_id: str) -> x509.SubjectAlternativeName:
    general: list[x509.GeneralName] = [x509.UniformResourceIdentifier(spiffe_id)]
    for name in names:
        try:
            general.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            general.append(x509.DNSName(name))
    return x509.SubjectAlternativeName(general)


def issue_svid(ca: CertificateSigner, csr_pem: str | bytes, node_id: UUID, now: datetime,
               lifetime: timedelta = DEFAULT_LIFETIME) -> str:
    """An SVID (PEM) for the node `node_id` and the key of its CSR, in the CA's trust domain."""
    identity = node_identity(ca_trust_domain(ca.certificate), node_id)
    certificate = issued(ca, csr_pem, identity, now, lifetime)
    return pem_of(certificate, identity, verify_svid(ca.certificate, certificate, now))


def issue_agent_svid(ca: CertificateSigner, csr_pem: str | bytes, site_id: UUID, agent_id: UUID, now: datetime,
                     lifetime: timedelta = DEFAULT_LIFETIME) -> str:
    """An SVID (PEM) for the site agent `agent_id` of `site_id` and the key of its CSR."""
    identity = AgentIdentity(ca_trust_domain(ca.certificate), site_id, agent_id)
    certificate = issued(ca, csr_pem, identity, now, lifetime)
    return pem_of(certificate, identity, verify_agent_svid([ca.certificate], certificate, now))


def pem_of(certificate: x509.Certificate, identity: NodeIdentity | AgentIdentity,
           verified: NodeIdentity | AgentIdentity) -> str:
    if verified != identity:
        raise PkiError("the CA signer returned another certificate than the SVID it was asked for")
    return certificate.public_bytes(serialization.Encoding.PEM).decode("ascii")


def issued(ca: CertificateSigner, csr_pem: str | bytes, identity: NodeIdentity | AgentIdentity, now: datetime,
           lifetime: timedelta) -> x509.Certificate:
    """The certificate the signer returns for the CSR's key under `identity`, checked to be exactly
    the SVID asked for (the signer is a port)."""
    node_csr = read_csr(csr_pem)
    not_before, not_after = svid_validity(now, lifetime)
    certificate = ca.issue(SvidRequest(node_csr.csr, identity, not_before, not_after))
    if (certificate.public_key() != node_csr.public_key
            or (certificate.not_valid_before_utc, certificate.not_valid_after_utc) != (not_before, not_after)):
        raise PkiError("the CA signer returned another certificate than the SVID it was asked for")
    return certificate


def renew_svid(ca: CertificateSigner, presented: x509.Certificate, csr_pem: str | bytes, now: datetime,
               lifetime: timedelta = DEFAULT_LIFETIME) -> str:
    """A new SVID for the node that presented `presented` (a valid SVID of this CA at `now`) and the
    key of its new CSR (the same key or a new one)."""
    identity = verify_svid(ca.certificate, presented, now)
    return issue_svid(ca, csr_pem, identity.node_id, now, lifetime)

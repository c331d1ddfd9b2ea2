"""The machine PKI (docs/architecture.md §11): the node CA, CSRs, X.509-SVIDs, their verification and renewal.

SVIDs are checked three ways: by our own verify_svid, by the independent py-spiffe library (the
`spiffe` package), and by a real mutual-TLS handshake through Python's ssl module.
"""

from __future__ import annotations

import base64
import socket
import ssl
import stat
import threading
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import spiffe
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from better_compute.pki import (DEFAULT_LIFETIME, MAX_LIFETIME, CertificateAuthority, PkiError, SvidRequest,
                                ca_trust_domain, generate_node_key, issue_svid, make_csr, parse_node_spiffe_id,
                                read_csr, renew_at, renew_svid, spiffe_id_of, verify_svid)
from better_compute.pki.ca import key_usage
from better_compute.pki.keys import private_key_pem

TRUST_DOMAIN = "fleet.example.com"
NOW = datetime.now(timezone.utc).replace(microsecond=0)  # real time: OpenSSL checks validity with the wall clock


@pytest.fixture
def ca(tmp_path: Path) -> CertificateAuthority:
    return CertificateAuthority.open(tmp_path / "ca.key", TRUST_DOMAIN, NOW)


@pytest.fixture
def node_key() -> ec.EllipticCurvePrivateKey:
    return generate_node_key()


def load(pem: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem.encode())


def pem_of(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def svid_for(ca: CertificateAuthority, key: ec.EllipticCurvePrivateKey, node_id: uuid.UUID | None = None,
             now: datetime = NOW, lifetime: timedelta = DEFAULT_LIFETIME) -> x509.Certificate:
    return load(issue_svid(ca, make_csr(key, "gpu-01"), node_id or uuid.uuid4(), now, lifetime))


# The CA and its files.

def test_the_ca_key_file_is_created_private_and_reused(tmp_path: Path) -> None:
    ca = CertificateAuthority.open(tmp_path / "keys" / "ca.key", TRUST_DOMAIN, NOW)
    key_file, cert_file = tmp_path / "keys" / "ca.key", tmp_path / "keys" / "ca.crt"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(cert_file.stat().st_mode) == 0o644
    assert key_file.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert sorted(path.name for path in key_file.parent.iterdir()) == ["ca.crt", "ca.key"]  # no drafts left
    again = CertificateAuthority.open(key_file, TRUST_DOMAIN, NOW + timedelta(days=1))
    assert again.certificate == ca.certificate
    assert private_key_pem(again.key) == private_key_pem(ca.key)


def test_the_ca_certificate_is_a_signing_svid_of_its_trust_domain(ca: CertificateAuthority) -> None:
    cert = ca.certificate
    assert cert.subject == cert.issuer
    cert.verify_directly_issued_by(cert)
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    usage = cert.extensions.get_extension_for_class(x509.KeyUsage)
    assert usage.critical and usage.value.key_cert_sign and usage.value.crl_sign
    assert ca_trust_domain(cert) == TRUST_DOMAIN
    public_key = cert.public_key()
    assert isinstance(public_key, ec.EllipticCurvePublicKey) and public_key.curve.name == "secp256r1"


def test_the_ca_refuses_another_trust_domain_a_foreign_certificate_and_other_key_types(tmp_path: Path) -> None:
    CertificateAuthority.open(tmp_path / "ca.key", TRUST_DOMAIN, NOW)
    with pytest.raises(PkiError, match="trust domain"):
        CertificateAuthority.open(tmp_path / "ca.key", "other.example", NOW)
    other = CertificateAuthority.open(tmp_path / "other.key", TRUST_DOMAIN, NOW)
    with pytest.raises(PkiError, match="not the certificate of the CA key"):
        CertificateAuthority.open(tmp_path / "ca.key", TRUST_DOMAIN, NOW, cert_path=tmp_path / "other.crt")
    assert other.certificate != CertificateAuthority.open(tmp_path / "ca.key", TRUST_DOMAIN, NOW).certificate
    (tmp_path / "ed.key").write_bytes(private_key_pem(ed25519.Ed25519PrivateKey.generate()))
    with pytest.raises(PkiError, match="ECDSA P-256"):
        CertificateAuthority.open(tmp_path / "ed.key", TRUST_DOMAIN, NOW)
    (tmp_path / "p384.key").write_bytes(private_key_pem(ec.generate_private_key(ec.SECP384R1())))
    with pytest.raises(PkiError, match="ECDSA P-256"):
        CertificateAuthority.open(tmp_path / "p384.key", TRUST_DOMAIN, NOW)


@pytest.mark.parametrize("trust_domain", ["", "Fleet.example", "fleet..example", "-fleet.example", "fleet.example.",
                                          "fleet_example", "spiffe://fleet.example", "fleet example", "a" * 64,
                                          ".".join(["a" * 63] * 4)])
def test_a_trust_domain_is_lowercase_dns_labels(tmp_path: Path, trust_domain: str) -> None:
    with pytest.raises(PkiError, match="trust domain"):
        CertificateAuthority.open(tmp_path / "ca.key", trust_domain, NOW)


# Issuing: the X.509-SVID profile.

def test_an_svid_has_the_x509_svid_profile(ca: CertificateAuthority, node_key: ec.EllipticCurvePrivateKey) -> None:
    node_id = uuid.uuid4()
    cert = svid_for(ca, node_key, node_id)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert names.critical  # the subject is empty (RFC 5280 §4.1.2.6)
    assert list(names.value) == [x509.UniformResourceIdentifier(f"spiffe://{TRUST_DOMAIN}/node/{node_id}")]
    assert cert.subject == x509.Name([])
    assert cert.issuer == ca.certificate.subject
    constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical and not constraints.value.ca
    usage = cert.extensions.get_extension_for_class(x509.KeyUsage)
    assert usage.critical and usage.value == key_usage(digital_signature=True)
    assert set(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == {
        ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.SERVER_AUTH}
    assert cert.public_key() == node_key.public_key()
    assert cert.not_valid_after_utc == NOW + DEFAULT_LIFETIME
    assert cert.not_valid_before_utc <= NOW
    cert.verify_directly_issued_by(ca.certificate)
    assert spiffe_id_of(cert).node_id == node_id
    assert verify_svid(ca.certificate, cert, NOW).spiffe_id == f"spiffe://{TRUST_DOMAIN}/node/{node_id}"


def test_the_lifetime_is_configurable_and_bounded(ca: CertificateAuthority,
                                                  node_key: ec.EllipticCurvePrivateKey) -> None:
    assert svid_for(ca, node_key, lifetime=MAX_LIFETIME).not_valid_after_utc == NOW + timedelta(hours=24)
    assert svid_for(ca, node_key, lifetime=timedelta(minutes=10)).not_valid_after_utc == NOW + timedelta(minutes=10)
    assert svid_for(ca, node_key, lifetime=timedelta(minutes=5, microseconds=7)).not_valid_after_utc \
        == NOW + timedelta(minutes=5)
    for lifetime in (MAX_LIFETIME + timedelta(seconds=1), timedelta(seconds=59), timedelta(0), timedelta(hours=-1)):
        with pytest.raises(PkiError, match="SVID lives"):
            svid_for(ca, node_key, lifetime=lifetime)


def test_a_node_id_is_a_uuid(ca: CertificateAuthority, node_key: ec.EllipticCurvePrivateKey) -> None:
    with pytest.raises(PkiError, match="UUID"):
        issue_svid(ca, make_csr(node_key, "gpu-01"), str(uuid.uuid4()), NOW)  # type: ignore[arg-type]


def test_every_svid_has_its_own_serial(ca: CertificateAuthority, node_key: ec.EllipticCurvePrivateKey) -> None:
    node_id = uuid.uuid4()
    assert svid_for(ca, node_key, node_id).serial_number != svid_for(ca, node_key, node_id).serial_number


# CSRs.

def test_a_csr_carries_the_key_and_the_hostname(node_key: ec.EllipticCurvePrivateKey) -> None:
    node_csr = read_csr(make_csr(node_key, "gpu-01.rack-7"))
    assert node_csr.hostname == "gpu-01.rack-7"
    assert node_csr.public_key == node_key.public_key()


def csr_signed_with(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey,
                    algorithm: hashes.SHA256 | hashes.SHA384 | hashes.SHA512 | None = hashes.SHA256(),
                    common_name: str | None = "gpu-01") -> str:
    names = [] if common_name is None else [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    csr = x509.CertificateSigningRequestBuilder().subject_name(x509.Name(names)).sign(key, algorithm)
    return csr.public_bytes(serialization.Encoding.PEM).decode()


def tampered_csr(key: ec.EllipticCurvePrivateKey) -> bytes:
    """A CSR whose signature no longer matches: its subject changed after signing."""
    der = bytearray(x509.load_pem_x509_csr(make_csr(key, "gpu-01").encode()).public_bytes(serialization.Encoding.DER))
    at = der.index(b"gpu-01")
    der[at:at + 6] = b"gpu-02"
    return (b"-----BEGIN CERTIFICATE REQUEST-----\n" + base64.encodebytes(bytes(der))
            + b"-----END CERTIFICATE REQUEST-----\n")


@pytest.mark.parametrize(("make", "problem"), [
    (lambda key: "A" * 8193, "more than 8192"),
    (lambda key: "not a CSR", "not a PEM certificate signing request"),
    (tampered_csr, "does not verify"),
    (lambda key: csr_signed_with(rsa.generate_private_key(65537, 2048)), "ECDSA P-256"),
    (lambda key: csr_signed_with(ec.generate_private_key(ec.SECP384R1()), hashes.SHA384()), "ECDSA P-256"),
    (lambda key: csr_signed_with(ed25519.Ed25519PrivateKey.generate(), None), "ECDSA P-256"),
    (lambda key: csr_signed_with(key, hashes.SHA512()), "SHA-256"),
    (lambda key: csr_signed_with(key, common_name=None), "one common name"),
    (lambda key: csr_signed_with(key, common_name="gpu 01"), "hostname"),
])
def test_the_control_plane_refuses_a_bad_csr(ca: CertificateAuthority, node_key: ec.EllipticCurvePrivateKey,
                                              make: Callable[[ec.EllipticCurvePrivateKey], str | bytes],
                                              problem: str) -> None:
    with pytest.raises(PkiError, match=problem):
        issue_svid(ca, make(node_key), uuid.uuid4(), NOW)


def test_the_node_refuses_a_bad_hostname_or_key() -> None:
    with pytest.raises(PkiError, match="hostname"):
        make_csr(generate_node_key(), "a" * 65)
    with pytest.raises(PkiError, match="ECDSA P-256"):
        make_csr(ec.generate_private_key(ec.SECP384R1()), "gpu-01")


def test_only_the_key_of_a_csr_is_used(ca: CertificateAuthority, node_key: ec.EllipticCurvePrivateKey) -> None:
    """A CSR asking for a SPIFFE ID, a DNS name and CA powers gets none of them."""
    csr = (x509.CertificateSigningRequestBuilder()
           .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpu-01")]))
           .add_extension(x509.SubjectAlternativeName([
               x509.UniformResourceIdentifier(f"spiffe://{TRUST_DOMAIN}/node/{uuid.uuid4()}"),
               x509.DNSName("gateway.example.com")]), critical=False)
           .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
           .sign(node_key, hashes.SHA256()))
    node_id = uuid.uuid4()
    cert = load(issue_svid(ca, csr.public_bytes(serialization.Encoding.PEM), node_id, NOW))
    assert list(cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value) == [
        x509.UniformResourceIdentifier(f"spiffe://{TRUST_DOMAIN}/node/{node_id}")]
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


# Verifying.

def test_verify_svid_checks_time(ca: CertificateAuthority, node_key: ec.EllipticCurvePrivateKey) -> None:
    cert = svid_for(ca, node_key)
    assert verify_svid(ca.certificate, cert, NOW + DEFAULT_LIFETIME).trust_domain == TRUST_DOMAIN
    with pytest.raises(PkiError, match="not valid at"):
        verify_svid(ca.certificate, cert, NOW + DEFAULT_LIFETIME + timedelta(seconds=1))
    with pytest.raises(PkiError, match="not valid at"):
        verify_svid(ca.certificate, cert, NOW - timedelta(minutes=2))


def test_verify_svid_checks_the_issuer(tmp_path: Path, ca: CertificateAuthority,
                                       node_key: ec.EllipticCurvePrivateKey) -> None:
    stranger = CertificateAuthority.open(tmp_path / "stranger.key", TRUST_DOMAIN, NOW)
    with pytest.raises(PkiError, match="not valid at"):
        verify_svid(ca.certificate, svid_for(stranger, node_key), NOW)
    with pytest.raises(PkiError):
        verify_svid(ca.certificate, ca.certificate, NOW)


def test_verify_svid_checks_the_trust_domain(tmp_path: Path, ca: CertificateAuthority,
                                             node_key: ec.EllipticCurvePrivateKey) -> None:
    """The same key certified for another trust domain: the chain holds, the trust domain does not."""
    other = CertificateAuthority.open(tmp_path / "ca.key", "other.example", NOW, cert_path=tmp_path / "other.crt")
    cert = svid_for(other, node_key)
    cert.verify_directly_issued_by(ca.certificate)
    with pytest.raises(PkiError, match="trust domain other.example, the CA's is fleet.example.com"):
        verify_svid(ca.certificate, cert, NOW)


def forged(ca: CertificateAuthority, key: ec.EllipticCurvePrivateKey, *, uris: list[str] | None = None,
           is_ca: bool | None = False, usage: x509.KeyUsage | None = key_usage(digital_signature=True),
           usage_critical: bool = True, eku: list[x509.ObjectIdentifier] | None = [ExtendedKeyUsageOID.CLIENT_AUTH],
           lifetime: timedelta = DEFAULT_LIFETIME) -> x509.Certificate:
    """A certificate signed by the CA's key that breaks one rule of the SVID profile (None: no such extension)."""
    builder = (x509.CertificateBuilder().subject_name(x509.Name([])).issuer_name(ca.certificate.subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(NOW - timedelta(minutes=1)).not_valid_after(NOW + lifetime)
               .add_extension(x509.SubjectAlternativeName([x509.UniformResourceIdentifier(uri) for uri in (
                   uris or [f"spiffe://{TRUST_DOMAIN}/node/{uuid.uuid4()}"])]), critical=True)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False))
    if is_ca is not None:
        builder = builder.add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True)
    if usage is not None:
        builder = builder.add_extension(usage, critical=usage_critical)
    if eku is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage(eku), critical=False)
    return builder.sign(ca.key, hashes.SHA256())


@pytest.mark.parametrize(("breach", "problem"), [
    ({"uris": [f"spiffe://{TRUST_DOMAIN}/node/{uuid.uuid4()}", f"spiffe://{TRUST_DOMAIN}/node/{uuid.uuid4()}"]},
     "exactly one URI SAN"),
    ({"uris": [f"spiffe://{TRUST_DOMAIN}/workload/{uuid.uuid4()}"]}, "not a node's SPIFFE ID"),
    ({"uris": [f"spiffe://{TRUST_DOMAIN}/node/{str(uuid.uuid4()).upper()}"]}, "lowercase hyphenated UUID"),
    ({"uris": [f"https://{TRUST_DOMAIN}/node/{uuid.uuid4()}"]}, "not a SPIFFE ID"),
    ({"is_ca": True}, "cA must not be asserted"),
    ({"is_ca": None}, "basic constraints, key usage and extended key usage"),
    ({"usage": key_usage(digital_signature=True, key_cert_sign=True)}, "must not assert keyCertSign"),
    ({"usage": key_usage(digital_signature=True, crl_sign=True)}, "not keyCertSign or cRLSign"),
    ({"usage": key_usage()}, "has digitalSignature"),
    ({"usage_critical": False}, "key usage is critical"),
    ({"usage": None}, "basic constraints, key usage and extended key usage"),
    ({"eku": [ExtendedKeyUsageOID.SERVER_AUTH]}, "required EKU not found"),
    ({"eku": None}, "basic constraints, key usage and extended key usage"),
    ({"lifetime": MAX_LIFETIME + timedelta(hours=1)}, "lives longer"),
])
def test_verify_svid_refuses_what_is_not_a_node_svid(ca: CertificateAuthority, node_key: ec.EllipticCurvePrivateKey,
                                                     breach: dict[str, Any], problem: str) -> None:
    with pytest.raises(PkiError, match=problem):
        verify_svid(ca.certificate, forged(ca, node_key, **breach), NOW)


def test_verify_svid_refuses_a_key_of_another_type(ca: CertificateAuthority) -> None:
    with pytest.raises(PkiError, match="ECDSA P-256"):
        verify_svid(ca.certificate, forged(ca, ec.generate_private_key(ec.SECP384R1())), NOW)


@pytest.mark.parametrize("uri", [
    "spiffe://fleet.example.com/node/", "spiffe://fleet.example.com/node/x", "spiffe://Fleet.example.com/node/{id}",
    "spiffe://fleet.example.com/node/{id}/more", "spiffe://fleet.example.com//node/{id}", "spiffe:///node/{id}",
    "SPIFFE://fleet.example.com/node/{id}", "spiffe://fleet.example.com/node/{{{id}}}",
])
def test_a_node_spiffe_id_has_one_spelling(uri: str) -> None:
    with pytest.raises(PkiError):
        parse_node_spiffe_id(uri.format(id=uuid.uuid4()))


# Renewal.

def test_renew_at_is_two_thirds_into_the_lifetime(ca: CertificateAuthority,
                                                  node_key: ec.EllipticCurvePrivateKey) -> None:
    cert = svid_for(ca, node_key, lifetime=timedelta(hours=3))
    start = cert.not_valid_before_utc
    assert renew_at(cert) == start + (cert.not_valid_after_utc - start) * 2 / 3
    assert NOW + timedelta(hours=1) < renew_at(cert) < NOW + timedelta(hours=2)


@pytest.mark.parametrize("new_key", [False, True])
def test_renewal_keeps_the_node_id_of_the_presented_certificate(ca: CertificateAuthority,
                                                                node_key: ec.EllipticCurvePrivateKey,
                                                                new_key: bool) -> None:
    node_id = uuid.uuid4()
    current = svid_for(ca, node_key, node_id)
    key = generate_node_key() if new_key else node_key
    later = NOW + timedelta(minutes=40)
    renewed = load(renew_svid(ca, current, make_csr(key, "gpu-01"), later))
    assert verify_svid(ca.certificate, renewed, later).node_id == node_id
    assert renewed.public_key() == key.public_key()
    assert renewed.serial_number != current.serial_number
    assert renewed.not_valid_after_utc == later + DEFAULT_LIFETIME


def test_renewal_needs_a_valid_svid_of_this_ca(tmp_path: Path, ca: CertificateAuthority,
                                                 node_key: ec.EllipticCurvePrivateKey) -> None:
    csr = make_csr(node_key, "gpu-01")
    expired = svid_for(ca, node_key)
    with pytest.raises(PkiError, match="not valid at"):
        renew_svid(ca, expired, csr, NOW + DEFAULT_LIFETIME + timedelta(seconds=1))
    stranger = CertificateAuthority.open(tmp_path / "stranger.key", TRUST_DOMAIN, NOW)
    with pytest.raises(PkiError, match="not valid at"):
        renew_svid(ca, svid_for(stranger, node_key), csr, NOW)


# The signer port: what an adapter returns is checked.

class SwappingSigner:
    """A signer that changes one thing of what it was asked for."""

    def __init__(self, ca: CertificateAuthority, swap: Callable[[SvidRequest], SvidRequest]):
        self.ca = ca
        self.swap = swap
        self.certificate = ca.certificate

    def issue(self, request: SvidRequest) -> x509.Certificate:
        return self.ca.issue(self.swap(request))


@pytest.mark.parametrize("swap", [
    lambda request: replace(request, identity=replace(request.identity, node_id=uuid.uuid4())),
    lambda request: replace(request, csr=read_csr(make_csr(generate_node_key(), "gpu-66")).csr),
    lambda request: replace(request, not_after=request.not_after + timedelta(hours=1)),
])
def test_a_signer_that_returns_another_certificate_is_caught(ca: CertificateAuthority,
                                                             node_key: ec.EllipticCurvePrivateKey,
                                                             swap: Callable[[SvidRequest], SvidRequest]) -> None:
    with pytest.raises(PkiError, match="another certificate"):
        issue_svid(SwappingSigner(ca, swap), make_csr(node_key, "gpu-01"), uuid.uuid4(), NOW)


# The independent SPIFFE library reads our SVIDs.

def test_py_spiffe_parses_the_svid_and_its_renewal(ca: CertificateAuthority,
                                                   node_key: ec.EllipticCurvePrivateKey) -> None:
    node_id = uuid.uuid4()
    expected = spiffe.SpiffeId(f"spiffe://{TRUST_DOMAIN}/node/{node_id}")
    bundle = spiffe.X509Bundle.parse(spiffe.TrustDomain(TRUST_DOMAIN), pem_of(ca.certificate))
    first = svid_for(ca, node_key, node_id)
    renewed_key = generate_node_key()
    renewed = load(renew_svid(ca, first, make_csr(renewed_key, "gpu-01"), NOW + timedelta(minutes=45)))
    for cert, key in ((first, node_key), (renewed, renewed_key)):
        svid = spiffe.X509Svid.parse(pem_of(cert) + pem_of(ca.certificate), private_key_pem(key))
        assert svid.spiffe_id == expected
        assert svid.spiffe_id.trust_domain == bundle.trust_domain
        assert svid.leaf == cert
        assert svid.cert_chain == [cert, ca.certificate]
        assert ca.certificate in bundle.x509_authorities
        alone = spiffe.X509Svid.parse(pem_of(cert), private_key_pem(key))
        assert str(alone.spiffe_id) == f"spiffe://{TRUST_DOMAIN}/node/{node_id}"


# SVIDs in a real mutual-TLS handshake (Python's ssl, OpenSSL).

def write_pair(tmp_path: Path, name: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> tuple[Path, Path]:
    cert_file, key_file = tmp_path / f"{name}.crt", tmp_path / f"{name}.key"
    cert_file.write_bytes(pem_of(cert))
    key_file.write_bytes(private_key_pem(key))
    return cert_file, key_file


def handshake(ca: CertificateAuthority, server_pair: tuple[Path, Path], client_pair: tuple[Path, Path],
              version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_3) -> bytes:
    """Mutual TLS over a socketpair; the DER of the client certificate as the server saw it."""
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(*server_pair)
    server_context.load_verify_locations(cadata=pem_of(ca.certificate).decode())
    server_context.verify_mode = ssl.CERT_REQUIRED
    client_context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_context.check_hostname = False  # nodes check the gateway's SPIFFE ID, not a DNS name
    client_context.load_verify_locations(cadata=pem_of(ca.certificate).decode())
    client_context.load_cert_chain(*client_pair)
    client_context.minimum_version = client_context.maximum_version = version
    server_socket, client_socket = socket.socketpair()
    server_socket.settimeout(10)
    client_socket.settimeout(10)
    seen: dict[str, bytes | Exception] = {}

    def serve() -> None:
        try:
            with server_context.wrap_socket(server_socket, server_side=True) as tls:
                peer = tls.getpeercert(binary_form=True)
                assert peer is not None
                seen["peer"] = peer
                tls.sendall(b"ok")
        except (ssl.SSLError, OSError) as error:
            seen["error"] = error

    server = threading.Thread(target=serve)
    server.start()
    try:
        with client_context.wrap_socket(client_socket) as tls:
            assert tls.recv(2) == b"ok"
            assert tls.version() == version.name.replace("_", ".")
    finally:
        server.join(10)
    if "error" in seen:
        raise seen["error"]  # type: ignore[misc]
    return seen["peer"]  # type: ignore[return-value]


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_an_svid_is_a_tls_client_certificate(tmp_path: Path, ca: CertificateAuthority,
                                             node_key: ec.EllipticCurvePrivateKey, version: ssl.TLSVersion) -> None:
    node_id = uuid.uuid4()
    gateway_key = generate_node_key()
    server_pair = write_pair(tmp_path, "gateway", svid_for(ca, gateway_key), gateway_key)
    peer = handshake(ca, server_pair, write_pair(tmp_path, "node", svid_for(ca, node_key, node_id), node_key), version)
    assert verify_svid(ca.certificate, x509.load_der_x509_certificate(peer), NOW).node_id == node_id


def test_tls_refuses_an_svid_of_another_ca_or_an_expired_one(tmp_path: Path, ca: CertificateAuthority,
                                                             node_key: ec.EllipticCurvePrivateKey) -> None:
    gateway_key = generate_node_key()
    server_pair = write_pair(tmp_path, "gateway", svid_for(ca, gateway_key), gateway_key)
    stranger = CertificateAuthority.open(tmp_path / "stranger.key", TRUST_DOMAIN, NOW)
    with pytest.raises((ssl.SSLError, OSError)):
        handshake(ca, server_pair, write_pair(tmp_path, "stranger", svid_for(stranger, node_key), node_key))
    old_ca = CertificateAuthority.open(tmp_path / "old.key", TRUST_DOMAIN, NOW - timedelta(hours=3))
    old_gateway = svid_for(old_ca, gateway_key, lifetime=MAX_LIFETIME)
    old_server_pair = write_pair(tmp_path, "old-gateway", old_gateway, gateway_key)
    expired = svid_for(old_ca, node_key, now=NOW - timedelta(hours=2))
    handshake(old_ca, old_server_pair, write_pair(tmp_path, "fresh", svid_for(old_ca, node_key), node_key))
    with pytest.raises((ssl.SSLError, OSError)):
        handshake(old_ca, old_server_pair, write_pair(tmp_path, "expired", expired, node_key))

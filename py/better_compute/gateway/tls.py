"""The gateway's TLS: its own server certificate, issued by the node CA, and the one context for
both paths.

Nodes trust the node CA (they get it at join, or with `--ca-file` before), so the gateway's server
certificate comes from the same CA: a serverAuth leaf for the gateway's host names and addresses,
plus a SPIFFE ID `spiffe://{trust-domain}/gateway/{name}` for nodes that check the peer's identity
rather than a DNS name. pki's CertificateSigner port only issues node SVIDs, so this uses the
embedded CA's key directly. The key is made at start and never written anywhere but a private
temporary file for OpenSSL to read; the certificate is short-lived like an SVID and reissued
into the same context before it expires (new handshakes get the new one).

Client certificates are optional at the TLS layer: `/join` has none, `/session` refuses a
connection without a verified SVID (session.py), and a certificate that does not chain to the CA
fails the handshake already.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
import tempfile
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from better_compute.pki import CertificateAuthority, renew_at
from better_compute.pki.ca import key_usage
from better_compute.pki.keys import CERTIFICATE_CURVE, private_key_pem
from better_compute.pki.svid import MAX_LIFETIME, ca_trust_domain, svid_validity

SERVER_CERT_LIFETIME = MAX_LIFETIME  # short-lived like an SVID: rotated at 2/3 (pki.renew_at)
UNSPECIFIED = ("0.0.0.0", "::", "")


def server_names(host: str, extra: Sequence[str] = ()) -> list[str]:
    """The names the server certificate is for: the listening address when it is one address,
    `localhost` and 127.0.0.1 (the same machine), this machine's name, and what the operator adds."""
    names = [*extra, "localhost", "127.0.0.1", socket.gethostname(), socket.getfqdn()]
    if host not in UNSPECIFIED:
        names.insert(0, host)
    return list(dict.fromkeys(name for name in names if name))


def subject_alternative_names(names: Sequence[str], spiffe_id: str) -> x509.SubjectAlternativeName:
    general: list[x509.GeneralName] = [x509.UniformResourceIdentifier(spiffe_id)]
    for name in names:
        try:
            general.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            general.append(x509.DNSName(name))
    return x509.SubjectAlternativeName(general)


def issue_server_certificate(ca: CertificateAuthority, key: ec.EllipticCurvePrivateKey, name: str,
                             names: Sequence[str], now: datetime,
                             lifetime: timedelta = SERVER_CERT_LIFETIME) -> x509.Certificate:
    """A serverAuth certificate for `key`, signed with the CA's key, for the gateway `name` at `names`."""
    not_before, not_after = svid_validity(now, lifetime)
    spiffe_id = f"spiffe://{ca_trust_domain(ca.certificate)}/gateway/{name}"
    public_key = key.public_key()
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
    return builder.sign(ca.key, hashes.SHA256())


class ServerTls:
    """The gateway's SSLContext and the certificate it serves now."""

    def __init__(self, ca: CertificateAuthority, name: str, names: Sequence[str]):
        self.ca = ca
        self.name = name
        self.names = list(names)
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.context.verify_mode = ssl.CERT_OPTIONAL
        self.context.load_verify_locations(cadata=ca.certificate.public_bytes(serialization.Encoding.PEM).decode())
        self.certificate: x509.Certificate | None = None

    def rotate(self, now: datetime) -> datetime:
        """Issue a fresh certificate and key into the context; answers when to rotate next."""
        key = ec.generate_private_key(CERTIFICATE_CURVE())
        certificate = issue_server_certificate(self.ca, key, self.name, self.names, now)
        with tempfile.TemporaryDirectory(prefix="bc-gateway-tls-") as directory:  # mode 0700
            cert_file, key_file = Path(directory) / "server.crt", Path(directory) / "server.key"
            cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
            key_file.touch(mode=0o600)
            key_file.write_bytes(private_key_pem(key))
            self.context.load_cert_chain(cert_file, key_file)
        self.certificate = certificate
        return renew_at(certificate)

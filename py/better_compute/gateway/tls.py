"""The gateway's TLS: its own server certificate, issued by the node CA, and the one context for
both paths.

Nodes trust the node CA (they get it at join, or with `--ca-file` before), so the gateway's server
certificate comes from the same CA: a serverAuth leaf for the gateway's host names and addresses,
plus a SPIFFE ID `spiffe://{trust-domain}/gateway/{name}` for nodes that check the peer's identity
rather than a DNS name. The gateway holds no CA key (issue 20): it makes its key, asks the signer
through the database (node_api.gateway_certificate_request) and waits. The key is never written
anywhere but a private temporary file for OpenSSL to read; the certificate is short-lived like an
SVID and reissued into the same context before it expires (new handshakes get the new one).

Client certificates are optional at the TLS layer: `/join` has none, `/session` refuses a
connection without a verified SVID (session.py), and a certificate that does not chain to the CA
fails the handshake already.
"""

from __future__ import annotations

import socket
import ssl
import tempfile
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from better_compute.db import AsyncDatabase
from better_compute.gateway.issuance import Issuance
from better_compute.pki import PkiError, make_csr, renew_at
from better_compute.pki.binding import public_key_der
from better_compute.pki.keys import CERTIFICATE_CURVE, private_key_pem

UNSPECIFIED = ("0.0.0.0", "::", "")


def server_names(host: str, extra: Sequence[str] = ()) -> list[str]:
    """The names the server certificate is for: the listening address when it is one address,
    `localhost` and 127.0.0.1 (the same machine), this machine's name, and what the operator adds."""
    names = [*extra, "localhost", "127.0.0.1", socket.gethostname(), socket.getfqdn()]
    if host not in UNSPECIFIED:
        names.insert(0, host)
    return list(dict.fromkeys(name for name in names if name))


class ServerTls:
    """The gateway's SSLContext, the node CAs it trusts and the certificate it serves now."""

    def __init__(self, name: str, names: Sequence[str]):
        self.name = name
        self.names = list(names)
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.context.verify_mode = ssl.CERT_OPTIONAL
        self.trusted: set[bytes] = set()
        self.certificate: x509.Certificate | None = None

    def trust(self, bundle: Sequence[x509.Certificate]) -> None:
        """Trust the bundle's CAs in new handshakes (one retired later is refused by verify_svid)."""
        for ca in bundle:
            der = ca.public_bytes(serialization.Encoding.DER)
            if der not in self.trusted:
                self.context.load_verify_locations(cadata=der)
                self.trusted.add(der)

    def issued_by(self, ca: x509.Certificate) -> bool:
        """Whether the certificate served now was issued by `ca`."""
        if self.certificate is None:
            return False
        try:
            self.certificate.verify_directly_issued_by(ca)
        except (ValueError, TypeError, InvalidSignature):
            return False
        return True

    async def rotate(self, db: AsyncDatabase, issuance: Issuance) -> datetime:
        """A fresh key, its certificate from the signer, both into the context; answers when to rotate next."""
        key = ec.generate_private_key(CERTIFICATE_CURVE())
        request_id = await db.call("node_api.gateway_certificate_request", self.name, make_csr(key, self.name),
                                   public_key_der(key.public_key()), self.names)
        certificate = x509.load_pem_x509_certificate((await issuance.certificate(request_id)).encode("ascii"))
        if certificate.public_key() != key.public_key():
            raise PkiError("the signer returned a server certificate for another key")
        with tempfile.TemporaryDirectory(prefix="bc-gateway-tls-") as directory:  # mode 0700
            cert_file, key_file = Path(directory) / "server.crt", Path(directory) / "server.key"
            cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
            key_file.touch(mode=0o600)
            key_file.write_bytes(private_key_pem(key))
            self.context.load_cert_chain(cert_file, key_file)
        self.certificate = certificate
        return renew_at(certificate)

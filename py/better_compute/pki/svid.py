"""X.509-SVIDs of nodes: their lifetime, their verification, when to renew them.

An SVID follows the SPIFFE X.509-SVID standard: exactly one URI SAN (the node's SPIFFE ID), a leaf
(cA false), key usage digitalSignature only (critical), extended key usage clientAuth and
serverAuth (the standard asks for both when the extension is present). Its subject is empty, so
the SPIFFE ID is the only name it has and nobody authorizes by a common name; the SAN is then
critical (RFC 5280 §4.1.2.6). SVIDs are short-lived (an hour by default, a day at most): a node
renews over its session long before expiry, so a stolen or stale certificate is soon worthless
without any revocation list.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta, timezone

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

from better_compute.pki.identity import (SCHEME, AgentIdentity, NodeIdentity, agent_spiffe_id_of, check_trust_domain,
                                        spiffe_id_of, uri_sans)
from better_compute.pki.keys import PkiError, check_certificate_key

DEFAULT_LIFETIME = timedelta(hours=1)
MIN_LIFETIME = timedelta(minutes=1)
MAX_LIFETIME = timedelta(hours=24)
BACKDATE = timedelta(minutes=1)  # not_before this much before issue: a verifier whose clock is behind still accepts
RENEW_AFTER_FRACTION = 2 / 3


def utc_seconds(moment: datetime) -> datetime:
    """A moment as certificates hold it: UTC, whole seconds."""
    if moment.tzinfo is None:
        raise PkiError(f"{moment} has no time zone")
    return moment.astimezone(timezone.utc).replace(microsecond=0)


def svid_validity(now: datetime, lifetime: timedelta) -> tuple[datetime, datetime]:
    """(not_before, not_after) of an SVID issued at `now`."""
    if not MIN_LIFETIME <= lifetime <= MAX_LIFETIME:
        raise PkiError(f"an SVID lives {MIN_LIFETIME} to {MAX_LIFETIME}, not {lifetime}")
    start = utc_seconds(now)
    return start - BACKDATE, utc_seconds(start + lifetime)


def renew_at(cert: x509.Certificate) -> datetime:
    """When the daemon asks for its next SVID: after 2/3 of the lifetime, leaving a third for retries."""
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    return start + (end - start) * RENEW_AFTER_FRACTION


def ca_trust_domain(ca_cert: x509.Certificate) -> str:
    """The trust domain a CA certificate serves: its one URI SAN, `spiffe://{trust-domain}` (X.509-SVID
    §3.2: a signing certificate's SPIFFE ID has no path)."""
    uris = uri_sans(ca_cert)
    if len(uris) != 1 or not uris[0].startswith(SCHEME):
        raise PkiError(f"a node CA certificate has one URI SAN, spiffe://{{trust-domain}}; this one has {uris!r:.300}")
    return check_trust_domain(uris[0][len(SCHEME):])


def verify_svid(ca_cert: x509.Certificate | Sequence[x509.Certificate], cert: x509.Certificate,
                now: datetime) -> NodeIdentity:
    """The node `cert` identifies, when it is a valid SVID at `now` issued by `ca_cert` (or by one CA
    of a trust bundle, during a CA rotation): the chain and validity period (RFC 5280 path validation
    by `cryptography`), the leaf profile, the SPIFFE ID's form and trust domain. Anything else
    raises PkiError."""
    trust_domain = verify_leaf(ca_cert, cert, now)
    identity = spiffe_id_of(cert)
    if identity.trust_domain != trust_domain:
        raise PkiError(f"the certificate is of trust domain {identity.trust_domain}, the CA's is {trust_domain}")
    return identity


def verify_agent_svid(bundle: Sequence[x509.Certificate], cert: x509.Certificate, now: datetime) -> AgentIdentity:
    """The site agent `cert` identifies, checked as verify_svid checks a node's; a node's SVID (or
    anything but `spiffe://{trust-domain}/site/{site}/agent/{agent}`) raises PkiError."""
    trust_domain = verify_leaf(bundle, cert, now)
    identity = agent_spiffe_id_of(cert)
    if identity.trust_domain != trust_domain:
        raise PkiError(f"the certificate is of trust domain {identity.trust_domain}, the CA's is {trust_domain}")
    return identity


def verify_leaf(ca_cert: x509.Certificate | Sequence[x509.Certificate], cert: x509.Certificate, now: datetime) -> str:
    """The trust domain of the bundle, when `cert` is a valid SVID leaf at `now` issued by one of its CAs."""
    bundle = [ca_cert] if isinstance(ca_cert, x509.Certificate) else list(ca_cert)
    if not bundle:
        raise PkiError("the trust bundle holds no node CA")
    trust_domain = ca_trust_domain(bundle[0])
    verifier = PolicyBuilder().store(Store(bundle)).time(utc_seconds(now)).build_client_verifier()
    try:
        verifier.verify(cert, [])
    except VerificationError as error:
        raise PkiError(f"the certificate is not valid at {now} under the node CA: {error}") from None
    check_leaf_profile(cert)
    return trust_domain


def check_leaf_profile(cert: x509.Certificate) -> None:
    """X.509-SVID §4 and §5.2 for a leaf, and this PKI's own bounds (key type, lifetime). The path
    validation before it already refuses cA true, keyCertSign and an EKU without clientAuth; the
    rules are all stated here so that the profile does not hang on one library's policy."""
    try:
        constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
        usage = cert.extensions.get_extension_for_class(x509.KeyUsage)
        extended_usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound as error:
        raise PkiError(f"an SVID has basic constraints, key usage and extended key usage: {error}") from None
    if constraints.ca:
        raise PkiError("an SVID is a leaf certificate (cA false)")
    if not (usage.critical and usage.value.digital_signature) or usage.value.key_cert_sign or usage.value.crl_sign:
        raise PkiError("an SVID's key usage is critical, has digitalSignature and not keyCertSign or cRLSign")
    if ExtendedKeyUsageOID.CLIENT_AUTH not in extended_usage:
        raise PkiError("an SVID of a node has extended key usage clientAuth")
    if cert.not_valid_after_utc - cert.not_valid_before_utc > MAX_LIFETIME + BACKDATE:
        raise PkiError(f"the certificate lives longer than an SVID may ({MAX_LIFETIME})")
    check_certificate_key(cert.public_key())

"""Signed messages (P14): relays carry them and cannot forge them.

Intent going down (specs, commands) is signed by the control plane's Ed25519 intent key; what a
node reports going up (inventory, observed specs, command results, a new key) is signed by the
node's key (ECDSA P-256, the key it joined with and registered in the database), and verified by
the worker against that registered key, never by the gateway that relays it. An envelope is

    {"v": 1, "purpose": "...", "body": {...}, "sig": "<base64>"}

and the signature covers `bc-v1\\n{purpose}\\n{canonical(body)}`: the purpose (the message type) is
signed with the body, so a signature made for one type of message never passes as another.

`canonical` is JSON with sorted keys, no whitespace, UTF-8 (not ASCII escapes). It refuses floats:
a float's JSON spelling does not survive every hop (PostgreSQL jsonb turns 1e+16 into an integer,
JavaScript writes 100.0 as 100), and a body re-spelled on the way no longer verifies; quantities
travel as integers or decimal strings.

A node that changes its key says so in a node.key report signed by its old key, whose body carries
the new public key and `key_proof`: the new key's signature over that body (proof of possession).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes

from better_compute.pki.keys import PkiError, check_certificate_key, describe_key, load_or_create_private_key
from better_compute.pki.pkcs11 import Pkcs11IntentKey

ENVELOPE_VERSION = 1
ENVELOPE_FIELDS = frozenset({"v", "purpose", "body", "sig"})
MESSAGE_PREFIX = b"bc-v1\n"
PURPOSE = re.compile(r"[a-z][a-z0-9_.]{0,63}")  # no newline: the purpose ends where the body starts
BODY_BYTES_MAX = 1 << 20
KEY_PROOF_PURPOSE = "node.key.proof"  # what a node's new key signs (key_proof)

SigningKey = Ed25519PrivateKey | Pkcs11IntentKey | ec.EllipticCurvePrivateKey
VerifyingKey = Ed25519PublicKey | ec.EllipticCurvePublicKey


class EnvelopeError(PkiError):
    """An envelope that is malformed, of another purpose, or whose signature does not verify."""


def canonical(document: Any) -> bytes:
    """The one byte string of a JSON document that is signed and verified."""
    check_json(document)
    try:
        text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise PkiError(f"the document has a string that is not Unicode text: {error}") from None


def check_json(value: Any) -> None:
    if value is None or isinstance(value, (bool, int, str)):
        return
    if isinstance(value, float):
        raise PkiError(f"{value!r} is a float; signed documents carry integers or decimal strings")
    if isinstance(value, list):
        for item in value:
            check_json(item)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise PkiError(f"object key {key!r:.100} is not a string")
            check_json(item)
        return
    raise PkiError(f"a {type(value).__name__} is not a JSON value")


def signed_message(purpose: str, body: Mapping[str, Any]) -> bytes:
    if not isinstance(purpose, str) or not PURPOSE.fullmatch(purpose):
        raise PkiError(f"purpose {purpose!r:.100} is not lowercase letters, digits, '_' and '.' (at most 64)")
    if not isinstance(body, dict):
        raise PkiError(f"an envelope's body is a JSON object, not {type(body).__name__}")
    text = canonical(body)
    if len(text) > BODY_BYTES_MAX:
        raise PkiError(f"the body has {len(text)} bytes, more than {BODY_BYTES_MAX}")
    return MESSAGE_PREFIX + purpose.encode("ascii") + b"\n" + text


def sign_message(message: bytes, key: SigningKey) -> bytes:
    """The signature of `message` with an Ed25519 key (in a file, or a PKCS#11 token) or a node's
    P-256 key (ECDSA, SHA-256)."""
    if isinstance(key, (Ed25519PrivateKey, Pkcs11IntentKey)):
        return key.sign(message)
    if isinstance(key, ec.EllipticCurvePrivateKey):
        check_certificate_key(key.public_key())
        return key.sign(message, ec.ECDSA(hashes.SHA256()))
    raise PkiError(f"cannot sign with a {describe_key(key)}")


def verify_message(signature: bytes, message: bytes, public_key: VerifyingKey, what: str) -> None:
    """EnvelopeError unless `signature` is `public_key`'s over `message` (`what` names it in the error)."""
    try:
        if isinstance(public_key, Ed25519PublicKey):
            public_key.verify(signature, message)
        elif isinstance(public_key, ec.EllipticCurvePublicKey):
            check_certificate_key(public_key).verify(signature, message, ec.ECDSA(hashes.SHA256()))
        else:
            raise EnvelopeError(f"cannot verify with a {describe_key(public_key)}")
    except InvalidSignature:
        raise EnvelopeError(f"the signature of {what} does not verify with the given key") from None
    except PkiError as error:
        raise EnvelopeError(str(error)) from None


def sign_envelope(purpose: str, document: dict[str, Any], key: SigningKey) -> dict[str, Any]:
    """The envelope of `document` for `purpose`, signed with `key` (Ed25519, or a node's P-256 key)."""
    signature = sign_message(signed_message(purpose, document), key)
    return {"v": ENVELOPE_VERSION, "purpose": purpose, "body": document,
            "sig": base64.b64encode(signature).decode("ascii")}


def open_envelope(envelope: Any, public_key: VerifyingKey, purpose: str) -> dict[str, Any]:
    """The body of an envelope of `purpose` signed by the key of `public_key`; EnvelopeError otherwise."""
    if not isinstance(envelope, dict) or envelope.keys() != ENVELOPE_FIELDS:
        raise EnvelopeError(f"an envelope is an object with exactly the fields {sorted(ENVELOPE_FIELDS)}")
    if type(envelope["v"]) is not int or envelope["v"] != ENVELOPE_VERSION:
        raise EnvelopeError(f"envelope version {envelope['v']!r:.20} is not {ENVELOPE_VERSION}")
    if envelope["purpose"] != purpose:
        raise EnvelopeError(f"the envelope is for {envelope['purpose']!r:.100}, not {purpose!r}")
    try:
        signature = base64.b64decode(envelope["sig"], validate=True)
        message = signed_message(purpose, envelope["body"])
    except (TypeError, binascii.Error) as error:
        raise EnvelopeError(f"the envelope's signature is not base64: {error}") from None
    except PkiError as error:
        raise EnvelopeError(str(error)) from None
    verify_message(signature, message, public_key, f"the {purpose} envelope")
    body: dict[str, Any] = envelope["body"]
    return body


def key_proof(body: dict[str, Any], new_key: SigningKey) -> str:
    """Proof of possession of a node's new key: the new key's signature (base64) over the body of
    the node.key report without its proof (node id, epoch, seq, the new public key). The report
    itself is signed by the old key, so a key changes only when both keys agree."""
    return base64.b64encode(sign_message(signed_message(KEY_PROOF_PURPOSE, body), new_key)).decode("ascii")


def check_key_proof(body: dict[str, Any]) -> VerifyingKey:
    """The new key of a node.key report body (`public_key`: base64 DER) when its `proof` verifies
    with that key; EnvelopeError otherwise."""
    unproven = {name: value for name, value in body.items() if name != "proof"}
    try:
        new_key = load_der_public_key(base64.b64decode(body.get("public_key"), validate=True))
        proof = base64.b64decode(body.get("proof"), validate=True)
        message = signed_message(KEY_PROOF_PURPOSE, unproven)
    except (TypeError, ValueError, PkiError) as error:
        raise EnvelopeError(f"the new key or its proof is not readable: {error}") from None
    verify_message(proof, message, new_key, "the new key's proof of possession")
    return new_key


def load_der_public_key(der: bytes) -> VerifyingKey:
    """A public key from DER SubjectPublicKeyInfo (how the database keeps a node's key)."""
    try:
        return envelope_key(serialization.load_der_public_key(der))
    except ValueError as error:
        raise PkiError(f"not a DER public key: {error}") from None


def load_public_key(pem: str | bytes) -> VerifyingKey:
    """A public key from PEM (how the daemon gets the intent key), when it is one envelopes use."""
    return envelope_key(serialization.load_pem_public_key(pem.encode("ascii") if isinstance(pem, str) else pem))


def envelope_key(key: PublicKeyTypes) -> VerifyingKey:
    """The key, when it is of a type envelopes are signed with (Ed25519, or P-256); PkiError otherwise."""
    if isinstance(key, Ed25519PublicKey):
        return key
    return check_certificate_key(key)


class IntentSigner:
    """The control plane's intent key (Ed25519) in a PEM file, created (mode 0600) on first use; or,
    given `token_key`, in a PKCS#11 token (pkcs11.py)."""

    def __init__(self, key_path: Path | str, token_key: Pkcs11IntentKey | None = None):
        self.key_path = Path(key_path)
        self.token_key = token_key

    @cached_property
    def private_key(self) -> Ed25519PrivateKey | Pkcs11IntentKey:
        if self.token_key is not None:
            return self.token_key
        key = load_or_create_private_key(self.key_path, Ed25519PrivateKey.generate)
        if not isinstance(key, Ed25519PrivateKey):
            raise PkiError(f"{self.key_path} does not hold an Ed25519 private key")
        return key

    def public_key_pem(self) -> str:
        """The public key for daemons (load_public_key), as PEM."""
        return self.private_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode("ascii")

    def sign(self, purpose: str, document: dict[str, Any]) -> dict[str, Any]:
        return sign_envelope(purpose, document, self.private_key)

"""Keys in a PKCS#11 token (an HSM; SoftHSM2 in tests): the node CA key and the intent key can live
where they cannot be read out (issue 20). The key files stay the default (`make demo`).

A key is found in the token by its label (CKA_LABEL), the private and the public object alike
(`pkcs11-tool --keypairgen --label …`, or `softhsm2-util --import`). Signing happens in the token:
ECDSA over a SHA-256 digest for the CA key (P-256, CKM_ECDSA), Ed25519 for the intent key
(CKM_EDDSA); the private key's value is never asked for, and a token that keeps it sensitive
refuses to give it (C_GetAttributeValue on CKA_VALUE fails). The PIN comes from the environment
(BETTER_COMPUTE_PKCS11_PIN), never from a command line.

One session per process, used under a lock: PKCS#11 sessions are not to be shared by threads at
once, and signing is short.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pkcs11
from asn1crypto.core import OctetString
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from pkcs11 import Attribute, KeyType, Mechanism, ObjectClass

from better_compute.pki.keys import PkiError, check_certificate_key

DEFAULT_MODULE = Path("/usr/lib/softhsm/libsofthsm2.so")
PIN_VARIABLE = "BETTER_COMPUTE_PKCS11_PIN"


@dataclass
class Pkcs11Token:
    """A token of a PKCS#11 module, logged in as its user."""

    module: Path
    label: str
    pin: str = field(repr=False)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        try:
            token = pkcs11.lib(str(self.module)).get_token(token_label=self.label)
            self.session = token.open(user_pin=self.pin)
        except (pkcs11.PKCS11Error, RuntimeError, OSError) as error:
            raise PkiError(f"PKCS#11 token {self.label!r} of {self.module}: {type(error).__name__} {error}") from None

    def objects(self, label: str, key_type: KeyType) -> tuple[Any, Any]:
        """(private key, public key) labelled `label`, of `key_type`."""
        try:
            with self.lock:
                private = self.session.get_key(ObjectClass.PRIVATE_KEY, key_type, label=label)
                public = self.session.get_key(ObjectClass.PUBLIC_KEY, key_type, label=label)
        except (pkcs11.NoSuchKey, pkcs11.MultipleObjectsReturned) as error:
            raise PkiError(f"no single {key_type.name} key pair labelled {label!r} in token {self.label!r}: "
                           f"{type(error).__name__}") from None
        return private, public

    def sign(self, private: Any, data: bytes, mechanism: Mechanism) -> bytes:
        with self.lock:
            return bytes(private.sign(data, mechanism=mechanism))


def ec_point(public: Any) -> bytes:
    """The public point of a token's EC key (CKA_EC_POINT: a DER OCTET STRING around it)."""
    return bytes(OctetString.load(public[Attribute.EC_POINT]).native)


class Pkcs11CaKey:
    """The node CA's P-256 key in a token: ECDSA with SHA-256 (the digest made here, CKM_ECDSA there)."""

    def __init__(self, token: Pkcs11Token, label: str):
        self.token = token
        self.private, public = token.objects(label, KeyType.EC)
        self._public = check_certificate_key(ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), ec_point(public)))

    def public_key(self) -> ec.EllipticCurvePublicKey:
        return self._public

    def sign(self, data: bytes) -> bytes:
        """The DER ECDSA signature of `data` (as X.509 carries it)."""
        raw = self.token.sign(self.private, hashlib.sha256(data).digest(), Mechanism.ECDSA)
        half = len(raw) // 2
        return encode_dss_signature(int.from_bytes(raw[:half], "big"), int.from_bytes(raw[half:], "big"))


class Pkcs11IntentKey:
    """The intent key (Ed25519) in a token: CKM_EDDSA."""

    def __init__(self, token: Pkcs11Token, label: str):
        self.token = token
        self.private, public = token.objects(label, KeyType.EC_EDWARDS)
        self._public = Ed25519PublicKey.from_public_bytes(ec_point(public))

    def public_key(self) -> Ed25519PublicKey:
        return self._public

    def sign(self, message: bytes) -> bytes:
        return self.token.sign(self.private, message, Mechanism.EDDSA)

"""Secrets sealed to the worker's key (P14, issue 11 C3): a webhook's signing secret is stored only
as a box that the worker's X25519 private key opens; the database holds the box and the key id,
never the plaintext nor the private key.

A box (an "X25519 sealed box"): an ephemeral X25519 key pair; the key = HKDF-SHA256 of the shared
secret with the recipient's public key (salt: ephemeral public key || recipient public key); the
plaintext encrypted with ChaCha20-Poly1305 under that key (a key is used once, so the nonce is
zero), the key id as associated data. box = ephemeral public key (32 bytes) || ciphertext || tag.
As text (what the API takes and sends on): `bcs1:<key id>:<base64 of the box>`.

The relay seals (`seal`, with the public key api.sealing_key() answers); only the worker opens
(`SecretKeyring`, its key files). With a `context` (the tenant, method and idempotency key of a
request), the ephemeral key is derived from the plaintext and the context instead of drawn, so a
retried request seals to the same box and replays instead of mismatching.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from better_compute.pki.keys import load_or_create_private_key

VERSION = "bcs1"
KEY_INFO = b"better-compute sealed secret v1"
EPHEMERAL_INFO = b"better-compute sealed secret v1 ephemeral"
NONCE = bytes(12)  # every box has its own key
KEY_BYTES = 32
KEY_ID_HEX_CHARS = 16
TEXT = re.compile(rf"^{VERSION}:([0-9a-f]{{{KEY_ID_HEX_CHARS}}}):([A-Za-z0-9+/]+={{0,2}})$")


class SealingError(ValueError):
    """A box that is malformed, sealed to a key this process does not hold, or does not open."""


def key_id_of(public_key: bytes) -> str:
    """What names a sealing key: the first 16 hex digits of its SHA-256 (compute.sealing_keys checks it)."""
    return hashlib.sha256(public_key).hexdigest()[:KEY_ID_HEX_CHARS]


@dataclass(frozen=True)
class Sealed:
    key_id: str
    box: bytes

    def text(self) -> str:
        return f"{VERSION}:{self.key_id}:{base64.b64encode(self.box).decode('ascii')}"

    @classmethod
    def parse(cls, text: str) -> Sealed:
        match = TEXT.match(text)
        if match is None:
            raise SealingError(f"not a sealed secret ({VERSION}:<key id>:<base64>)")
        try:
            return cls(match[1], base64.b64decode(match[2], validate=True))
        except binascii.Error as error:
            raise SealingError(f"a sealed secret's box is not base64: {error}") from error


def box_key(shared: bytes, ephemeral: bytes, recipient: bytes) -> bytes:
    return HKDF(hashes.SHA256(), KEY_BYTES, salt=ephemeral + recipient, info=KEY_INFO).derive(shared)


def raw(public_key: X25519PublicKey) -> bytes:
    return public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def associated_data(key_id: str, aad: bytes | None) -> bytes:
    """What the AEAD binds besides the key id: e.g. a machine id, so a box moved to another row does not open."""
    return key_id.encode() if aad is None else key_id.encode() + b"\n" + aad


def seal(recipient: bytes, plaintext: str, context: bytes | None = None, aad: bytes | None = None) -> Sealed:
    """A box that only the holder of `recipient`'s private key opens (and only with the same `aad`).
    With `context`, the same plaintext and context always seal to the same box (see the module's docstring)."""
    if context is None:
        ephemeral = X25519PrivateKey.generate()
    else:
        ephemeral = X25519PrivateKey.from_private_bytes(HKDF(
            hashes.SHA256(), KEY_BYTES, salt=recipient, info=EPHEMERAL_INFO + b"\n" + context).derive(plaintext.encode()))
    ephemeral_public = raw(ephemeral.public_key())
    key_id = key_id_of(recipient)
    key = box_key(ephemeral.exchange(X25519PublicKey.from_public_bytes(recipient)), ephemeral_public, recipient)
    return Sealed(key_id, ephemeral_public + ChaCha20Poly1305(key).encrypt(NONCE, plaintext.encode(), associated_data(key_id, aad)))


class SecretKeyring:
    """The worker's sealing keys: the current one (a PEM file, created mode 0600 on first use), whose
    public key it registers and seals to, and older ones it still opens while secrets are resealed
    (rotation, docs/worker.md)."""

    def __init__(self, current: Path | str, old: Sequence[Path | str] = ()):
        self.current_path = Path(current)
        self.old_paths = tuple(Path(path) for path in old)

    @cached_property
    def keys(self) -> dict[str, X25519PrivateKey]:
        """Every private key by key id; missing old key files are an error (a typo must not pass)."""
        keys = [self.private_key(self.current_path, create=True)]
        keys += [self.private_key(path, create=False) for path in self.old_paths]
        return {key_id_of(raw(key.public_key())): key for key in keys}

    @cached_property
    def public_key(self) -> bytes:
        return raw(self.private_key(self.current_path, create=True).public_key())

    @property
    def key_id(self) -> str:
        return key_id_of(self.public_key)

    @property
    def key_ids(self) -> list[str]:
        return list(self.keys)

    def seal(self, plaintext: str) -> Sealed:
        return seal(self.public_key, plaintext)

    def open(self, key_id: str, box: bytes, aad: bytes | None = None) -> str:
        key = self.keys.get(key_id)
        if key is None:
            raise SealingError(f"the secret is sealed to key {key_id}, which this worker does not hold "
                               "(--webhook-key, --webhook-old-key)")
        recipient = raw(key.public_key())
        ephemeral, ciphertext = box[:KEY_BYTES], box[KEY_BYTES:]
        try:
            secret = box_key(key.exchange(X25519PublicKey.from_public_bytes(ephemeral)), ephemeral, recipient)
            return ChaCha20Poly1305(secret).decrypt(NONCE, ciphertext, associated_data(key_id, aad)).decode()
        except (InvalidTag, ValueError) as error:
            raise SealingError(f"the secret sealed to key {key_id} does not open: {type(error).__name__}") from error

    @staticmethod
    def private_key(path: Path, create: bool) -> X25519PrivateKey:
        if not create and not path.exists():
            raise SealingError(f"no key file {path}")
        key = load_or_create_private_key(path, X25519PrivateKey.generate)
        if not isinstance(key, X25519PrivateKey):
            raise SealingError(f"{path} does not hold an X25519 private key")
        return key

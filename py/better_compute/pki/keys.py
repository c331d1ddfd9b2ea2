"""Key types and key files of the machine PKI (docs/architecture.md §11).

Certificates (the node CA and every SVID) use ECDSA P-256 keys with SHA-256: OpenSSL, and so
Python's ssl, takes them in both TLS roles (TLS 1.2 and 1.3), the X.509-SVID standard allows them,
and they are the one type that HSMs, cloud KMSs, managed private CAs and TLS-terminating load
balancers all support, where Ed25519 is supported only in places: the CA can move to any of them,
and a node can sit behind any of them, without a new key type. Only P-256 is accepted, so no
verifier ever meets a key size or curve it was not tested with. The intent key signs messages
only and never sits in a certificate, so it is Ed25519 like the audit key (signing.py).

Private keys live in PEM files (PKCS#8, unencrypted, mode 0600) created on first use.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes, PublicKeyTypes

CERTIFICATE_CURVE = ec.SECP256R1


class PkiError(ValueError):
    """A key, request, certificate or envelope the PKI refuses; the message says why."""


def generate_node_key() -> ec.EllipticCurvePrivateKey:
    """A node's key (on the node; it never leaves it): its SVID's key and what it signs results with."""
    return ec.generate_private_key(CERTIFICATE_CURVE())


def check_certificate_key(key: PublicKeyTypes) -> ec.EllipticCurvePublicKey:
    """The public key, when it is of the one type certificates may carry (ECDSA P-256)."""
    if not isinstance(key, ec.EllipticCurvePublicKey) or not isinstance(key.curve, CERTIFICATE_CURVE):
        raise PkiError(f"the key must be ECDSA P-256, not {describe_key(key)}")
    return key


def describe_key(key: PublicKeyTypes) -> str:
    curve = getattr(key, "curve", None)
    return f"{type(key).__name__}({curve.name})" if curve is not None else type(key).__name__


def private_key_pem(key: PrivateKeyTypes) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def load_or_create_private_key(path: Path, generate: Callable[[], PrivateKeyTypes]) -> PrivateKeyTypes:
    """The key in the PEM file at `path`, created with `generate` (mode 0600) when there is none."""
    if not path.exists():
        create_file_once(path, private_key_pem(generate()), 0o600)
    return serialization.load_pem_private_key(path.read_bytes(), password=None)


def create_file_once(path: Path, data: bytes, mode: int) -> None:
    """Write data next to `path` and link it in: a concurrent creator's file wins whole, never a mix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, draft = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # mode 0600
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
        os.chmod(draft, mode)
        os.link(draft, path)
    except FileExistsError:
        pass
    finally:
        os.unlink(draft)

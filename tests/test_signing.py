"""Signed messages (P14): intent signed by the control plane (Ed25519), results signed by the node's
SVID key (ECDSA P-256); relays can neither forge nor re-purpose them."""

from __future__ import annotations

import base64
import copy
import stat
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from better_compute.pki import (CertificateAuthority, EnvelopeError, IntentSigner, PkiError, canonical,
                                generate_node_key, issue_svid, load_public_key, make_csr, open_envelope,
                                sign_envelope)
from better_compute.pki.signing import SigningKey, VerifyingKey, check_key_proof, key_proof

NOW = datetime.now(timezone.utc)
SPEC = {"generation": 7, "devices": [{"atom": "gpu0", "cdi": "nvidia.com/gpu=0"}], "note": "zürich ✓"}


def test_canonical_is_sorted_compact_utf8() -> None:
    document = {"b": [True, None, {"z": 1, "y": "é"}], "a": "\u2713\n\"", "c": -12}
    assert canonical(document) == '{"a":"✓\\n\\"","b":[true,null,{"y":"é","z":1}],"c":-12}'.encode()
    assert canonical(copy.deepcopy(document)) == canonical(dict(reversed(list(document.items()))))


@pytest.mark.parametrize("document", [
    {"watts": 350.5}, {"n": [1.0]}, {"x": float("nan")}, {"x": float("inf")}, {1: "a"}, {"t": (1, 2)},
    {"s": {1, 2}}, {"b": b"bytes"}, {"lone": "\ud800"},
])
def test_canonical_refuses_what_has_no_one_spelling(document: dict[str, Any]) -> None:
    with pytest.raises(PkiError):
        canonical(document)


# Intent down (Ed25519) and results up (the node's P-256 key): both round trip.

def test_intent_signed_by_the_control_plane_opens_on_the_daemon(tmp_path: Path) -> None:
    signer = IntentSigner(tmp_path / "intent.key")
    envelope = signer.sign("node_spec", SPEC)
    assert envelope.keys() == {"v", "purpose", "body", "sig"} and envelope["v"] == 1
    daemon_key = load_public_key(signer.public_key_pem())  # what the daemon was given at join
    assert open_envelope(envelope, daemon_key, "node_spec") == SPEC


def test_results_signed_by_the_node_open_with_its_certificate(tmp_path: Path) -> None:
    ca = CertificateAuthority.open(tmp_path / "ca.key", "fleet.example.com", NOW)
    node_key = generate_node_key()
    svid = x509.load_pem_x509_certificate(issue_svid(ca, make_csr(node_key, "gpu-01"), uuid.uuid4(), NOW).encode())
    inventory = {"gpus": [{"uuid": "GPU-1", "memory_mib": 81920}], "observed_generation": 7}
    envelope = sign_envelope("inventory", inventory, node_key)
    assert open_envelope(envelope, svid.public_key(), "inventory") == inventory  # type: ignore[arg-type]


def test_a_new_key_proves_itself_and_the_proof_binds_the_report() -> None:
    new_key = generate_node_key()
    der = new_key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    body = {"node_id": str(uuid.uuid4()), "epoch": 3, "seq": 9, "public_key": base64.b64encode(der).decode()}
    proven = body | {"proof": key_proof(body, new_key)}
    assert check_key_proof(proven).public_bytes(serialization.Encoding.DER,
                                                serialization.PublicFormat.SubjectPublicKeyInfo) == der
    for forged in (proven | {"seq": 10},  # the proof of another report
                   body | {"proof": key_proof(body, generate_node_key())},  # another key's proof
                   body | {"proof": "not base64!"}, body):
        with pytest.raises(EnvelopeError):
            check_key_proof(forged)


def test_the_signature_covers_the_prefix_the_purpose_and_the_canonical_body() -> None:
    key = ed25519.Ed25519PrivateKey.generate()
    envelope = sign_envelope("command", SPEC, key)
    key.public_key().verify(base64.b64decode(envelope["sig"]), b"bc-v1\ncommand\n" + canonical(SPEC))


# Every mismatch is refused, for both key types.

KEYS: list[tuple[str, Callable[[], SigningKey]]] = [
    ("ed25519", ed25519.Ed25519PrivateKey.generate), ("p256", generate_node_key)]


def tampered(envelope: dict[str, Any]) -> dict[str, Any]:
    envelope["body"]["generation"] = 8
    return envelope


def swapped_purpose(envelope: dict[str, Any]) -> dict[str, Any]:
    envelope["purpose"] = "command"
    return envelope


def truncated(envelope: dict[str, Any]) -> dict[str, Any]:
    envelope["sig"] = base64.b64encode(base64.b64decode(envelope["sig"])[:-1]).decode()
    return envelope


@pytest.mark.parametrize(("change", "opened_as", "problem"), [
    (tampered, "node_spec", "does not verify"),
    (swapped_purpose, "command", "does not verify"),  # a node_spec signature presented as a command
    (lambda envelope: envelope, "command", "is for 'node_spec', not 'command'"),
    (truncated, "node_spec", "does not verify"),
    (lambda envelope: {**envelope, "sig": envelope["sig"][:-4]}, "node_spec", "does not verify"),
    (lambda envelope: {**envelope, "sig": "!!" + envelope["sig"]}, "node_spec", "not base64"),
    (lambda envelope: {**envelope, "sig": 12}, "node_spec", "not base64"),
    (lambda envelope: {**envelope, "v": 2}, "node_spec", "version"),
    (lambda envelope: {**envelope, "v": True}, "node_spec", "version"),
    (lambda envelope: {**envelope, "extra": 1}, "node_spec", "exactly the fields"),
    (lambda envelope: {key: value for key, value in envelope.items() if key != "sig"}, "node_spec",
     "exactly the fields"),
    (lambda envelope: {**envelope, "body": [envelope["body"]]}, "node_spec", "JSON object"),
    (lambda envelope: {**envelope, "body": {**envelope["body"], "watts": 1.5}}, "node_spec", "float"),
    (lambda envelope: [envelope], "node_spec", "exactly the fields"),
])
@pytest.mark.parametrize(("key_type", "generate"), KEYS)
def test_open_envelope_refuses_any_mismatch(change: Callable[[Any], Any], opened_as: str, problem: str,
                                            key_type: str, generate: Callable[[], SigningKey]) -> None:
    key: SigningKey = generate()
    envelope = change(sign_envelope("node_spec", copy.deepcopy(SPEC), key))
    with pytest.raises(EnvelopeError, match=problem):
        open_envelope(envelope, key.public_key(), opened_as)


@pytest.mark.parametrize(("key_type", "generate"), KEYS)
def test_open_envelope_refuses_another_key(key_type: str, generate: Callable[[], SigningKey]) -> None:
    envelope = sign_envelope("node_spec", SPEC, generate())
    other: VerifyingKey = generate().public_key()
    with pytest.raises(EnvelopeError, match="does not verify"):
        open_envelope(envelope, other, "node_spec")


def test_a_signature_of_one_key_type_does_not_open_with_the_other() -> None:
    envelope = sign_envelope("node_spec", SPEC, generate_node_key())
    with pytest.raises(EnvelopeError, match="does not verify"):
        open_envelope(envelope, ed25519.Ed25519PrivateKey.generate().public_key(), "node_spec")


def test_other_key_types_are_refused() -> None:
    with pytest.raises(PkiError, match="ECDSA P-256"):
        sign_envelope("node_spec", SPEC, ec.generate_private_key(ec.SECP384R1()))
    envelope = sign_envelope("node_spec", SPEC, generate_node_key())
    with pytest.raises(PkiError, match="ECDSA P-256"):
        open_envelope(envelope, ec.generate_private_key(ec.SECP384R1()).public_key(), "node_spec")


@pytest.mark.parametrize("purpose", ["", "Node_spec", "node_spec\ncommand", "node spec", "1st", "a" * 65])
def test_a_purpose_is_a_lowercase_name(purpose: str) -> None:
    with pytest.raises(PkiError, match="purpose"):
        sign_envelope(purpose, SPEC, ed25519.Ed25519PrivateKey.generate())


def test_a_body_is_bounded() -> None:
    with pytest.raises(PkiError, match="more than 1048576"):
        sign_envelope("inventory", {"blob": "x" * (1 << 20)}, generate_node_key())


# The intent key file.

def test_the_intent_key_file_is_created_private_and_reused(tmp_path: Path) -> None:
    key_file = tmp_path / "keys" / "intent.key"
    first = IntentSigner(key_file).public_key_pem()
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert first.startswith("-----BEGIN PUBLIC KEY-----")
    assert IntentSigner(key_file).public_key_pem() == first
    assert [path.name for path in key_file.parent.iterdir()] == ["intent.key"]


def test_the_intent_key_file_must_hold_an_ed25519_key(tmp_path: Path) -> None:
    CertificateAuthority.open(tmp_path / "ca.key", "fleet.example.com", NOW)
    with pytest.raises(PkiError, match="Ed25519"):
        IntentSigner(tmp_path / "ca.key").sign("node_spec", SPEC)


def test_the_daemon_loads_only_keys_envelopes_use() -> None:
    pem = rsa.generate_private_key(65537, 2048).public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    with pytest.raises(PkiError, match="ECDSA P-256"):
        load_public_key(pem)

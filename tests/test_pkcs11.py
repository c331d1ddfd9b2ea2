"""The CA key and the intent key in a PKCS#11 token (issue 20), against a real software HSM:
Debian's SoftHSM2, a token initialised with `softhsm2-util --init-token` under a private
SOFTHSM2_CONF. Certificates and intents are signed in the token; the private keys' values cannot
be read out of it (C_GetAttributeValue on CKA_VALUE fails); `serve signer` with its CA key in the
token issues the SVIDs of a join through a gateway that holds no key at all.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pkcs11
import psycopg
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from pkcs11 import Attribute, KeyType, Mechanism
from pkcs11.util.ec import encode_named_curve_parameters

from better_compute.pki import CertificateAuthority, IntentSigner, generate_node_key, issue_svid, make_csr, open_envelope
from better_compute.pki.pkcs11 import DEFAULT_MODULE, PIN_VARIABLE, Pkcs11CaKey, Pkcs11IntentKey, Pkcs11Token
from better_compute.pki.svid import verify_svid
from gateway_support import TestNode, running_gateway
from test_gateway import anyio_backend, mint_token, pool_id  # noqa: F401 (fixtures)

TOKEN = "bc-test"
PIN = "20261201"
NOW = datetime(2026, 12, 1, 12, tzinfo=timezone.utc)
TRUST_DOMAIN = "better-compute.local"

pytestmark = pytest.mark.skipif(not DEFAULT_MODULE.exists() or shutil.which("softhsm2-util") is None,
                                reason="SoftHSM2 is not installed (scripts/install-system-deps.sh installs it)")


@pytest.fixture(scope="module")
def softhsm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pkcs11Token]:
    """A SoftHSM2 token holding a P-256 key pair `ca` and an Ed25519 key pair `intent`, both private
    keys sensitive and not extractable (made in the token, as an operator would). One per module:
    the PKCS#11 library reads SOFTHSM2_CONF once per process."""
    directory = tmp_path_factory.mktemp("softhsm")
    (directory / "tokens").mkdir()
    config = directory / "softhsm2.conf"
    config.write_text(f"directories.tokendir = {directory / 'tokens'}\nobjectstore.backend = file\nlog.level = ERROR\n")
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("SOFTHSM2_CONF", str(config))
        environment.setenv(PIN_VARIABLE, PIN)
        yield from token_with_keys()


def token_with_keys() -> Iterator[Pkcs11Token]:
    subprocess.run(["softhsm2-util", "--init-token", "--free", "--label", TOKEN, "--pin", PIN, "--so-pin", "5" + PIN],
                   check=True, capture_output=True)
    private = {Attribute.EXTRACTABLE: False, Attribute.SENSITIVE: True}
    with pkcs11.lib(str(DEFAULT_MODULE)).get_token(token_label=TOKEN).open(user_pin=PIN, rw=True) as session:
        session.create_domain_parameters(KeyType.EC, {Attribute.EC_PARAMS: encode_named_curve_parameters("secp256r1")},
                                         local=True).generate_keypair(store=True, label="ca", private_template=private)
        session.create_domain_parameters(
            KeyType.EC_EDWARDS, {Attribute.EC_PARAMS: encode_named_curve_parameters("1.3.101.112")}, local=True
        ).generate_keypair(store=True, label="intent", mechanism=Mechanism.EC_EDWARDS_KEY_PAIR_GEN,
                           private_template=private)
    token = Pkcs11Token(DEFAULT_MODULE, TOKEN, PIN)
    yield token
    token.session.close()


def test_certificates_are_signed_in_the_token(softhsm: Pkcs11Token, tmp_path: Path) -> None:
    key = Pkcs11CaKey(softhsm, "ca")
    ca = CertificateAuthority.of_key(key, TRUST_DOMAIN, NOW, tmp_path / "ca.crt")
    assert ca.certificate.public_key() == key.public_key()
    node_key, node_id = generate_node_key(), uuid.uuid4()
    certificate = x509.load_pem_x509_certificate(issue_svid(ca, make_csr(node_key, "hsm-node"), node_id, NOW).encode())
    assert verify_svid(ca.certificate, certificate, NOW).node_id == node_id
    assert certificate.public_key() == node_key.public_key()
    key.public_key().verify(certificate.signature, certificate.tbs_certificate_bytes, ec.ECDSA(hashes.SHA256()))
    # The CA certificate (self-signed in the token) is kept, and the same key opens it again.
    again = CertificateAuthority.of_key(Pkcs11CaKey(softhsm, "ca"), TRUST_DOMAIN, NOW, tmp_path / "ca.crt")
    assert again.certificate == ca.certificate


def test_intents_are_signed_in_the_token(softhsm: Pkcs11Token, tmp_path: Path) -> None:
    key = Pkcs11IntentKey(softhsm, "intent")
    signer = IntentSigner(tmp_path / "unused.key", key)
    envelope = signer.sign("spec", {"node_id": str(uuid.uuid4()), "generation": 3, "spec": {}})
    assert open_envelope(envelope, key.public_key(), "spec")["generation"] == 3
    assert "BEGIN PUBLIC KEY" in signer.public_key_pem()
    assert not (tmp_path / "unused.key").exists()  # no key file was made


def test_the_private_keys_cannot_be_read_out_of_the_token(softhsm: Pkcs11Token) -> None:
    for key in (Pkcs11CaKey(softhsm, "ca"), Pkcs11IntentKey(softhsm, "intent")):
        with pytest.raises(pkcs11.exceptions.AttributeSensitive):  # C_GetAttributeValue(CKA_VALUE)
            key.private[Attribute.VALUE]
        assert key.private[Attribute.EXTRACTABLE] is False and key.private[Attribute.SENSITIVE] is True


@pytest.mark.anyio
async def test_a_signer_with_its_ca_key_in_the_token_issues_a_join(
        softhsm: Pkcs11Token, db_dsn: str, sql: psycopg.Connection, pool_id: uuid.UUID,  # noqa: F811
        tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    with running_gateway(db_dsn, keys, signer_extra=["--ca-pkcs11-label", "ca", "--pkcs11-token", TOKEN]) as gateway:
        node = TestNode("hsm-node", 1, tmp_path / "node")
        await node.join(gateway, mint_token(sql, pool_id))
        ca = CertificateAuthority.of_key(Pkcs11CaKey(softhsm, "ca"), TRUST_DOMAIN, NOW, keys / "ca.crt")
        verify_svid(ca.certificate, node.certificate, sql.execute("SELECT now()").fetchone()[0])
    assert not (keys / "ca.key").exists()  # no CA key file anywhere

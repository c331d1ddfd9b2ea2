"""Webhooks end to end: outbox events -> fan-out -> signed POSTs to a real local receiver, retried
with the same delivery id, dead-lettered and replayed; a slow endpoint holds only its own webhook."""

from __future__ import annotations

import datetime
import json
import ssl
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from better_compute.db import Database
from better_compute.sealing import SecretKeyring
from better_compute.webhooks import (
    DELIVERY_HEADER,
    EVENT_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    Delivery,
    encode_body,
    is_public,
    signature,
    verify_signature,
)
from better_compute.worker.resealing import register_and_reseal
from worker_support import Receiver, Received, Reply, running_worker, sealed, sender_for, standard_handlers, wait_until

SECRET = "a-webhook-secret-of-32-characters"
TOLERANCE_SECONDS = 300


@pytest.fixture
def pg(db: psycopg.Connection) -> psycopg.Connection:
    """The test's own session, autocommit; webhook retries after 1 s, 2 s, … instead of 30 s."""
    db.autocommit = True
    db.execute("UPDATE compute.limits SET value = 1 WHERE name = 'webhook_backoff_base_seconds'")
    return db


def webhook(pg: psycopg.Connection, url: str) -> uuid.UUID:
    """A new tenant with one webhook; returns the tenant."""
    tenant = uuid.uuid4()
    pg.execute("SELECT compute.webhook_create(%s, %s, %s)", (tenant, url, sealed(pg, SECRET)))
    return tenant


def emit(pg: psycopg.Connection, tenant: uuid.UUID, count: int) -> list[int]:
    """`count` events of the tenant, one transaction each; returns their event ids."""
    for number in range(count):
        pg.execute("SELECT compute.outbox_emit(%s, 'reservation', %s, 'reservation.created', %s)",
                   (tenant, f"r-{number}", json.dumps({"number": number})))
    rows = pg.execute("SELECT event_id FROM compute.outbox WHERE tenant_id = %s ORDER BY event_id", (tenant,)).fetchall()
    return [event_id for (event_id,) in rows]


def deliveries(pg: psycopg.Connection, state: str) -> int:
    return pg.execute("SELECT count(*) FROM compute.webhook_deliveries WHERE state = %s", (state,)).fetchone()[0]


def signed_properly(request: Received) -> bool:
    return verify_signature(SECRET, request.header(TIMESTAMP_HEADER), request.body, request.header(SIGNATURE_HEADER),
                            TOLERANCE_SECONDS)


def fail_first(attempts: int) -> Callable[[Received, list[Received]], Reply]:
    """An endpoint that answers 500 to the first `attempts` attempts of each delivery, then 200."""
    def answer(request: Received, earlier: list[Received]) -> Reply:
        tries = sum(1 for seen in earlier if seen.header(DELIVERY_HEADER) == request.header(DELIVERY_HEADER))
        return Reply(500 if tries < attempts else 200)
    return answer


def test_signature_checks_body_secret_and_age() -> None:
    body = encode_body({"id": 1, "type": "reservation.created"})
    header = signature(SECRET, 1_900_000_000, body)
    assert header.startswith("v1=")
    assert verify_signature(SECRET, "1900000000", body, header, 300, now=1_900_000_100)
    assert not verify_signature(SECRET, "1900000000", body + b" ", header, 300, now=1_900_000_100)
    assert not verify_signature("another-secret-of-enough-length", "1900000000", body, header, 300, now=1_900_000_100)
    assert not verify_signature(SECRET, "1900000000", body, header, 300, now=1_900_000_301)
    assert not verify_signature(SECRET, "1900000001", body, header, 300, now=1_900_000_100)


@pytest.mark.parametrize("header", ["v1=é", "v1=" + "\u00ff" * 64, "\udcff", "v1=\u2028", ""])
def test_a_signature_header_that_is_not_ascii_is_false_not_an_error(header: str) -> None:
    body = encode_body({"id": 1})
    assert not verify_signature(SECRET, "1900000000", body, header, 300, now=1_900_000_000)


def test_every_event_arrives_signed_and_retries_keep_the_delivery_id(pg: psycopg.Connection, wdb: Database) -> None:
    with Receiver(fail_first(2)) as receiver:
        tenant = webhook(pg, receiver.url)
        events = emit(pg, tenant, 5)
        with running_worker(wdb, standard_handlers(wdb)):
            wait_until(lambda: deliveries(pg, "delivered") == 5, 20, "five deliveries")
        requests = receiver.requests()
    assert all(signed_properly(request) for request in requests)
    by_event: dict[int, list[Received]] = defaultdict(list)
    for request in requests:
        by_event[json.loads(request.body)["id"]].append(request)
    assert sorted(by_event) == events
    for event_id, attempts in by_event.items():
        assert len(attempts) == 3, event_id  # two 500s, then 200
        assert len({attempt.header(DELIVERY_HEADER) for attempt in attempts}) == 1
        assert {attempt.header(EVENT_HEADER) for attempt in attempts} == {"reservation.created"}
        body = json.loads(attempts[0].body)
        assert (body["tenant_id"], body["aggregate"]["type"]) == (str(tenant), "reservation")
    assert len({attempts[0].header(DELIVERY_HEADER) for attempts in by_event.values()}) == 5


def test_a_dead_letter_is_replayed_with_its_delivery_id(pg: psycopg.Connection, wdb: Database) -> None:
    pg.execute("UPDATE compute.limits SET value = 2 WHERE name = 'webhook_attempts'")
    endpoint_up = False
    with Receiver(lambda _request, _earlier: Reply(200 if endpoint_up else 503)) as receiver:
        tenant = webhook(pg, receiver.url)
        [event_id] = emit(pg, tenant, 1)
        with running_worker(wdb, standard_handlers(wdb)):
            wait_until(lambda: pg.execute("SELECT count(*) FROM ops.webhook_dead_letters").fetchone()[0] == 1, 15,
                       "the delivery dead-lettered")
            delivery_id, attempts, status = pg.execute(
                "SELECT delivery_id, attempts, last_status FROM ops.webhook_dead_letters WHERE event_id = %s",
                (event_id,)).fetchone()
            assert (attempts, status) == (2, 503)
            endpoint_up = True
            pg.execute("SELECT ops.webhook_replay(%s)", (delivery_id,))
            wait_until(lambda: deliveries(pg, "delivered") == 1, 10, "the replayed delivery")
        requests = receiver.requests()
    assert [request.header(DELIVERY_HEADER) for request in requests] == [str(delivery_id)] * 3
    assert all(signed_properly(request) for request in requests)
    assert pg.execute("SELECT count(*) FROM ops.webhook_dead_letters").fetchone()[0] == 0


def test_a_slow_endpoint_does_not_delay_another_tenant(pg: psycopg.Connection, wdb: Database) -> None:
    slow_seconds = 2.0
    with Receiver(lambda _request, _earlier: Reply(delay=slow_seconds)) as slow, Receiver() as fast:
        slow_tenant = webhook(pg, slow.url)
        fast_tenant = webhook(pg, fast.url)
        emit(pg, slow_tenant, 2)
        emit(pg, fast_tenant, 3)
        started = time.monotonic()
        with running_worker(wdb, standard_handlers(wdb)):
            wait_until(lambda: len(fast.requests()) == 3, 10, "the fast tenant's events")
            fast_done = time.monotonic() - started
            wait_until(lambda: deliveries(pg, "delivered") == 5, 15, "the slow tenant's events too")
        slow_done = time.monotonic() - started
    assert fast_done < slow_seconds, f"the fast tenant waited {fast_done:.2f} s"
    assert slow_done >= 2 * slow_seconds  # its two deliveries went one after the other


def test_a_timeout_is_a_failed_attempt_with_its_reason(wdb: Database) -> None:
    with Receiver(lambda _request, _earlier: Reply(delay=1.0)) as receiver:
        delivery = Delivery(uuid.uuid4(), "reservation.created", receiver.url, SECRET, {"id": 1})
        result = sender_for(wdb).send(delivery, timeout=0.2)
    assert (result.ok, result.status) == (False, None)
    assert result.error is not None and "timed out" in result.error


def test_a_url_the_sender_cannot_parse_is_a_failed_attempt_not_a_crash(wdb: Database) -> None:
    """The database refuses such URLs now (compute.webhook_url_valid); a row written before that rule
    must still end in a failed attempt with its reason, not in an exception out of the handler."""
    delivery = Delivery(uuid.uuid4(), "reservation.created", "http://[1.2.3.4]/hook", SECRET, {"id": 1})
    result = sender_for(wdb).send(delivery, timeout=0.2)
    assert (result.ok, result.status) == (False, None)
    assert result.error is not None and result.error.startswith("ValueError:")


def test_a_url_that_reaches_this_machine_is_refused_without_a_connection(wdb: Database) -> None:
    """SSRF: by default (`serve worker` without --webhooks-to-private-addresses) a tenant's URL may
    not reach this machine; nothing is sent and the attempt fails with the reason."""
    with Receiver() as receiver:
        delivery = Delivery(uuid.uuid4(), "reservation.created", receiver.url, SECRET, {"id": 1})
        result = sender_for(wdb, private_addresses=False).send(delivery, timeout=2)
        assert receiver.requests() == []
    assert (result.ok, result.status) == (False, None)
    assert result.error == "refused: 127.0.0.1 is not a public address"


@pytest.mark.parametrize("url", ["http://localhost:9/hook", "http://[::1]:9/hook", "http://169.254.169.254/latest/meta-data",
                                 "http://10.1.2.3/hook", "http://[::ffff:192.168.0.1]/hook", "http://100.64.0.1/hook",
                                 "http://224.0.0.1/hook", "http://[64:ff9b::7f00:1]:9/hook", "http://[::7f00:1]:9/hook",
                                 "http://[2002:a9fe:a9fe::1]/latest/meta-data"],
                         ids=["localhost", "ipv6-loopback", "cloud-metadata", "private", "ipv4-mapped-private",
                              "shared-address-space", "multicast", "nat64-loopback", "ipv4-compatible-loopback",
                              "6to4-cloud-metadata"])
def test_a_url_that_reaches_a_non_public_address_is_refused(wdb: Database, url: str) -> None:
    delivery = Delivery(uuid.uuid4(), "reservation.created", url, SECRET, {"id": 1})
    result = sender_for(wdb, private_addresses=False).send(delivery, timeout=0.5)
    assert (result.ok, result.status) == (False, None)
    assert result.error is not None and result.error.startswith("refused: ") and "not a public address" in result.error


@pytest.mark.parametrize(("address", "public"), [
    ("64:ff9b::7f00:1", False), ("64:ff9b::a00:1", False), ("64:ff9b::808:808", True),  # NAT64 (RFC 6052)
    ("64:ff9b:1::808:808", False),  # local-use NAT64 (RFC 8215): where it embeds its IPv4 is the network's choice
    ("::7f00:1", False), ("::a9fe:a9fe", False), ("::808:808", True),  # IPv4-compatible (RFC 4291, deprecated)
    ("2002:7f00:1::1", False), ("2002:a9fe:a9fe::1", False), ("2002:808:808::1", True),  # 6to4 (RFC 3056)
    ("::ffff:7f00:1", False), ("::ffff:808:808", True), ("2001:db8::1", False), ("2606:4700::1111", True),
])
def test_an_ipv6_address_that_embeds_an_ipv4_address_is_judged_by_it(address: str, public: bool) -> None:
    assert is_public(address) is public


def test_the_post_goes_to_a_checked_address_with_the_urls_host(wdb: Database) -> None:
    """The host is resolved once and the connection made to what was resolved and checked, with the
    URL's host in the Host header: no second lookup (DNS rebinding) picks where the signed body goes."""
    with Receiver() as receiver:
        port = receiver.base_url.rsplit(":", 1)[1]
        delivery = Delivery(uuid.uuid4(), "reservation.created", f"http://localhost:{port}/hook?x=1#fragment", SECRET,
                            {"id": 1})
        result = sender_for(wdb).send(delivery, timeout=2)
        [received] = receiver.requests()
    assert (result.ok, result.status) == (True, 200)
    assert (received.path, received.headers["host"]) == ("/hook?x=1", f"localhost:{port}")


def localhost_tls(directory: Path) -> tuple[ssl.SSLContext, Path]:
    """A server context with a self-signed certificate for the name localhost only, and that
    certificate's file (what a sender must trust)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=1)).not_valid_after(now + datetime.timedelta(hours=1))
                   .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
                   .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                   .sign(key, hashes.SHA256()))
    cert_file, key_file = directory / "localhost.crt", directory / "localhost.key"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    return context, cert_file


def test_https_checks_the_urls_host_while_connecting_to_the_checked_address(
        wdb: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """https://localhost:PORT reaches the address the sender resolved and checked, and the TLS
    handshake still names localhost (SNI) and verifies the certificate for it: with the certificate
    trusted (SSL_CERT_FILE) it is delivered; sent to the bare address, the name check fails."""
    server_context, cert_file = localhost_tls(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert_file))
    named = Delivery(uuid.uuid4(), "reservation.created", "https://localhost:{port}/hook", SECRET, {"id": 1})
    with Receiver(tls=server_context) as receiver:
        port = receiver.base_url.rsplit(":", 1)[1]
        by_name = sender_for(wdb).send(replace(named, url=named.url.format(port=port)), timeout=2)
        by_address = sender_for(wdb).send(Delivery(uuid.uuid4(), "reservation.created", receiver.url, SECRET,
                                                   {"id": 2}), timeout=2)
        [received] = receiver.requests()
    assert (by_name.ok, by_name.status) == (True, 200)
    assert received.header(DELIVERY_HEADER) == str(named.delivery_id)
    assert (by_address.ok, by_address.status) == (False, None)
    assert by_address.error is not None and "SSLCertVerificationError" in by_address.error, by_address.error


def test_https_to_an_untrusted_certificate_is_a_failed_attempt(wdb: Database, tmp_path: Path) -> None:
    server_context, _ = localhost_tls(tmp_path)
    with Receiver(tls=server_context) as receiver:
        port = receiver.base_url.rsplit(":", 1)[1]
        result = sender_for(wdb).send(Delivery(uuid.uuid4(), "reservation.created", f"https://localhost:{port}/hook",
                                               SECRET, {"id": 1}), timeout=2)
        assert receiver.requests() == []
    assert (result.ok, result.status) == (False, None)
    assert result.error is not None and "SSLCertVerificationError" in result.error, result.error


# -- secrets at rest (issue 11 C3) ------------------------------------------------------------------

def test_a_new_key_reseals_every_secret_of_the_old_key_the_worker_still_holds(pg: psycopg.Connection, wdb: Database,
                                                                              tmp_path: Path) -> None:
    """Rotation: a worker started with a new --webhook-key and the old one as --webhook-old-key
    registers the new key (what the relay seals to from then on) and reseals every secret of the
    old key to it; deliveries are then signed with the same secret as before."""
    old = SecretKeyring(tmp_path / "old.key")
    with Receiver() as receiver:
        tenant = uuid.uuid4()
        pg.execute("SELECT compute.webhook_create(%s, %s, %s)", (tenant, receiver.url, sealed(pg, SECRET, old)))
        rotated = SecretKeyring(tmp_path / "new.key", [old.current_path])
        assert register_and_reseal(wdb, rotated) == 1
        assert register_and_reseal(wdb, rotated) == 0
        keys = dict(pg.execute("SELECT key_id, webhook_secrets FROM ops.sealing_keys WHERE current").fetchall())
        assert keys == {rotated.key_id: 1}
        key_id, box = pg.execute("SELECT secret_key_id, secret_sealed FROM compute.webhooks").fetchone()
        assert (key_id, SecretKeyring(rotated.current_path).open(key_id, bytes(box))) == (rotated.key_id, SECRET)
        emit(pg, tenant, 1)
        with running_worker(wdb, standard_handlers(wdb, SecretKeyring(rotated.current_path))):
            wait_until(lambda: deliveries(pg, "delivered") == 1, 10, "the delivery")
        assert all(signed_properly(request) for request in receiver.requests())


def test_a_secret_the_worker_cannot_open_is_a_failed_attempt_that_says_why(pg: psycopg.Connection, wdb: Database,
                                                                           tmp_path: Path) -> None:
    """A box sealed to a key this worker was not given is never sent unsigned or wrongly signed: the
    attempt fails with the reason (and is retried, for a worker that holds the key)."""
    with Receiver() as receiver:
        tenant = uuid.uuid4()
        pg.execute("SELECT compute.webhook_create(%s, %s, %s)",
                   (tenant, receiver.url, sealed(pg, SECRET, SecretKeyring(tmp_path / "elsewhere.key"))))
        emit(pg, tenant, 1)
        with running_worker(wdb, standard_handlers(wdb)):
            wait_until(lambda: pg.execute("SELECT count(*) FROM compute.webhook_deliveries WHERE attempts > 0").fetchone()[0],
                       10, "an attempt")
        assert receiver.requests() == []
    [error] = pg.execute("SELECT last_error FROM compute.webhook_deliveries").fetchone()
    assert "which this worker does not hold" in error

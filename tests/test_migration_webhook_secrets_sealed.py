"""Deploying webhook_secrets_sealed over data (issue 11 C3): a migration cannot seal a secret (the
database never holds a private key), so existing plaintext secrets stay, listed in
ops.webhook_secrets_unsealed, until the first worker starts: it reseals them to its key and the
plaintext is gone; their deliveries are then signed with the same secret as before."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path

import psycopg

from better_compute import migrate
from better_compute.sealing import SecretKeyring
from better_compute.webhooks import SIGNATURE_HEADER, TIMESTAMP_HEADER, verify_signature
from better_compute.worker.resealing import register_and_reseal
from worker_support import Receiver, running_worker, standard_handlers, wait_until, worker_database

CHANGE = "webhook_secrets_sealed"
TENANT = uuid.UUID("00000000-0000-4000-8000-0000000000ab")
SECRET = "a-secret-from-before-sealing-0123"


def test_existing_plaintext_secrets_are_resealed_by_the_first_worker_that_starts(empty_database: Callable[[], str],
                                                                                  tmp_path: Path) -> None:
    dsn = empty_database()
    migrate.migrate(dsn)
    names = [change.name for change in migrate.read_plan().changes]
    migrate.revert(dsn, to=names[names.index(CHANGE) - 1])
    with Receiver() as receiver, psycopg.connect(dsn, autocommit=True) as conn:
        webhook_id = conn.execute("SELECT compute.webhook_create(%s, %s, %s)", (TENANT, receiver.url, SECRET)).fetchone()[0]

        migrate.migrate(dsn)
        assert conn.execute("SELECT webhook_id FROM ops.webhook_secrets_unsealed").fetchall() == [(webhook_id,)]

        keys = SecretKeyring(tmp_path / "webhook.key")
        with worker_database(dsn) as wdb:
            assert register_and_reseal(wdb, keys) == 1
            secret, key_id, box = conn.execute("SELECT secret, secret_key_id, secret_sealed FROM compute.webhooks").fetchone()
            assert secret is None and keys.open(key_id, bytes(box)) == SECRET
            assert conn.execute("SELECT count(*) FROM ops.webhook_secrets_unsealed").fetchone() == (0,)

            conn.execute("SELECT compute.outbox_emit(%s, 'reservation', 'r-1', 'reservation.created', %s)",
                         (TENANT, json.dumps({"n": 1})))
            with running_worker(wdb, standard_handlers(wdb, keys)):
                wait_until(lambda: receiver.requests(), 15, "the delivery")
        [request] = receiver.requests()
    assert verify_signature(SECRET, request.header(TIMESTAMP_HEADER), request.body, request.header(SIGNATURE_HEADER), 300)

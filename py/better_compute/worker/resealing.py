"""What a worker does with webhook secrets when it starts (issue 11 C3, docs/worker.md).

It registers its current sealing key (the relay seals new secrets to the newest registered key) and
reseals to it every secret it can open that is not yet sealed to it: plaintext ones left from
before secrets were sealed (a migration cannot seal them: the database never holds a private key)
and boxes of the old keys it was given (--webhook-old-key), so a rotation ends with every secret
under the new key. A box of a key the worker does not hold stays as it is, for a worker that does.
"""

from __future__ import annotations

import logging

from better_compute.db import Database
from better_compute.sealing import SecretKeyring

log = logging.getLogger(__name__)

RESEAL_BATCH = 100


def register_and_reseal(db: Database, keyring: SecretKeyring, batch: int = RESEAL_BATCH) -> int:
    """Register the current key; reseal to it what the worker can open. Returns how many it resealed.
    Stops when a batch changes nothing (another worker resealing the same rows meanwhile)."""
    db.call("worker_api.sealing_key_register", keyring.key_id, keyring.public_key)
    resealed = 0
    while True:
        done = 0
        for row in db.rows("worker_api.webhook_secrets_to_reseal", keyring.key_id, keyring.key_ids, batch):
            secret = row["secret"] if row["secret"] is not None else keyring.open(row["secret_key_id"],
                                                                                  bytes(row["secret_sealed"]))
            box = keyring.seal(secret)
            done += bool(db.call("worker_api.webhook_secret_resealed", row["webhook_id"], row["secret_key_id"],
                                 box.key_id, box.box))
        resealed += done
        if not done:
            break
    if resealed:
        log.info("resealed %d webhook secrets to sealing key %s", resealed, keyring.key_id)
    return resealed

"""Secrets are sealed before they reach the database (P14, issue 11 C3).

A field whose rule in the method's input schema names `x-sealed-as` (webhooks.create's `secret`) is
taken out of the document and replaced by its box under that name (`sealed_secret`), sealed to the
worker's public key (api.sealing_key(), the newest a worker registered). So the admission, IAM's
attributes, the resolver and the webhook row only ever see the box, and only the worker opens it.
The database refuses the plaintext field itself (compute.input_check), so psql cannot store one
either. No per-method code: the catalog says which fields.

With an idempotency_key, the box is derived from the request (sealing.seal's `context`), so a
retried request seals to the same box: its request hash matches and it replays.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from better_compute.db import AsyncDatabase
from better_compute.relay.catalog import Method
from better_compute.relay.envelope import invalid_argument, unavailable
from better_compute.sealing import seal

SEALED_AS = "x-sealed-as"
IDEMPOTENCY_KEY = "idempotency_key"


def sealed_fields(schema: Mapping[str, Any]) -> dict[str, str]:
    """field -> the field its box goes to, for every property whose rule names x-sealed-as."""
    return {name: rule[SEALED_AS] for name, rule in schema.get("properties", {}).items() if SEALED_AS in rule}


async def seal_fields(db: AsyncDatabase, method: Method, tenant: uuid.UUID, document: dict[str, Any]) -> dict[str, Any]:
    """The document with its plaintext secrets replaced by their boxes (unchanged when it has none)."""
    fields = {name: target for name, target in sealed_fields(method.input.schema).items()
              if document.get(name) is not None}
    if not fields:
        return document
    key = await db.call("api.sealing_key")
    if key is None:
        raise unavailable("no worker has registered a sealing key yet",
                          "Start a worker (better-compute serve worker) once: it registers the key secrets are sealed to.")
    sealed = dict(document)
    for name, target in fields.items():
        if document.get(target) is not None:
            raise invalid_argument(f"send {name} or {target}, not both", f"{name} is sealed into {target} here.")
        context = None
        if document.get(IDEMPOTENCY_KEY) is not None:
            context = "\n".join((str(tenant), method.name, name, str(document[IDEMPOTENCY_KEY]))).encode()
        sealed[target] = seal(bytes.fromhex(key["public_key"]), sealed.pop(name), context).text()
    return sealed

"""The ledger port (DESIGN §7, §10): where usage goes to be billed.

An entry carries an idempotency key (`usage:{reservation}:{window}` for usage windows): a ledger
keeps one entry per key, so an entry sent twice (a worker killed between sending and marking it
sent) is billed once (P3). Adapters: `LocalLedger` (the table compute.ledger_entries, the embedded
default) and `BetterIamLedger` (Better IAM's `billing.record` in its operation envelope).
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Protocol
from uuid import UUID

from better_compute.db import Database

ANSWER_BYTES_MAX = 65536
DEFAULT_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True)
class LedgerEntry:
    idempotency_key: str
    tenant_id: UUID
    meter: str
    quantity: Decimal
    attributes: Mapping[str, Any]  # JSON values only


class Ledger(Protocol):
    def record(self, entry: LedgerEntry) -> None:
        """Record the entry once per idempotency key (recording a known key again is a success);
        raise when it could not be recorded."""


class LedgerError(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class LocalLedger:
    def __init__(self, db: Database):
        self.db = db

    def record(self, entry: LedgerEntry) -> None:
        self.db.call("worker_api.ledger_record_local", entry.idempotency_key, entry.tenant_id, entry.meter,
                     entry.quantity, dict(entry.attributes))


class BetterIamLedger:
    """POST {base}/billing.record with `{data: entry}`, `X-Better-IAM: 1`, `Idempotency-Key` and the
    bearer credential; the answer is `{data}` (recorded) or `{error: {code, message}}`."""

    def __init__(self, base_url: str, token: str, timeout: float = DEFAULT_TIMEOUT_SECONDS):
        self.url = f"{base_url.rstrip('/')}/billing.record"
        self.token = token
        self.timeout = timeout

    def record(self, entry: LedgerEntry) -> None:
        answer = self.post(entry)
        if isinstance(answer.get("error"), dict):
            error = answer["error"]
            raise LedgerError(str(error.get("code", "UNKNOWN")), str(error.get("message", "")))
        if "data" not in answer:
            raise LedgerError("INVALID_ANSWER", f"billing.record answered neither data nor error: {answer!r:.200}")

    def post(self, entry: LedgerEntry) -> dict[str, Any]:
        document = {"tenant_id": str(entry.tenant_id), "meter": entry.meter, "quantity": str(entry.quantity),
                    "attributes": dict(entry.attributes)}
        request = urllib.request.Request(self.url, data=json.dumps({"data": document}).encode(), method="POST", headers={
            "Content-Type": "application/json",
            "X-Better-IAM": "1",
            "Idempotency-Key": entry.idempotency_key,
            "Authorization": f"Bearer {self.token}",
        })
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return parse_answer(response.read(ANSWER_BYTES_MAX))
        except urllib.error.HTTPError as error:  # an error status carries the error envelope
            answer = parse_answer(error.read(ANSWER_BYTES_MAX), f"HTTP {error.code}")
            if not isinstance(answer.get("error"), dict):
                raise LedgerError("INVALID_ANSWER", f"billing.record answered HTTP {error.code} without an error") from error
            return answer
        except (OSError, http.client.HTTPException) as error:
            raise LedgerError("UNAVAILABLE", f"{self.url}: {error}") from error


def parse_answer(raw: bytes, status: str = "") -> dict[str, Any]:
    try:
        answer = json.loads(raw)
    except ValueError as error:
        raise LedgerError("INVALID_ANSWER", f"billing.record answered {status} non-JSON: {raw[:200]!r}") from error
    if not isinstance(answer, dict):
        raise LedgerError("INVALID_ANSWER", f"billing.record answered {status} {answer!r:.200}")
    return answer

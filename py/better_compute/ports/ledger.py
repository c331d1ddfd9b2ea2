"""The ledger port (docs/architecture.md §7, §10): where usage goes to be billed.

An entry carries an idempotency key (`usage:{reservation}:{window}` for usage windows): a ledger
keeps one entry per key, so an entry sent twice (a worker killed between sending and marking it
sent) is billed once (P3). Adapters:

- `LocalLedger` (the embedded default): the table compute.ledger_entries.
- `BetterIamLedger`: Better IAM's `billing.record` over HTTP, the route its server serves
  (repository Better-IAM/better-iam): `POST {base}/billing/record` (`packages/server/src/http.ts`
  dispatches `{group}/{method}` to the API; the `billing` group is `packages/server/src/api/billing.ts`),
  with `Content-Type: application/json`, `X-Better-IAM: 1` and `Authorization: Bearer` (a service
  account's API key). The body is `UsageInput` (`packages/server/src/billing.ts`): `{tenantId, meter,
  quantity (a JSON number), occurredAt (epoch ms), idempotencyKey, tags}`. It is an operation needing
  `iam:billing:record` on `iam/billing/meters/{meter}` in `tenantId`; `billing-service.ts` `record`
  keeps one usage event per tenant and idempotency key (`idem:{key}`): a repeat records nothing and
  answers the first receipt with `duplicate: true`. The answer is `{data: receipt}` or
  `{error: {code, message}}`. Better IAM's credential-free `iam.billing.record` is for code inside
  its own server process only; nothing outside reaches it.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
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
    occurred_at: datetime | None = None  # when the usage happened (a window's start); None: when recorded


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
    """Better IAM's `billing/record` (module docstring); every failure raises LedgerError with Better
    IAM's error code, INVALID_ANSWER or UNAVAILABLE."""

    def __init__(self, base_url: str, token: str, timeout: float = DEFAULT_TIMEOUT_SECONDS):
        """`base_url` includes Better IAM's base path (`https://iam.example/api/iam`); `token` is a
        service account's API key holding `iam:billing:record` in the tenants it records for."""
        self.url = f"{base_url.rstrip('/')}/billing/record"
        self.token = token
        self.timeout = timeout

    def record(self, entry: LedgerEntry) -> None:
        answer = self.post(usage_input(entry))
        if isinstance(answer.get("error"), dict):
            error = answer["error"]
            raise LedgerError(str(error.get("code", "UNKNOWN")), str(error.get("message", "")))
        receipt = answer.get("data")
        if not isinstance(receipt, dict) or not isinstance(receipt.get("duplicate"), bool):
            raise LedgerError("INVALID_ANSWER", f"billing/record answered no receipt: {answer!r:.200}")

    def post(self, body: Mapping[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(self.url, data=json.dumps(body).encode(), method="POST", headers={
            "Content-Type": "application/json",
            "X-Better-IAM": "1",
            "Authorization": f"Bearer {self.token}",
        })
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return parse_answer(response.read(ANSWER_BYTES_MAX))
        except urllib.error.HTTPError as error:  # an error status carries the error envelope
            answer = parse_answer(error.read(ANSWER_BYTES_MAX), f"HTTP {error.code}")
            if not isinstance(answer.get("error"), dict):
                raise LedgerError("INVALID_ANSWER", f"billing/record answered HTTP {error.code} without an error") from error
            return answer
        except (OSError, http.client.HTTPException) as error:
            raise LedgerError("UNAVAILABLE", f"{self.url}: {error}") from error


def usage_input(entry: LedgerEntry) -> dict[str, Any]:
    """Better IAM's `UsageInput` for an entry: its attributes become tags (text values; nulls left
    out), its time `occurredAt`, so usage lands in the billing period it happened in."""
    body: dict[str, Any] = {"tenantId": str(entry.tenant_id), "meter": entry.meter,
                            "quantity": json_number(entry.quantity)}
    if entry.occurred_at is not None:
        body["occurredAt"] = round(entry.occurred_at.timestamp() * 1000)
    body["idempotencyKey"] = entry.idempotency_key
    tags = {name: value if isinstance(value, str) else json.dumps(value)
            for name, value in entry.attributes.items() if value is not None}
    if tags:
        body["tags"] = tags
    return body


def json_number(value: Decimal) -> int | float:
    """Better IAM takes a quantity as a JSON number: whole ones exactly, others as a float."""
    return int(value) if value == value.to_integral_value() else float(value)


def parse_answer(raw: bytes, status: str = "") -> dict[str, Any]:
    try:
        answer = json.loads(raw)
    except ValueError as error:
        raise LedgerError("INVALID_ANSWER", f"billing/record answered {status} non-JSON: {raw[:200]!r}") from error
    if not isinstance(answer, dict):
        raise LedgerError("INVALID_ANSWER", f"billing/record answered {status} {answer!r:.200}")
    return answer

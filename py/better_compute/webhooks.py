"""Webhook signing and sending (DESIGN §9): HMAC-SHA256 over `timestamp.body`, one POST per attempt.

The body is the delivery's JSON, compact. Headers:
  Content-Type: application/json
  X-Better-Compute-Event: <event type>
  X-Better-Compute-Delivery: <delivery id, the same on every attempt: receivers deduplicate by it>
  X-Better-Compute-Timestamp: <unix seconds, from the Clock (business time)>
  X-Better-Compute-Signature: v1=<hex HMAC-SHA256(secret, f"{timestamp}.{body}")>
A receiver checks the signature and the timestamp's age with `verify_signature`.

Any 2xx answer is delivered; anything else (another status, a redirect, a timeout, a refused
connection, a URL urllib cannot parse) is a failed attempt with its reason. Retries and dead
letters are the database's.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from better_compute.clock import Clock

SIGNATURE_VERSION = "v1"
EVENT_HEADER = "X-Better-Compute-Event"
DELIVERY_HEADER = "X-Better-Compute-Delivery"
TIMESTAMP_HEADER = "X-Better-Compute-Timestamp"
SIGNATURE_HEADER = "X-Better-Compute-Signature"
USER_AGENT = "better-compute-webhooks/1"
RESPONSE_BYTES_READ = 4096  # the answer's body is not used; read a little so the connection ends cleanly


@dataclass(frozen=True)
class Delivery:
    """One attempt's input, as worker_api.webhook_due returns it."""

    delivery_id: UUID
    event_type: str
    url: str
    secret: str
    body: Mapping[str, Any]

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Delivery:
        return cls(row["delivery_id"], row["event_type"], row["url"], row["secret"], row["body"])


@dataclass(frozen=True)
class DeliveryResult:
    ok: bool
    status: int | None
    error: str | None


def encode_body(body: Mapping[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()


def signature(secret: str, timestamp: int, body: bytes) -> str:
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"{SIGNATURE_VERSION}={digest}"


def verify_signature(secret: str, timestamp: str | int, body: bytes, header: str, tolerance: float,
                     now: float | None = None) -> bool:
    """For receivers: the signature header matches the body and timestamp, and the timestamp is
    within `tolerance` seconds of `now` (the receiver's own clock when not given)."""
    try:
        sent_at = int(timestamp)
    except (TypeError, ValueError):
        return False
    if abs((time.time() if now is None else now) - sent_at) > tolerance:
        return False
    return hmac.compare_digest(signature(secret, sent_at, body), header)


def signed_request(delivery: Delivery, timestamp: int) -> urllib.request.Request:
    body = encode_body(delivery.body)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        EVENT_HEADER: delivery.event_type,
        DELIVERY_HEADER: str(delivery.delivery_id),
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: signature(delivery.secret, timestamp, body),
    }
    return urllib.request.Request(delivery.url, data=body, headers=headers, method="POST")


class RedirectsAreAnswers(urllib.request.HTTPRedirectHandler):
    """A redirect is the endpoint's answer (a failed attempt), never followed with the signed body."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class WebhookSender:
    def __init__(self, clock: Clock):
        self.clock = clock
        self.opener = urllib.request.build_opener(RedirectsAreAnswers)

    def send(self, delivery: Delivery, timeout: float) -> DeliveryResult:
        try:
            request = signed_request(delivery, int(self.clock.now().timestamp()))
            with self.opener.open(request, timeout=timeout) as response:  # answers other than 2xx raise HTTPError
                response.read(RESPONSE_BYTES_READ)
                return DeliveryResult(True, response.status, None)
        except urllib.error.HTTPError as error:
            return DeliveryResult(False, error.code, f"HTTP {error.code} {error.reason}")
        except (OSError, http.client.HTTPException, ValueError) as error:  # ValueError: a URL urllib cannot parse
            return DeliveryResult(False, None, f"{type(error).__name__}: {getattr(error, 'reason', error)}")

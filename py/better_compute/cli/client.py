"""The HTTP client of the API relay: one POST per method, the `{"data"}` / `{"error"}` envelope.

Every failure becomes an `ApiError` with a stable code, so that the commands print errors one way
(`CODE: message`, `Hint: …`) whether the relay answered one or the network failed before it could.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from uuid import uuid4

if TYPE_CHECKING:
    import httpx  # imported where used: `--help` and commands without a relay never load it

CALL_TIMEOUT_SECONDS = 30.0
RETRY_PAUSE_SECONDS = 0.5
RELAY_HINT = "Check --url (or BETTER_COMPUTE_URL, or the profile) and that `better-compute serve api` runs there."


class ApiError(Exception):
    """An error envelope, or a client-side failure given a code of the same shape."""

    def __init__(self, code: str, message: str, hint: str | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.hint = hint


@dataclass(frozen=True)
class Settings:
    """Where the relay is and who is asking (already resolved from flags, environment, profile)."""

    url: str
    token: str | None = None
    tenant: str | None = None

    def headers(self) -> dict[str, str]:
        headers = {"X-Better-Compute": "1"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if self.tenant:
            headers["X-Tenant-Id"] = self.tenant
        return headers


def connection_error(settings: Settings, error: httpx.TransportError) -> ApiError:
    reason = str(error) or type(error).__name__
    return ApiError("CONNECTION_ERROR", f"cannot reach {settings.url}: {reason}", RELAY_HINT)


def answer_error(response: httpx.Response) -> ApiError:
    """The error of an answer that is not a success: its error envelope, or HTTP_ERROR when it has none
    (a proxy's page, another server on that URL)."""
    error = envelope(response).get("error")
    if isinstance(error, dict):
        return ApiError(str(error.get("code", "ERROR")), str(error.get("message", "")), error.get("hint"))
    return ApiError("HTTP_ERROR", f"{response.status_code} {response.reason_phrase} from {response.url} "
                                  "is not a Better Compute answer", RELAY_HINT)


def envelope(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def unwrap(response: httpx.Response) -> Any:
    """The data of a success envelope; raises the answer's ApiError otherwise."""
    body = envelope(response)
    if response.is_success and "data" in body:
        return body["data"]
    raise answer_error(response)


class Client:
    """Calls methods on one relay. A call that fails on the network is sent once more with the same
    body: reads are safe to repeat, and every mutation carries an idempotency key, so the relay
    answers a repeated mutation with the stored result instead of doing it twice."""

    def __init__(self, settings: Settings) -> None:
        import httpx

        self.settings = settings
        self.httpx = httpx
        self.http = httpx.Client(headers=settings.headers(), timeout=CALL_TIMEOUT_SECONDS)

    def call(self, method: str, body: dict[str, Any], *, mutation: bool, retry: bool = True) -> Any:
        """POST one method. A mutation gets a fresh idempotency key unless the body has one; `retry`
        is False only for a method the catalog does not know (it may be a mutation without a key)."""
        group, _, name = method.partition(".")
        if mutation:
            body = {"idempotency_key": str(uuid4()), **body}
        url = f"{self.settings.url}/api/compute/{group}/{name}"
        attempts = 2 if retry else 1
        for attempt in range(1, attempts + 1):
            try:
                response = self.http.post(url, json=body)
            except self.httpx.TransportError as error:
                if attempt == attempts:
                    raise connection_error(self.settings, error) from error
                time.sleep(RETRY_PAUSE_SECONDS)
            else:
                return unwrap(response)
        raise AssertionError("unreachable: the last attempt returns or raises")

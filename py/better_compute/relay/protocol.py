"""The relay's HTTP bounds (P12) and uvicorn's h11 protocol with the two it lacks.

uvicorn bounds the idle time between requests (keep-alive) and, with `limit_concurrency`, answers
503 once as many connections or requests as the bound are open. It has no time bound on receiving a
request: a client that opens a connection and sends nothing, or sends its head or body a byte at a
time (slowloris), holds the connection for ever. And h11's bound on the head's size only counts a
head that arrives in pieces. `BoundedH11Protocol` adds: the head must arrive within `head_seconds`
of the connection opening (or of the previous answer's end), the body within `body_seconds` of the
head, otherwise the connection is closed (an application reading the body sees the client leave);
a head over `head_bytes` is answered 431; a connection beyond `max_connections` is answered 503.
Those two answers come before any request is parsed, so they are written here, and the connection
closed. A deadline covers receiving only: a long answer (an event stream) is not cut.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from better_compute.errors import RETRY_AFTER_SECONDS, UNAVAILABLE

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HttpBounds:
    """Every bound of the relay's HTTP side; `serve api` takes each as an option, with these defaults."""

    head_seconds: float = 10.0  # the request line and headers, from the connection's start or the last answer's end
    body_seconds: float = 30.0  # the body (at most http_body_bytes), from the end of its head
    keep_alive_seconds: float = 5.0  # an idle connection between requests (uvicorn's timeout_keep_alive)
    max_connections: int = 1000  # open at once (event streams included); at the bound, requests are answered 503
    head_bytes: int = 16 * 1024  # the request line and headers; a larger head is answered 431


HEAD_END = b"\r\n\r\n"


def raw_answer(status: HTTPStatus, code: str, message: str, hint: str, headers: str = "") -> bytes:
    """A complete answer with the error envelope, written before h11 has a request to answer."""
    body = json.dumps({"error": {"code": code, "message": message, "hint": hint}}).encode()
    head = (f"HTTP/1.1 {status.value} {status.phrase}\r\ncontent-type: application/json\r\n{headers}"
            f"connection: close\r\ncontent-length: {len(body)}\r\n\r\n")
    return head.encode() + body


def over_the_bound(bound: int) -> bytes:
    return raw_answer(HTTPStatus.SERVICE_UNAVAILABLE, UNAVAILABLE[0], f"this relay has {bound} connections open, "
                      "its bound", "Connect again later or to another relay.", f"retry-after: {RETRY_AFTER_SECONDS}\r\n")


def head_too_large(bound: int) -> bytes:
    return raw_answer(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "INVALID_ARGUMENT",
                      f"the request line and headers are larger than {bound} bytes", "Send shorter headers.")


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with deadlines on receiving a request and a bound on connections."""

    def __init__(self, *args: Any, bounds: HttpBounds, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.bounds = bounds
        self.awaiting: str | None = None  # "head" or "body": what the deadline is for
        self.deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.bounds.max_connections:
            log.warning("refused a connection: %d are open, the bound", self.bounds.max_connections)
            self.refuse(over_the_bound(self.bounds.max_connections))
            return
        self.follow()

    def data_received(self, data: bytes) -> None:
        if self.conn.their_state is h11.IDLE and self.head_over_the_bound(data):
            self.refuse(head_too_large(self.bounds.head_bytes))
            return
        super().data_received(data)
        self.follow()

    def head_over_the_bound(self, data: bytes) -> bool:
        """Whether the head being received, with `data`, is longer than head_bytes (counted to its end)."""
        pending = self.conn.trailing_data[0] + data  # at most head_bytes + one read: bigger ones are refused
        end = pending.find(HEAD_END)
        return (len(pending) if end < 0 else end + len(HEAD_END)) > self.bounds.head_bytes

    def refuse(self, answer: bytes) -> None:
        self.transport.write(answer)
        self.transport.close()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self.follow()

    def connection_lost(self, exc: Exception | None) -> None:
        self.expect(None)
        super().connection_lost(exc)

    def follow(self) -> None:
        """Keep the deadline of what the connection waits for from the client (none while it answers)."""
        state = self.conn.their_state
        self.expect("head" if state is h11.IDLE else "body" if state is h11.SEND_BODY else None)

    def expect(self, part: str | None) -> None:
        if part == self.awaiting:
            return  # a deadline runs from when the part was first awaited: more bytes do not extend it
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None
        self.awaiting = part
        if part is not None and not self.transport.is_closing():
            seconds = self.bounds.head_seconds if part == "head" else self.bounds.body_seconds
            self.deadline = self.loop.call_later(seconds, self.expired, part, seconds)

    def expired(self, part: str, seconds: float) -> None:
        self.deadline = None
        if self.transport.is_closing():
            return
        if part == "body" or self.conn.trailing_data[0]:  # an idle keep-alive connection just ends
            client = "%s:%d" % self.client if self.client else "?"
            log.info("closed the connection of %s: the request %s took more than %g s", client, part, seconds)
        self.transport.close()

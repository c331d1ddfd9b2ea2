"""The relay's HTTP bounds (P12) and uvicorn's h11 protocol with the two it lacks.

uvicorn bounds the head's size (h11), the idle time between requests (keep-alive) and, with
`limit_concurrency`, answers 503 once as many connections or requests as the bound are open. It
has no time bound on receiving a request: a client that opens a connection and sends nothing, or
sends its head or body a byte at a time (slowloris), holds the connection for ever.
`BoundedH11Protocol` adds those deadlines: the head must arrive within `head_seconds` of the
connection opening (or of the previous answer's end), the body within `body_seconds` of the head;
otherwise the connection is closed (an application reading the body sees the client leave). A
deadline covers receiving only: a long answer (an event stream) is not cut. A connection beyond
`max_connections` is answered 503 and closed at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
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
    head_bytes: int = 16 * 1024  # the request line and headers (h11); a larger head is answered 400


def over_the_bound_answer(bound: int) -> bytes:
    """A complete 503 with the error envelope, for a connection beyond max_connections."""
    body = json.dumps({"error": {"code": UNAVAILABLE[0], "message": f"this relay has {bound} connections open, its "
                                 "bound", "hint": "Connect again later or to another relay."}}).encode()
    head = (f"HTTP/1.1 {UNAVAILABLE[1]} Service Unavailable\r\ncontent-type: application/json\r\n"
            f"retry-after: {RETRY_AFTER_SECONDS}\r\nconnection: close\r\ncontent-length: {len(body)}\r\n\r\n")
    return head.encode() + body


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
            transport.write(over_the_bound_answer(self.bounds.max_connections))
            transport.close()
            return
        self.follow()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self.follow()

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

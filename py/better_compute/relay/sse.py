"""GET /api/compute/watch: a tenant's events as Server-Sent Events (docs/architecture.md §9).

One `Notifier` per relay LISTENs on `bc_outbox` (a content-free NOTIFY from one transaction at a
time that wrote events: compute.wake_at_commit) and wakes every stream, which re-reads `api.events` after its
cursor, at once and again LOOK_AGAIN_SECONDS later (for writers that committed just after the one
that notified); each stream also polls, so a lost notification or a dropped LISTEN connection only delays.

Each stream has a bounded buffer between the database and the client: the relay never holds more
than `buffer` events for one client (a client catching up is fed as fast as it reads, the rest
stays in the database). A client too slow to take anything for `stall_seconds` (its buffer full,
its socket not draining) is closed: it resumes with `Last-Event-ID` (each event's `id:` is its
cursor) and loses nothing.

A stream ends by cancelling its tasks, and a cancellation can be lost: on Python 3.11,
`asyncio.wait_for` returns the result of what it waited for when that is ready as the cancellation
arrives, and psycopg_pool waits for a free connection with it. So a stream cancels its tasks until
they have ended (`cancel_and_wait`): a producer that got a connection instead of its cancellation
must not keep the stream's slot and poll `api.events` for nobody. The stream's three tasks (the
producer, the sender, the watch for the client leaving) are siblings with no cleanup of their own
to interrupt.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from prometheus_client import Counter
from psycopg import sql
from starlette.types import Message, Receive, Scope, Send

from better_compute.db import LOOK_AGAIN_SECONDS, AsyncDatabase
from better_compute.errors import ContractError

log = logging.getLogger(__name__)

CHANNEL = "bc_outbox"
PAGE = 100  # events one api.events call asks for
RECONNECT_SECONDS = 1.0
CANCEL_AGAIN_SECONDS = 1.0  # how long a cancelled task may take to end before it is cancelled again
HEARTBEAT = b": heartbeat\n\n"
HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache"),
           (b"x-accel-buffering", b"no")]  # proxies (nginx) must not buffer a stream


@dataclass(frozen=True)
class StreamSettings:
    heartbeat_seconds: float = 15.0
    poll_seconds: float = 1.0
    buffer: int = 1000  # events held for one client
    stall_seconds: float = 10.0  # how long one write may wait for a client that does not read
    max_streams: int = 100  # open streams per relay


class Notifier:
    """The relay's one LISTEN connection, shared by all streams."""

    def __init__(self, db: AsyncDatabase):
        self.db = db
        self.wakeups: set[asyncio.Event] = set()

    def subscribe(self) -> asyncio.Event:
        wakeup = asyncio.Event()
        self.wakeups.add(wakeup)
        return wakeup

    def unsubscribe(self, wakeup: asyncio.Event) -> None:
        self.wakeups.discard(wakeup)

    def wake_all(self) -> None:
        for wakeup in self.wakeups:
            wakeup.set()

    async def run(self) -> None:
        """LISTEN until cancelled; reconnect after a failure (streams poll meanwhile)."""
        while True:
            try:
                async with await self.db.connect() as conn:
                    await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(CHANNEL)))
                    self.wake_all()  # events committed while not listening
                    look_again: asyncio.TimerHandle | None = None
                    try:
                        async for _notify in conn.notifies():
                            self.wake_all()
                            if look_again is None or look_again.when() <= asyncio.get_running_loop().time():
                                look_again = asyncio.get_running_loop().call_later(LOOK_AGAIN_SECONDS, self.wake_all)
                    finally:
                        if look_again is not None:
                            look_again.cancel()
            except (psycopg.Error, OSError) as error:
                log.warning("LISTEN %s lost (%s); event streams poll until it is back", CHANNEL, error)
                await asyncio.sleep(RECONNECT_SECONDS)


class Stalled(Exception):
    """The client took nothing for stall_seconds."""


class Closed:
    """The last item of a stream's buffer: the stream ends (the relay stops, the database failed)."""


CLOSED = Closed()


class EventStream:
    """One client's stream: `produce()` fills the bounded buffer, `send_to()` drains it."""

    def __init__(self, db: AsyncDatabase, tenant: uuid.UUID, cursor: str | None, settings: StreamSettings,
                 wakeup: asyncio.Event, stopping: asyncio.Event, reads: Counter):
        self.db = db
        self.reads = reads
        self.tenant = tenant
        self.cursor = cursor
        self.settings = settings
        self.wakeup = wakeup
        self.stopping = stopping
        self.buffer: asyncio.Queue[dict[str, Any] | Closed] = asyncio.Queue(maxsize=settings.buffer)

    @property
    def page(self) -> int:
        return min(PAGE, self.settings.buffer)

    async def fetch(self) -> int:
        """Read the next page into the buffer (waiting while it is full: the events stay in the
        database meanwhile); how many came. A ContractError (a bad Last-Event-ID) propagates."""
        self.reads.inc()
        page = await self.db.call("api.events", self.tenant, self.cursor, self.page)
        for event in page["events"]:
            await self.buffer.put(event)
        self.cursor = page["next"] or self.cursor
        return len(page["events"])

    async def produce(self) -> None:
        """Fill the buffer until the relay stops or the database fails; then end the stream."""
        try:
            while not self.stopping.is_set():
                self.wakeup.clear()
                if await self.fetch() < self.page:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.wakeup.wait(), self.settings.poll_seconds)
        except ContractError as error:
            log.warning("event stream of tenant %s closed: %s", self.tenant, error)
        except Exception:  # whatever broke, the stream must end rather than send heartbeats forever
            log.exception("event stream of tenant %s failed", self.tenant)
        self.close()

    def close(self) -> None:
        """Drop what the client has not taken (it resumes from the last id it saw) and end the stream."""
        while not self.buffer.empty():
            self.buffer.get_nowait()
        self.buffer.put_nowait(CLOSED)

    async def send_to(self, send: Send) -> None:
        """Events as they come, a heartbeat comment after each quiet interval, until CLOSED or until
        the client stalls."""
        try:
            await self.deliver(send, {"type": "http.response.start", "status": 200, "headers": HEADERS})
            while True:
                try:
                    async with asyncio.timeout(self.settings.heartbeat_seconds):
                        item = await self.buffer.get()
                except TimeoutError:
                    await self.deliver(send, body(HEARTBEAT))
                    continue
                if isinstance(item, Closed):
                    break
                await self.deliver(send, body(encode(item)))
            await self.deliver(send, {"type": "http.response.body", "body": b"", "more_body": False})
        except Stalled:
            log.info("event stream of tenant %s closed: the client took nothing for %g s",
                     self.tenant, self.settings.stall_seconds)

    async def deliver(self, send: Send, message: Message) -> None:
        """Send one message; a client whose socket does not drain for stall_seconds is too slow."""
        try:
            async with asyncio.timeout(self.settings.stall_seconds):
                await send(message)
        except TimeoutError as timeout:
            raise Stalled from timeout


class EventStreamResponse:
    """The ASGI answer of a stream. It owns the stream's end: the client going away (http.disconnect)
    cancels the sending, and `on_close` runs exactly once however the stream ended."""

    def __init__(self, stream: EventStream, on_close: Callable[[], None]):
        self.stream = stream
        self.on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        producing = asyncio.create_task(self.stream.produce())
        sending = asyncio.create_task(self.stream.send_to(send))
        watching = asyncio.create_task(disconnected(receive))
        try:  # the producer ends by closing the buffer, which ends the sending
            await asyncio.wait({sending, watching}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (producing, sending, watching):
                await cancel_and_wait(task)
            self.on_close()


async def cancel_and_wait(task: asyncio.Task[Any]) -> None:
    """Cancel `task`, again while it runs on (a lost cancellation, see above), until it has ended."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=CANCEL_AGAIN_SECONDS)
    if not task.cancelled() and task.exception() is not None:
        log.error("event stream task failed", exc_info=task.exception())


async def disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def body(chunk: bytes) -> Message:
    return {"type": "http.response.body", "body": chunk, "more_body": True}


def encode(event: dict[str, Any]) -> bytes:
    """One SSE message; json.dumps escapes newlines, so `data:` is one line."""
    return f"id: {event['id']}\ndata: {json.dumps(event, separators=(',', ':'))}\n\n".encode()

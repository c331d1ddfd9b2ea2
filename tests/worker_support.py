"""What the worker tests share: a real HTTP receiver on 127.0.0.1, an in-process Worker running as
bc_worker against the test database, and a bounded wait."""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import tempfile

import psycopg

from better_compute.audit import AuditSigner
from better_compute.clock import Clock
from better_compute.db import Database
from better_compute.pki import IntentSigner
from better_compute.ports.ledger import LocalLedger
from better_compute.sealing import SecretKeyring
from better_compute.webhooks import WebhookSender
from better_compute.worker.handlers import default_handlers
from better_compute.worker.runtime import Handler, Worker, WorkerSettings

REPO = Path(__file__).resolve().parent.parent
WORKER_ROLE = "bc_worker"


def wait_until(condition: Callable[[], object], timeout: float, what: str, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


@dataclass(frozen=True)
class Received:
    path: str
    headers: Mapping[str, str]
    body: bytes
    arrived: float  # time.monotonic()

    def header(self, name: str) -> str:
        return self.headers[name.lower()]


@dataclass(frozen=True)
class Reply:
    status: int = 200
    delay: float = 0.0
    body: bytes = b"{}"


@dataclass
class Receiver:
    """An HTTP server in a thread; `answer` decides each reply from the request (and what came before).
    With `tls` (a server context) it answers https."""

    answer: Callable[[Received, list[Received]], Reply] = lambda _request, _earlier: Reply()
    tls: ssl.SSLContext | None = None
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        assert self.server is not None
        host, port = self.server.server_address[:2]
        return f"{'https' if self.tls else 'http'}://{host}:{port}"

    @property
    def url(self) -> str:
        return f"{self.base_url}/hook"

    def requests(self) -> list[Received]:
        with self.lock:
            return list(self.received)

    def __enter__(self) -> Receiver:
        receiver = self

        class Handle(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                request = Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body, time.monotonic())
                with receiver.lock:
                    earlier = list(receiver.received)
                    receiver.received.append(request)
                reply = receiver.answer(request, earlier)
                time.sleep(reply.delay)
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)

            def log_message(self, *_args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handle)
        self.server.daemon_threads = True
        if self.tls is not None:
            self.server.socket = self.tls.wrap_socket(self.server.socket, server_side=True)
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.shutdown()
        self.server.server_close()


def worker_database(dsn: str, concurrency: int = 4) -> Database:
    return Database(dsn, max_size=concurrency + 2, name="test-worker", role=WORKER_ROLE)


WEBHOOK_KEYS = SecretKeyring(Path(tempfile.mkdtemp(prefix="bc-test-webhook-key-")) / "webhook.key")
"""The test workers' webhook key: secrets are sealed to it (`sealed`), standard_handlers open them with it."""


def register_webhook_key(conn: psycopg.Connection, keys: SecretKeyring = WEBHOOK_KEYS) -> None:
    """Register the key as a worker registers its own when it starts (what the relay seals to)."""
    conn.execute("SELECT worker_api.sealing_key_register(%s, %s)", (keys.key_id, keys.public_key))


def sealed(conn: psycopg.Connection, secret: str, keys: SecretKeyring = WEBHOOK_KEYS) -> str:
    """The secret sealed to `keys` (registered) as webhooks.create takes it: sealed_secret."""
    register_webhook_key(conn, keys)
    return keys.seal(secret).text()


def standard_handlers(db: Database, keys: SecretKeyring = WEBHOOK_KEYS) -> dict[str, Handler]:
    """The handlers `serve worker` runs: local ledger, a real sender, throwaway audit and intent keys,
    the test webhook key."""
    folder = Path(tempfile.mkdtemp())
    return default_handlers(db, LocalLedger(db), sender_for(db), AuditSigner(folder / "audit.pem"),
                            IntentSigner(folder / "intent.key"), keys)


def sender_for(db: Database, private_addresses: bool = True) -> WebhookSender:
    """A real sender; it may reach this machine's receivers (127.0.0.1) unless told otherwise."""
    with db.pool.connection() as conn:
        return WebhookSender(Clock.anchored(conn, "worker_api.now"), private_addresses)


@contextmanager
def running_worker(db: Database, handlers: Mapping[str, Handler], owner: str = "test-worker", concurrency: int = 4,
                   lease_seconds: float = 10.0, poll_seconds: float = 0.1, grace_seconds: float = 5.0) -> Iterator[Worker]:
    """A Worker in a thread on an open Database; stopped (gracefully) and joined on exit."""
    worker = Worker(db, handlers, WorkerSettings(owner, concurrency, lease_seconds, poll_seconds, grace_seconds))
    failure: list[BaseException] = []

    def run() -> None:
        try:
            worker.run()
        except BaseException as error:  # surfaced in the test below
            failure.append(error)

    thread = threading.Thread(target=run, name=f"worker-{owner}", daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.stop()
        thread.join(grace_seconds + 5)
    assert not thread.is_alive(), f"worker {owner} did not stop"
    assert not failure, f"worker {owner} failed: {failure[0]!r}"

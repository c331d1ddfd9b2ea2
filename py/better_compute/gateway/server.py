"""The gateway process: one TLS WebSocket server (/join, /session, and GET /metrics), the
heartbeat and poll timers, LISTEN, the server certificate's rotation; a graceful stop.

On SIGTERM or SIGINT the server stops accepting, closes every session with 1001 (going away: the
node dials again, here or at another gateway), each session's handler calls session_close, and
then the timers, LISTEN and the pool stop. Nothing else about the nodes changes (P6).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from http import HTTPStatus
from pathlib import Path
from urllib.parse import urlsplit

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from better_compute.clock import Clock
from better_compute.db import AsyncDatabase
from better_compute.gateway.channel import Channel
from better_compute.gateway.join import Joiner
from better_compute.gateway.metrics import GatewayMetrics
from better_compute.gateway.session import Push, Sessions, SessionContext, SessionSettings
from better_compute.gateway.tls import ServerTls, server_names
from better_compute.nodeproto import GOING_AWAY, JOIN_PATH, NODE_MESSAGE_BYTES, SESSION_PATH
from better_compute.pki import DEFAULT_LIFETIME, CertificateAuthority

log = logging.getLogger(__name__)

METRICS_PATH = "/metrics"
DATABASE_OPEN_SECONDS = 30.0
ROTATION_RETRY = timedelta(minutes=1)


@dataclass(frozen=True)
class GatewaySettings:
    name: str  # in node_sessions.gateway and the server certificate's SPIFFE ID
    host: str = "127.0.0.1"
    port: int = 8443  # 0: any free port
    heartbeat_seconds: float = 5.0
    poll_seconds: float = 5.0
    svid_lifetime: timedelta = DEFAULT_LIFETIME
    server_names: tuple[str, ...] = ()  # more names for the server certificate


async def every(seconds: float, step: Callable[[], Awaitable[None]], what: str) -> None:
    """Run `step` every `seconds` until cancelled; a failed round is logged, the next one tries again."""
    while True:
        await asyncio.sleep(seconds)
        try:
            await step()
        except Exception:
            log.exception("%s failed; again in %.1f s", what, seconds)


class Gateway:
    def __init__(self, db: AsyncDatabase, ca_key: Path, trust_domain: str, intent_key: Ed25519PublicKey,
                 settings: GatewaySettings):
        self.db = db
        self.ca_key = ca_key
        self.ca_certificate = ca_key.with_suffix(".crt")
        self.trust_domain = trust_domain
        self.intent_key = intent_key
        self.settings = settings
        self.metrics = GatewayMetrics()
        self.stopping = asyncio.Event()

    def stop(self) -> None:
        self.stopping.set()

    async def run(self) -> None:
        """Serve until stop(); prints `listening on wss://HOST:PORT` and `ca: PATH` once it listens."""
        await self.db.open(timeout=DATABASE_OPEN_SECONDS)
        try:
            clock = Clock(await self.db.call("node_api.now"))
            ca = CertificateAuthority.open(self.ca_key, self.trust_domain, clock.now(), self.ca_certificate)
            settings = self.settings
            sessions = Sessions(SessionContext(self.db, ca, clock, SessionSettings(
                settings.name, settings.heartbeat_seconds, settings.svid_lifetime), self.metrics))
            joiner = Joiner(self.db, ca, self.intent_key, clock, settings.svid_lifetime, self.metrics)
            tls = ServerTls(ca, settings.name, server_names(settings.host, settings.server_names))
            rotate_at = tls.rotate(clock.now())

            async def route(connection: ServerConnection) -> None:
                channel = Channel(connection, self.metrics)
                try:
                    if path_of(connection.request) == JOIN_PATH:
                        await joiner.handle(channel)
                    else:
                        await sessions.serve(channel)
                except ConnectionClosed:
                    pass

            async def poll() -> None:
                await sessions.poll()

            # A frame over node_message_bytes closes the connection (1009). No permessage-deflate: its
            # buffers per connection would outweigh thousands of mostly idle sessions' JSON.
            async with serve(route, settings.host, settings.port, ssl=tls.context, process_request=self.http,
                             max_size=NODE_MESSAGE_BYTES, compression=None, server_header=None) as server:
                self.announce(server)
                tasks = [asyncio.create_task(every(settings.heartbeat_seconds, sessions.heartbeats, "heartbeats")),
                         asyncio.create_task(every(settings.poll_seconds, poll, "poll")),
                         asyncio.create_task(sessions.listen()),
                         asyncio.create_task(keep_fresh(tls, clock, rotate_at))]
                try:
                    await self.stopping.wait()
                    log.info("stopping: closing %d session(s) (going away)", len(sessions.open))
                    server.close(code=GOING_AWAY, reason="the gateway is stopping")
                    await server.wait_closed()
                finally:
                    for task in tasks:
                        task.cancel()
                    await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            await self.db.close()
        log.info("gateway %s stopped", self.settings.name)

    def announce(self, server: Server) -> None:
        port = server.sockets[0].getsockname()[1]
        host = f"[{self.settings.host}]" if ":" in self.settings.host else self.settings.host
        print(f"listening on wss://{host}:{port}", flush=True)  # what scripts and tests wait for
        print(f"ca: {self.ca_certificate.resolve()}", flush=True)  # what nodes must trust

    def http(self, connection: ServerConnection, request: Request) -> Response | None:
        """Before the WebSocket handshake: GET /metrics is answered here; other paths than the two
        of the protocol are 404."""
        path = path_of(request)
        if path == METRICS_PATH:
            content, content_type = self.metrics.exposition()
            response = connection.respond(HTTPStatus.OK, content.decode("utf-8"))
            del response.headers["Content-Type"]
            response.headers["Content-Type"] = content_type
            return response
        if path in (JOIN_PATH, SESSION_PATH):
            return None
        return connection.respond(HTTPStatus.NOT_FOUND, f"nodes use {JOIN_PATH} and {SESSION_PATH}\n")


def path_of(request: Request | None) -> str:
    return urlsplit(request.path).path if request is not None else ""


async def keep_fresh(tls: ServerTls, clock: Clock, rotate_at: datetime) -> None:
    """Reissue the server certificate when it is 2/3 through its life (new handshakes get it)."""
    while True:
        await asyncio.sleep(max(0.0, (rotate_at - clock.now()).total_seconds()))
        try:
            rotate_at = tls.rotate(clock.now())
        except Exception:
            log.exception("the server certificate was not reissued; trying again in %s", ROTATION_RETRY)
            rotate_at = clock.now() + ROTATION_RETRY


def serve_until_signalled(gateway: Gateway) -> None:
    """Run the gateway in this thread's event loop; SIGTERM or SIGINT stops it gracefully."""
    async def main() -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, gateway.stop)
        await gateway.run()

    asyncio.run(main())

"""The gateway process: one TLS WebSocket server (/join, /session, site agents' /agent/certificate
and /agent (gateway/agents.py), and GET /metrics), the
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

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from better_compute.clock import Clock
from better_compute.db import AsyncDatabase
from better_compute.gateway.agents import OPS_CHANNEL, AgentSessions
from better_compute.gateway.channel import Channel
from better_compute.gateway.issuance import Issuance
from better_compute.gateway.join import Joiner, bundle_pem
from better_compute.gateway.metrics import GatewayMetrics
from better_compute.gateway.session import Push, Sessions, SessionContext, SessionSettings
from better_compute.gateway.tls import ServerTls, server_names
from better_compute.nodeproto import (AGENT_CERTIFICATE_PATH, AGENT_PATH, GOING_AWAY, JOIN_PATH, NODE_MESSAGE_BYTES,
                                      SESSION_PATH)
from better_compute.pki import PkiError

log = logging.getLogger(__name__)

METRICS_PATH = "/metrics"
DATABASE_OPEN_SECONDS = 30.0
ROTATION_RETRY = timedelta(minutes=1)
BUNDLE_WAIT_SECONDS = 30.0  # at start, how long the gateway waits for a signer to publish the node CA
BUNDLE_POLL_SECONDS = 0.2


@dataclass(frozen=True)
class GatewaySettings:
    name: str  # in node_sessions.gateway and the server certificate's SPIFFE ID
    host: str = "127.0.0.1"
    port: int = 8443  # 0: any free port
    heartbeat_seconds: float = 5.0
    poll_seconds: float = 5.0
    server_names: tuple[str, ...] = ()  # more names for the server certificate
    process_metrics: bool = True  # off where another endpoint of the process serves them (serve all)


async def every(seconds: float, step: Callable[[], Awaitable[None]], what: str) -> None:
    """Run `step` every `seconds` until cancelled; a failed round is logged, the next one tries again."""
    while True:
        await asyncio.sleep(seconds)
        try:
            await step()
        except Exception:
            log.exception("%s failed; again in %.1f s", what, seconds)


class Gateway:
    """The gateway holds no CA key (issue 20): the trust bundle and every certificate (its own, the
    nodes') come from the signer through the database. It writes the bundle it serves to
    `bundle_path` for nodes to trust (`bcd join --ca-file`)."""

    def __init__(self, db: AsyncDatabase, bundle_path: Path, intent_key: Ed25519PublicKey, settings: GatewaySettings):
        self.db = db
        self.bundle_path = bundle_path
        self.intent_key = intent_key
        self.settings = settings
        self.metrics = GatewayMetrics(settings.process_metrics)
        self.stopping = asyncio.Event()

    def stop(self) -> None:
        self.stopping.set()

    async def first_bundle(self, issuance: Issuance) -> list[x509.Certificate]:
        """The trust bundle, once a signer has published a CA (PkiError after BUNDLE_WAIT_SECONDS)."""
        deadline = asyncio.get_running_loop().time() + BUNDLE_WAIT_SECONDS
        while not (bundle := await issuance.bundle()):
            if asyncio.get_running_loop().time() > deadline or self.stopping.is_set():
                raise PkiError("no node CA in the database: start the signer (`better-compute serve signer --ca-key "
                               "…` or `serve worker --ca-key …`)")
            await asyncio.sleep(BUNDLE_POLL_SECONDS)
        return bundle

    async def run(self) -> None:
        """Serve until stop(); prints `listening on wss://HOST:PORT` and `ca: PATH` once it listens."""
        await self.db.open(timeout=DATABASE_OPEN_SECONDS)
        try:
            clock = Clock(await self.db.call("node_api.now"))
            settings = self.settings
            issuance = Issuance(self.db)
            context = SessionContext(self.db, issuance, await self.first_bundle(issuance), clock,
                                     SessionSettings(settings.name, settings.heartbeat_seconds), self.metrics)
            sessions = Sessions(context)
            agents = AgentSessions(context)
            joiner = Joiner(self.db, issuance, settings.name, self.intent_key, self.metrics)
            tls = ServerTls(settings.name, server_names(settings.host, settings.server_names))
            self.keep_bundle(tls, context, context.bundle)
            rotate_at = await tls.rotate(self.db, issuance)

            async def route(connection: ServerConnection) -> None:
                channel = Channel(connection, self.metrics)
                try:
                    path = path_of(connection.request)
                    if path == JOIN_PATH:
                        await joiner.handle(channel)
                    elif path == AGENT_CERTIFICATE_PATH:
                        await agents.certify(channel)
                    elif path == AGENT_PATH:
                        await agents.serve(channel)
                    else:
                        await sessions.serve(channel)
                except ConnectionClosed:
                    pass

            async def poll() -> None:
                await sessions.poll()

            async def refresh_bundle() -> None:
                self.keep_bundle(tls, context, await issuance.bundle())
                if not tls.issued_by(context.bundle[0]):  # the node CA rotated: serve a certificate of the new one
                    await tls.rotate(self.db, issuance)

            # A frame over node_message_bytes closes the connection (1009). No permessage-deflate: its
            # buffers per connection would outweigh thousands of mostly idle sessions' JSON.
            async with serve(route, settings.host, settings.port, ssl=tls.context, process_request=self.http,
                             max_size=NODE_MESSAGE_BYTES, compression=None, server_header=None) as server:
                self.announce(server)
                tasks = [asyncio.create_task(every(settings.heartbeat_seconds, sessions.heartbeats, "heartbeats")),
                         asyncio.create_task(every(settings.poll_seconds, poll, "poll")),
                         asyncio.create_task(every(settings.poll_seconds, refresh_bundle, "trust bundle")),
                         asyncio.create_task(sessions.listen({OPS_CHANNEL: agents.wake})),
                         asyncio.create_task(keep_fresh(tls, self.db, issuance, clock, rotate_at))]
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

    def keep_bundle(self, tls: ServerTls, context: SessionContext, bundle: list[x509.Certificate]) -> None:
        """Trust `bundle` from now on (sessions, new handshakes) and write it where nodes read it."""
        if not bundle:
            log.warning("the database holds no trusted node CA; keeping the bundle of before")
            return
        context.bundle = bundle
        tls.trust(bundle)
        text = bundle_pem(bundle).encode("ascii")
        if not self.bundle_path.exists() or self.bundle_path.read_bytes() != text:
            self.bundle_path.parent.mkdir(parents=True, exist_ok=True)
            temporary = self.bundle_path.with_suffix(".tmp")
            temporary.write_bytes(text)
            temporary.replace(self.bundle_path)

    def announce(self, server: Server) -> None:
        port = server.sockets[0].getsockname()[1]
        host = f"[{self.settings.host}]" if ":" in self.settings.host else self.settings.host
        print(f"listening on wss://{host}:{port}", flush=True)  # what scripts and tests wait for
        print(f"ca: {self.bundle_path.resolve()}", flush=True)  # what nodes must trust

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
        if path in (JOIN_PATH, SESSION_PATH, AGENT_CERTIFICATE_PATH, AGENT_PATH):
            return None
        return connection.respond(HTTPStatus.NOT_FOUND, f"nodes use {JOIN_PATH} and {SESSION_PATH}, site agents "
                                                        f"{AGENT_CERTIFICATE_PATH} and {AGENT_PATH}\n")


def path_of(request: Request | None) -> str:
    return urlsplit(request.path).path if request is not None else ""


async def keep_fresh(tls: ServerTls, db: AsyncDatabase, issuance: Issuance, clock: Clock, rotate_at: datetime) -> None:
    """Reissue the server certificate when it is 2/3 through its life (new handshakes get it)."""
    while True:
        await asyncio.sleep(max(0.0, (rotate_at - clock.now()).total_seconds()))
        try:
            rotate_at = await tls.rotate(db, issuance)
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

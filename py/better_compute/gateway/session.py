"""Path /session: a joined node's session, from its SVID to its end (docs/architecture.md §8, docs/nodes.md).

Identity: the node id is the one of the client certificate (pki.verify_svid), never of a message.
`node_api.session_open` (with the certificate's public key: a session opens only while it is the
node's registered key, so an SVID that outlived its key opens none) gives the session its epoch;
every write carries it, and a FENCED answer
(a newer session of the node exists, here or at another gateway) closes the connection with 4001.

What a node reports going up (inventory, observed, result, key) is signed by the node (P14), and
the gateway is only its relay: it appends each envelope as received to the node's inbox
(node_api.report, fenced by the epoch), and the worker verifies it against the node's registered
key before it takes effect; the gateway neither checks nor can write a report's effect itself.
Heartbeats only mark a session heard; every `heartbeat_seconds` one `node_api.heartbeats` call
writes all sessions of the gateway heard since the last one (P12) and answers the fenced ones,
which are closed.

Intent going down was signed by the worker: the gateway only relays it. Each session has one
pusher task that sends the spec (node_api.spec_get) and the commands due (node_api.commands_due)
when poked: on connect, on NOTIFY bc_node_spec / bc_node_command (payload: the node id), and on
the poll timer (one node_api.push_due statement for all sessions finds those with a signed spec
newer than the one they were sent, or commands due: node_api redelivers those without a result).
Pokes coalesce, so a storm of notifications costs one pass per session.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import psycopg
from cryptography import x509
from psycopg import sql
from psycopg.types.json import Jsonb
from websockets.exceptions import ConnectionClosed

from better_compute.clock import Clock
from better_compute.db import AsyncDatabase, ContractError
from better_compute.gateway.channel import Channel
from better_compute.gateway.metrics import GatewayMetrics
from better_compute.nodeproto import (FENCED, INVALID_ARGUMENT, JOIN_PATH, SESSION_PATH, Certificate, Command, Error,
                                      Heartbeat, Hello, Inventory, Key, Message, Observed, ProtocolError, Renew, Result,
                                      Spec)
from better_compute.gateway.issuance import Issuance
from better_compute.pki import PkiError, read_csr, verify_svid
from better_compute.pki.binding import public_key_der

log = logging.getLogger(__name__)

SPEC_CHANNEL = "bc_node_spec"
COMMAND_CHANNEL = "bc_node_command"
FENCED_CODE = "FENCED"
ACCESS_DENIED = "ACCESS_DENIED"
RECONNECT_SECONDS = 1.0


@dataclass(frozen=True)
class SessionSettings:
    gateway: str  # this gateway's name in node_sessions
    heartbeat_seconds: float


@dataclass
class SessionContext:
    """What every session of the gateway shares; `bundle` is the node CAs trusted now (refreshed)."""

    db: AsyncDatabase
    issuance: Issuance
    bundle: list[x509.Certificate]
    clock: Clock
    settings: SessionSettings
    metrics: GatewayMetrics


class Push(enum.Flag):
    NEW_SPEC = enum.auto()  # the spec, if its generation is not the one this session sent last
    SPEC = enum.auto()  # the spec in any case (connect; signed anew; the reconciler's resend)
    COMMANDS = enum.auto()  # the commands due


def peer_certificate(channel: Channel) -> x509.Certificate | None:
    """The client certificate of the TLS connection (OpenSSL checked it chains to the CA)."""
    ssl_object = channel.connection.transport.get_extra_info("ssl_object")
    der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    return x509.load_der_x509_certificate(der) if der else None


class Session:
    """One node's open session: its messages in, its pushes out."""

    def __init__(self, context: SessionContext, channel: Channel, certificate: x509.Certificate, node_id: UUID,
                 epoch: int):
        self.context = context
        self.channel = channel
        self.certificate = certificate  # the newest SVID of the node: the next renewal is for its node
        self.node_id = node_id
        self.epoch = epoch
        self.heard = True
        self.fenced = False
        self.sent_generation: int | None = None
        self.wanted = Push(0)
        self.wake = asyncio.Event()

    def __str__(self) -> str:
        return f"node {self.node_id} (epoch {self.epoch}, {self.channel.peer})"

    # -- in --------------------------------------------------------------------------------------

    async def converse(self) -> None:
        """Handle the node's messages until the connection ends (ConnectionClosed) or is fenced."""
        while True:
            try:
                message = await self.channel.receive()
                self.heard = True
                await self.handle(message)
            except ContractError as refused:
                if refused.code == FENCED_CODE:
                    await self.fence()
                    return
                await self.channel.answer(refused)
            except (ProtocolError, PkiError) as refused:
                await self.channel.answer(refused)

    async def handle(self, message: Message) -> None:
        match message:
            case Heartbeat():
                pass
            case Inventory(envelope) | Observed(envelope) | Result(envelope) | Key(envelope):
                await self.context.db.call("node_api.report", self.node_id, self.epoch, Jsonb(envelope))
            case Renew(csr, proof):
                # The signer issues it (issue 20): it checks the node's signature over the renewal
                # with the registered key; the database, that the session is current and the node
                # not quarantined. A new key in it signs nothing the worker accepts until the
                # node's `key` report is verified.
                request_id = await self.context.db.call(
                    "node_api.renew_request", self.node_id, self.epoch, self.context.settings.gateway, csr,
                    public_key_der(read_csr(csr).public_key), Jsonb(proof))
                pem = await self.context.issuance.certificate(request_id)
                self.certificate = x509.load_pem_x509_certificate(pem.encode("ascii"))
                await self.channel.send(Certificate(pem))
            case Error(code, text, _hint):
                log.info("%s reports %s: %.300s", self, code, text)
            case _:
                raise ProtocolError(INVALID_ARGUMENT, f"a node does not send {message.TYPE} on a session")

    # -- out -------------------------------------------------------------------------------------

    def poke(self, wanted: Push) -> None:
        self.wanted |= wanted
        self.wake.set()

    async def push_until_closed(self) -> None:
        """The pusher: one pass over what was asked for since the last one, each time poked."""
        while True:
            await self.wake.wait()
            self.wake.clear()
            wanted, self.wanted = self.wanted, Push(0)
            try:
                if wanted & (Push.SPEC | Push.NEW_SPEC):
                    await self.push_spec(bool(wanted & Push.SPEC))
                if wanted & Push.COMMANDS:
                    await self.push_commands()
            except ConnectionClosed:
                return
            except ContractError as refused:
                if refused.code == FENCED_CODE:
                    await self.fence()
                    return
                log.warning("%s: push failed (%s); the poll timer tries again", self, refused)
            except Exception:
                log.exception("%s: push failed; the poll timer tries again", self)

    async def push_spec(self, always: bool) -> None:
        answer = await self.context.db.call("node_api.spec_get", self.node_id, self.epoch)
        if answer is None or (not always and answer["generation"] == self.sent_generation):
            return
        await self.channel.send(Spec(answer["envelope"]))
        self.sent_generation = answer["generation"]

    async def push_commands(self) -> None:
        for envelope in await self.context.db.call("node_api.commands_due", self.node_id, self.epoch):
            await self.channel.send(Command(envelope))

    async def fence(self) -> None:
        """A newer session of this node exists: say so and close with 4001 (once, whoever finds out)."""
        if self.fenced:
            return
        self.fenced = True
        self.context.metrics.fenced.inc()
        log.info("%s is fenced: closing it", self)
        with contextlib.suppress(ConnectionClosed):
            await self.channel.answer(ProtocolError(FENCED_CODE, f"session epoch {self.epoch} is not current",
                                                    "A newer session of this node exists."))
        await self.channel.connection.close(FENCED, "fenced")


class Sessions:
    """The gateway's open sessions, at most one per node, and what they do together."""

    def __init__(self, context: SessionContext):
        self.context = context
        self.open: dict[UUID, Session] = {}
        self.tasks: set[asyncio.Task[None]] = set()

    async def serve(self, channel: Channel) -> None:
        """A connection on /session: identify the node, open its session, converse, close it."""
        certificate = peer_certificate(channel)
        try:
            if certificate is None:
                raise ProtocolError(ACCESS_DENIED, "a session needs the node's SVID as its TLS client certificate",
                                    f"Join first ({JOIN_PATH}), then dial {SESSION_PATH} with the certificate.")
            try:
                node_id = verify_svid(self.context.bundle, certificate, self.context.clock.now()).node_id
            except PkiError as error:
                raise ProtocolError(ACCESS_DENIED, f"the client certificate is not a valid SVID of a trusted node CA: "
                                    f"{error}", "Renew the certificate before it expires; a node whose SVID expired "
                                    "or comes from a node CA rotated out since must join again with a new token.") from None
            epoch = await self.context.db.call("node_api.session_open", node_id, self.context.settings.gateway,
                                               public_key_der(certificate.public_key()))
        except (ContractError, ProtocolError) as refused:
            log.info("session from %s refused: %s", channel.peer, refused)
            await channel.refuse(refused)
            return
        session = Session(self.context, channel, certificate, node_id, epoch)
        self.add(session)
        pusher = asyncio.create_task(session.push_until_closed())
        try:
            await channel.send(Hello(epoch, self.context.settings.heartbeat_seconds))
            session.poke(Push.SPEC | Push.COMMANDS)
            await session.converse()
        except ConnectionClosed:
            pass
        finally:
            pusher.cancel()
            self.remove(session)
            await self.close_in_database(session)

    def add(self, session: Session) -> None:
        """Keep the node's newest session; the other one (if the node dialed twice) is fenced in
        the database already, so close it here at once."""
        log.info("%s: session open", session)
        current = self.open.get(session.node_id)
        if current is not None and current.epoch > session.epoch:  # the two session_open calls crossed
            current, session = session, current
        self.open[session.node_id] = session
        self.context.metrics.sessions.set(len(self.open))
        if current is not None:
            self.spawn(current.fence())

    def remove(self, session: Session) -> None:
        if self.open.get(session.node_id) is session:
            del self.open[session.node_id]
        self.context.metrics.sessions.set(len(self.open))

    async def close_in_database(self, session: Session) -> None:
        """The session ended: say so (nothing else about the node changes, P6)."""
        try:
            await self.context.db.call("node_api.session_close", session.node_id, session.epoch)
        except ContractError as failure:
            log.warning("%s: session_close failed (%s); it shows disconnected once not heard from", session, failure)
        log.info("%s: session closed", session)

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def heartbeats(self) -> None:
        """One node_api.heartbeats call for every session heard since the last one; close the fenced."""
        heard = {session.node_id: session.epoch for session in self.open.values() if session.heard}
        for session in self.open.values():
            session.heard = False
        if not heard:
            return
        fenced = await self.context.db.call("node_api.heartbeats", self.context.settings.gateway, list(heard),
                                            list(heard.values()))
        self.context.metrics.heartbeat_statements.inc()
        self.context.metrics.heartbeat_sessions.inc(len(heard))
        for node_id in fenced:
            session = self.open.get(node_id)
            if session is not None and session.epoch == heard[node_id]:  # not a newer session since
                self.spawn(session.fence())

    async def poll(self) -> None:
        """The poll timer: one node_api.push_due call for all sessions; poke those with a newer
        signed spec or commands due (what LISTEN would have poked, had no notification been lost)."""
        sent = {session.node_id: session.sent_generation for session in self.open.values()}
        if not sent:
            return
        self.context.metrics.poll_statements.inc()
        for row in await self.context.db.rows("node_api.push_due", list(sent), list(sent.values())):
            session = self.open.get(row["node_id"])
            if session is not None:
                session.poke((Push.NEW_SPEC if row["spec"] else Push(0)) | (Push.COMMANDS if row["commands"] else Push(0)))

    def poke_all(self, wanted: Push) -> None:
        for session in self.open.values():
            session.poke(wanted)

    def poke(self, node_text: str, wanted: Push) -> None:
        try:
            session = self.open.get(UUID(node_text))
        except ValueError:
            log.warning("notification with payload %.60r, not a node id", node_text)
            return
        if session is not None:
            session.poke(wanted)

    async def listen(self, others: Mapping[str, Callable[[str], None]]) -> None:
        """LISTEN for signed specs and commands (and `others`' channels: each gets the payload, and
        "" after a reconnect) until cancelled; after (re)connecting, poke every session (what was
        notified meanwhile is lost; the poll timer covers the gaps too)."""
        pushes = {SPEC_CHANNEL: Push.SPEC, COMMAND_CHANNEL: Push.COMMANDS}
        while True:
            try:
                async with await self.context.db.connect() as conn:
                    for channel in [*pushes, *others]:
                        await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
                    self.poke_all(Push.NEW_SPEC | Push.COMMANDS)
                    for other in others.values():
                        other("")
                    async for notify in conn.notifies():
                        if notify.channel in others:
                            others[notify.channel](notify.payload)
                        else:
                            self.poke(notify.payload, pushes[notify.channel])
            except (psycopg.Error, OSError) as error:
                log.warning("LISTEN lost (%s); sessions are polled until it is back", error)
                await asyncio.sleep(RECONNECT_SECONDS)


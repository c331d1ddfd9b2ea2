"""Site agents on the gateway (issue 14 part 3, P5, P14; docs/bare-metal.md): the agent dials out
like a node does.

Path /agent/certificate (TLS, no client certificate): the agent sends `agent_certify` (a CSR for a
fresh P-256 key and an agent.certificate envelope signed by its registered Ed25519 signing key);
the gateway records it (agent_api.certificate_request) and waits for the signer, which verifies the
envelope with the registered key; the database decides. The gateway holds no key that could make
one: it relays.

Path /agent (mutual TLS): the agent id and site come from the verified certificate
(pki.verify_agent_svid: a node's SVID is refused), never from a message; agent_api.session_open
opens a session (a new epoch and a random session id) only while the certificate's key is the one
certified for that agent under its registered signing key. On the session the agent claims
operations (`claim` -> `ops`) and sends each signed result (`bmc_result` -> `relayed`, or an
`error`: FENCED for a result of an operation taken back); the gateway names the session id in
agent_api.ops_claim and op_result (the database takes the agent from that session) and relays the
envelope as it is, a worker verifies it. NOTIFY bc_bmc_ops (payload: the agent id) sends the agent a
`wake`. A session no longer current (a newer one of the agent, or its signing key changed) closes
the connection with 4001.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from uuid import UUID

from psycopg.types.json import Jsonb
from websockets.exceptions import ConnectionClosed

from better_compute.db import ContractError
from better_compute.gateway.channel import Channel
from better_compute.gateway.session import ACCESS_DENIED, FENCED_CODE, SessionContext, peer_certificate
from better_compute.nodeproto import (AGENT_CERTIFICATE_PATH, AGENT_PATH, FENCED, INVALID_ARGUMENT, AgentCertify,
                                      AgentHello, BmcResult, Certificate, Claim, Error, Heartbeat, Message, Ops,
                                      ProtocolError, Relayed, Wake)
from better_compute.pki import PkiError, read_csr
from better_compute.pki.binding import public_key_der
from better_compute.pki.svid import verify_agent_svid

log = logging.getLogger(__name__)

OPS_CHANNEL = "bc_bmc_ops"


class AgentSession:
    def __init__(self, context: SessionContext, channel: Channel, agent_id: UUID, session_id: UUID, epoch: int):
        self.context, self.channel, self.agent_id, self.epoch = context, channel, agent_id, epoch
        self.session_id = session_id  # what agent_api calls name: the database knows whose it is

    def __str__(self) -> str:
        return f"site agent {self.agent_id} (epoch {self.epoch}, {self.channel.peer})"

    async def converse(self) -> None:
        """Handle the agent's messages until the connection ends (ConnectionClosed) or is fenced."""
        while True:
            message: Message | None = None
            try:
                message = await self.channel.receive()
                await self.handle(message)
            except ContractError as refused:
                await self.channel.answer(refused)
                # Only the session fences a claim (a result is also FENCED when its op was taken back).
                if refused.code == FENCED_CODE and isinstance(message, Claim):
                    log.info("%s is fenced: closing it", self)
                    await self.channel.connection.close(FENCED, "fenced")
                    return
            except (ProtocolError, PkiError) as refused:
                await self.channel.answer(refused)

    async def handle(self, message: Message) -> None:
        db = self.context.db
        match message:
            case Claim(limit):
                ops = await db.call("agent_api.ops_claim", self.session_id, limit)
                await self.channel.send(Ops(ops, self.context.clock.now().isoformat()))
            case BmcResult(envelope):
                answer = await db.call("agent_api.op_result", self.session_id, Jsonb(envelope))
                body = envelope.get("body") if isinstance(envelope, dict) else None
                op_id = body.get("op_id") if isinstance(body, dict) else None
                await self.channel.send(Relayed(op_id if isinstance(op_id, int) else 0, answer))
            case Heartbeat():
                pass
            case Error(code, text, _hint):
                log.info("%s reports %s: %.300s", self, code, text)
            case _:
                raise ProtocolError(INVALID_ARGUMENT, f"a site agent does not send {message.TYPE} on its session")


class AgentSessions:
    """The site agents' sessions of this gateway, at most one per agent."""

    def __init__(self, context: SessionContext):
        self.context = context
        self.open: dict[UUID, AgentSession] = {}
        self.tasks: set[asyncio.Task[None]] = set()

    async def certify(self, channel: Channel) -> None:
        """/agent/certificate: one `agent_certify`, answered with the certificate the signer issued."""
        try:
            message = await channel.receive()
            if not isinstance(message, AgentCertify):
                raise ProtocolError(INVALID_ARGUMENT, f"{AGENT_CERTIFICATE_PATH} takes one agent_certify message")
            request_id = await self.context.db.call(
                "agent_api.certificate_request", UUID(message.agent_id), self.context.settings.gateway, message.csr,
                public_key_der(read_csr(message.csr).public_key), Jsonb(message.proof))
            await channel.send(Certificate(await self.context.issuance.certificate(request_id)))
        except ValueError as refused:  # PkiError among them, and an agent id that is no UUID
            await channel.refuse(refused if isinstance(refused, PkiError) else PkiError(str(refused)))
            return
        except (ContractError, ProtocolError) as refused:
            log.info("certificate request from %s refused: %s", channel.peer, refused)
            await channel.refuse(refused)
            return
        await channel.connection.close()

    async def serve(self, channel: Channel) -> None:
        """/agent: identify the agent by its certificate, open its session, converse, close it."""
        certificate = peer_certificate(channel)
        try:
            if certificate is None:
                raise ProtocolError(ACCESS_DENIED, "a site agent's session needs its certificate as the TLS client certificate",
                                    f"Ask for one first ({AGENT_CERTIFICATE_PATH}), then dial {AGENT_PATH} with it.")
            try:
                identity = verify_agent_svid(self.context.bundle, certificate, self.context.clock.now())
            except PkiError as error:
                raise ProtocolError(ACCESS_DENIED, f"the client certificate is not a valid site agent certificate of a "
                                    f"trusted node CA: {error}", "A site agent dials with the certificate it was "
                                    f"issued ({AGENT_CERTIFICATE_PATH}); a node dials /session.") from None
            opened = await self.context.db.call("agent_api.session_open", identity.agent_id, identity.site_id,
                                                self.context.settings.gateway, public_key_der(certificate.public_key()))
            bmc_sessions = await self.context.db.call("agent_api.bmc_sessions")
        except (ContractError, ProtocolError) as refused:
            log.info("site agent session from %s refused: %s", channel.peer, refused)
            await channel.refuse(refused)
            return
        session = AgentSession(self.context, channel, identity.agent_id, UUID(opened["session_id"]), opened["epoch"])
        log.info("%s: session open", session)
        self.open[session.agent_id] = session
        try:
            await channel.send(AgentHello(session.epoch, bmc_sessions, self.context.clock.now().isoformat()))
            await session.converse()
        except ConnectionClosed:
            pass
        finally:
            if self.open.get(session.agent_id) is session:
                del self.open[session.agent_id]
            with contextlib.suppress(ContractError):
                await self.context.db.call("agent_api.session_close", session.session_id)
            log.info("%s: session closed", session)

    def wake(self, payload: str) -> None:
        """NOTIFY bc_bmc_ops: the agent it names claims (every agent, when the payload names none)."""
        try:
            agents = [UUID(payload)]
        except ValueError:
            agents = list(self.open)
        for agent_id in agents:
            session = self.open.get(agent_id)
            if session is not None:
                task = asyncio.create_task(session.channel.send(Wake()))
                self.tasks.add(task)
                task.add_done_callback(self.sent)

    def sent(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None and not isinstance(task.exception(), ConnectionClosed):
            log.warning("a wake-up was not sent: %s", task.exception())

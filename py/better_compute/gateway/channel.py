"""One node's WebSocket as protocol messages: decode what comes in, encode what goes out, answer
refusals as `error` messages (docs/architecture.md §13 codes), count both ways."""

from __future__ import annotations

import logging

from websockets.asyncio.server import ServerConnection
from websockets.frames import CloseCode

from better_compute.errors import INTERNAL, ContractError
from better_compute.gateway.metrics import GatewayMetrics
from better_compute.nodeproto import INVALID_ARGUMENT, Error, Message, ProtocolError, decode, encode
from better_compute.pki import PkiError

log = logging.getLogger(__name__)

Refusal = ContractError | ProtocolError | PkiError


def error_of(failure: Refusal) -> Error:
    """The `error` message for a refusal: the database's contract error as it is, a protocol error
    as decode says, a key, certificate or envelope the PKI refused as INVALID_ARGUMENT."""
    if isinstance(failure, ContractError):
        return Error(failure.code, failure.message, failure.hint)
    if isinstance(failure, ProtocolError):
        return failure.error()
    return Error(INVALID_ARGUMENT, str(failure), "Check the key, certificate or signature the node sends.")


class Channel:
    def __init__(self, connection: ServerConnection, metrics: GatewayMetrics):
        self.connection = connection
        self.metrics = metrics
        address = connection.remote_address  # for logs; the transport forgets it once closed
        self.peer = f"{address[0]}:{address[1]}" if address else "?"

    async def receive(self) -> Message:
        """The next message; ProtocolError for a frame that is none (answer it and go on), and
        websockets' ConnectionClosed once the connection ends."""
        frame = await self.connection.recv()
        try:
            message = decode(frame)
        except ProtocolError:
            self.metrics.message("in", "")
            raise
        self.metrics.message("in", message.TYPE)
        return message

    async def send(self, message: Message) -> None:
        await self.connection.send(encode(message))
        self.metrics.message("out", message.TYPE)

    async def answer(self, failure: Refusal) -> None:
        """Tell the node what was refused and why; the connection stays open."""
        error = error_of(failure)
        if error.code == INTERNAL[0]:
            log.error("%s: %s", self.peer, error.message)
        self.metrics.error(error.code)
        await self.send(error)

    async def refuse(self, failure: Refusal) -> None:
        """Answer a refusal that ends the connection (policy violation, 1008)."""
        await self.answer(failure)
        await self.connection.close(CloseCode.POLICY_VIOLATION, error_of(failure).code)

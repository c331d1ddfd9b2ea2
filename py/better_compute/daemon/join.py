"""`bcd join`: a new node becomes a member of a pool, once, with a single-use join token.

The node makes its key (it never leaves the node) and a CSR naming its hostname, collects its
inventory and signs it with the same key, so the gateway knows the inventory came with the CSR.
The token itself never leaves the node either: it sends a reference and an HMAC binding the token
to its key (pki/binding.py), so the gateway cannot spend it on a key of its own.
It trusts the gateway through `--ca-file` (the node CA, handed out with the token), since it has
no CA of its own yet. What `joined` answers (node id, SVID, CA, intent key) is checked and kept in
the state directory; an `error` answer is raised as JoinRefused, and nothing is kept.
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

from better_compute.daemon.drivers import InventoryDriver
from better_compute.daemon.runtime import ANSWER_SECONDS, Clock, dial, endpoint, wall_clock
from better_compute.daemon.state import Credentials, NodeState
from better_compute.nodeproto import INVALID_ARGUMENT, JOIN_PATH, Error, Join, Joined, ProtocolError, decode, encode
from better_compute.pki import make_csr, sign_envelope
from better_compute.pki.binding import join_token_binding, public_key_der


class JoinRefused(Exception):
    """The gateway answered the join with an error (a used or expired token is ACCESS_DENIED)."""

    def __init__(self, error: Error) -> None:
        super().__init__(f"{error.code}: {error.message}" + (f" ({error.hint})" if error.hint else ""))
        self.error = error


class AlreadyJoined(Exception):
    """The state directory holds a node identity already: a second join would make a second node."""


async def join(gateway: str, token: str, ca_file: Path, state: NodeState, driver: InventoryDriver,
               clock: Clock = wall_clock) -> Credentials:
    """Join through the gateway and keep the node's identity in `state`."""
    if state.joined:
        raise AlreadyJoined(f"{state.directory} holds node {state.load().node_id} already; "
                            "join again only with a new --state-dir")
    key = state.key()
    inventory = await asyncio.to_thread(driver.collect)
    hostname = inventory["hostname"]
    token_ref, proof = join_token_binding(token, public_key_der(key.public_key()))  # the token stays here
    request = Join(token_ref, proof, make_csr(key, hostname), sign_envelope("inventory", inventory, key))
    async with dial(endpoint(gateway, JOIN_PATH), ssl.create_default_context(cafile=ca_file)) as connection:
        await connection.send(encode(request))
        async with asyncio.timeout(ANSWER_SECONDS):
            answer = decode(await connection.recv())
    if isinstance(answer, Error):
        raise JoinRefused(answer)
    if not isinstance(answer, Joined):
        raise ProtocolError(INVALID_ARGUMENT, f"the gateway answered the join with {answer.TYPE}, not joined")
    return state.save_joined(answer, hostname, clock())

"""The site agent: it claims BMC operations (the database caps how many run at once,
bmc_sessions_per_agent), runs each in a thread, and answers each with its epoch. It reaches the
control plane through a link: its gateway session (siteagent/dial.py: it dials out, P5) or, the
fallback for one release, PostgreSQL as bc_site_agent (DatabaseLink, schema site_api).

Each operation is signed by a worker's intent key (purpose `bmc.op`, P14): the agent runs only
what the signature covers (this agent, this op and epoch, the BMC address, kind and args), so
whoever can write the database cannot point the agent, and the credentials it opens, at another
address. An operation whose signature does not verify is answered `failed` and not run.

Each result is signed by the agent's own Ed25519 key (purpose `bmc.result`: op, epoch, machine,
agent, outcome, result, error) and only relayed (agent_api.op_result through the gateway, or site_api.op_result): a worker applies it only
once it verifies with the key registered for this agent (sql/700, worker/bmc_results.py).

Outcomes: `succeeded`; `failed` (the BMC answered with an error: counted, and past machine_failures
the machine is quarantined with the reason); `unreachable` (no answer: BmcReachable=false and
nothing else). A FENCED answer means the operation was taken back or cancelled: it is dropped.
Credentials are opened only here, only for the call, and never logged.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any, Protocol
from uuid import UUID

from better_compute.db import Database
from better_compute.errors import ContractError
from better_compute.pki import IntentSigner, PkiError
from better_compute.pki.signing import VerifyingKey, open_envelope
from better_compute.sealing import SealingError, SecretKeyring
from better_compute.siteagent.redfish import Bmc, Credentials, OperationFailed, Unreachable

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0


def open_credentials(keyring: SecretKeyring, machine_id: str, sealed: dict[str, Any] | None) -> Credentials:
    if sealed is None:
        raise OperationFailed("the machine has no credentials")
    try:
        plain = json.loads(keyring.open(sealed["key_id"], base64.b64decode(sealed["box"]), machine_id.encode()))
    except (SealingError, ValueError, KeyError):
        raise OperationFailed(f"credentials version {sealed.get('version')} do not open with this agent's key") from None
    return Credentials(str(plain["username"]), str(plain["password"]))


MAX_BMC_SESSIONS = 64  # threads the pool may grow to; the database's bmc_sessions_per_agent caps what runs


class Link(Protocol):
    """How the agent reaches the control plane: a gateway session (siteagent/dial.py) or, the
    fallback for one release, PostgreSQL as bc_site_agent (DatabaseLink)."""

    def now(self) -> datetime:
        """The control plane's time (the operations' deadlines are in it)."""

    def relay(self, op: dict[str, Any], envelope: dict[str, Any]) -> None:
        """Send the signed result of `op` up (a worker verifies it)."""


class SiteAgent:
    def __init__(self, agent_id: UUID, keyring: SecretKeyring, intent_key: VerifyingKey, signer: IntentSigner,
                 sessions: int, bmc_factory: Callable[[str, Credentials], Bmc] = Bmc):
        self.agent_id, self.keyring, self.bmc_factory = agent_id, keyring, bmc_factory
        self.intent_key, self.signer = intent_key, signer
        self.pool = ThreadPoolExecutor(max_workers=MAX_BMC_SESSIONS, thread_name_prefix="bmc")
        self.running = 0
        self.lock = threading.Lock()
        self.sessions = sessions

    def room(self) -> int:
        """How many more operations may run now (at most `sessions` at once)."""
        with self.lock:
            return max(0, self.sessions - self.running)

    def start(self, ops: list[dict[str, Any]], link: Link) -> None:
        """Run each claimed operation in a thread; its result goes up through `link`."""
        for op in ops:
            with self.lock:
                self.running += 1
            self.pool.submit(self.execute, op, link)

    def execute(self, op: dict[str, Any], link: Link) -> None:
        try:
            link.relay(op, self.result(op, *self.outcome(op, link.now())))
        except Exception:  # a bug must not kill the agent; the op's deadline takes it back
            log.exception("BMC operation %s crashed", op["op_id"])
        finally:
            with self.lock:
                self.running -= 1

    def outcome(self, op: dict[str, Any], now: datetime) -> tuple[str, dict[str, Any], str | None]:
        version = (op.get("credentials") or {}).get("version")
        tried = {} if version is None else {"credentials_version": version}
        seconds_left = (datetime.fromisoformat(op["deadline"]) - now).total_seconds() - 5
        try:
            signed = self.signed_operation(op)
            credentials = open_credentials(self.keyring, op["machine_id"], op.get("credentials"))
            result = self.bmc_factory(signed["bmc_address"], credentials).run(signed["kind"], signed["args"], max(seconds_left, 1.0))
            return "succeeded", result | tried, None
        except Unreachable as error:
            return "unreachable", tried, str(error)
        except OperationFailed as error:
            return "failed", tried, str(error)

    def signed_operation(self, op: dict[str, Any]) -> dict[str, Any]:
        """The op's signed body, when it is signed by the intent key for this agent, op and epoch."""
        try:
            body = open_envelope(op.get("envelope"), self.intent_key, "bmc.op")
        except PkiError as error:
            raise OperationFailed(f"the operation's signature does not verify: {error}") from None
        expected = {"op_id": op["op_id"], "epoch": op["epoch"], "machine_id": op["machine_id"], "agent_id": str(self.agent_id)}
        if {name: body.get(name) for name in expected} != expected:
            raise OperationFailed("the operation's signature covers another agent, operation or epoch")
        return body

    def result(self, op: dict[str, Any], outcome: str, result: dict[str, Any], error: str | None) -> dict[str, Any]:
        """The result envelope, signed by the agent's key (purpose bmc.result)."""
        log.info("machine %s: operation %s %s", op["machine_id"], op["op_id"], outcome)
        body = {"op_id": op["op_id"], "epoch": op["epoch"], "machine_id": op["machine_id"], "agent_id": str(self.agent_id),
                "outcome": outcome, "result": result, "error": error}
        return self.signer.sign("bmc.result", body)

    def stop(self) -> None:
        self.pool.shutdown(wait=True)


class DatabaseLink:
    """The fallback for one release (docs/bare-metal.md): PostgreSQL as bc_site_agent, schema site_api
    (the agent id is a parameter there). Claims wake on NOTIFY bc_bmc_ops, and poll."""

    def __init__(self, db: Database, agent: SiteAgent):
        self.db, self.agent = db, agent

    def now(self) -> datetime:
        now: datetime = self.db.call("site_api.now")
        return now

    def relay(self, op: dict[str, Any], envelope: dict[str, Any]) -> None:
        try:
            said = self.db.call("site_api.op_result", self.agent.agent_id, envelope)
            log.info("machine %s: operation %s result %s", op["machine_id"], op["op_id"], said)
        except ContractError as refused:
            if refused.code != "FENCED":
                raise
            log.info("machine %s: operation %s result dropped: %s", op["machine_id"], op["op_id"], refused.message)

    def run(self, stop: threading.Event) -> None:
        """Claim whenever there is room; wake on NOTIFY bc_bmc_ops, and poll."""
        with self.db.connect() as listen:
            listen.execute("LISTEN bc_bmc_ops")
            while not stop.is_set():
                if (room := self.agent.room()) > 0:
                    self.agent.start(self.db.call("site_api.ops_claim", self.agent.agent_id, room), self)
                for _ in listen.notifies(timeout=POLL_SECONDS, stop_after=1):
                    pass
        self.agent.stop()

"""The site agent's loop: claim BMC operations (site_api.ops_claim: the database caps how many run
at once, bmc_sessions_per_agent), run each in a thread, answer each with its epoch.

Each operation is signed by a worker's intent key (purpose `bmc.op`, P14): the agent runs only
what the signature covers (this agent, this op and epoch, the BMC address, kind and args), so
whoever can write the database cannot point the agent, and the credentials it opens, at another
address. An operation whose signature does not verify is answered `failed` and not run.

Each result is signed by the agent's own Ed25519 key (purpose `bmc.result`: op, epoch, machine,
agent, outcome, result, error) and only relayed by site_api.op_result: a worker applies it only
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
from typing import Any
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


class SiteAgent:
    def __init__(self, db: Database, agent_id: UUID, keyring: SecretKeyring, intent_key: VerifyingKey, signer: IntentSigner,
                 sessions: int, bmc_factory: Callable[[str, Credentials], Bmc] = Bmc):
        self.db, self.agent_id, self.keyring, self.bmc_factory = db, agent_id, keyring, bmc_factory
        self.intent_key, self.signer = intent_key, signer
        self.pool = ThreadPoolExecutor(max_workers=sessions, thread_name_prefix="bmc")
        self.running = 0
        self.lock = threading.Lock()
        self.sessions = sessions

    def claim(self) -> int:
        with self.lock:
            room = self.sessions - self.running
        if room <= 0:
            return 0
        ops = self.db.call("site_api.ops_claim", self.agent_id, room)
        for op in ops:
            with self.lock:
                self.running += 1
            self.pool.submit(self.execute, op)
        return len(ops)

    def execute(self, op: dict[str, Any]) -> None:
        try:
            self.answer(op, *self.outcome(op))
        except Exception:  # a bug must not kill the agent; the op's deadline takes it back
            log.exception("BMC operation %s (%s) crashed", op["op_id"], op["kind"])
        finally:
            with self.lock:
                self.running -= 1

    def outcome(self, op: dict[str, Any]) -> tuple[str, dict[str, Any], str | None]:
        version = (op.get("credentials") or {}).get("version")
        tried = {} if version is None else {"credentials_version": version}
        seconds_left = (datetime.fromisoformat(op["deadline"]) - self.db.call("site_api.now")).total_seconds() - 5
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

    def answer(self, op: dict[str, Any], outcome: str, result: dict[str, Any], error: str | None) -> None:
        try:
            body = {"op_id": op["op_id"], "epoch": op["epoch"], "machine_id": op["machine_id"], "agent_id": str(self.agent_id),
                    "outcome": outcome, "result": result, "error": error}
            said = self.db.call("site_api.op_result", self.agent_id, self.signer.sign("bmc.result", body))
            log.info("machine %s: %s %s -> %s", op["machine_id"], op["kind"], outcome, said)
        except ContractError as refused:
            if refused.code != "FENCED":
                raise
            log.info("machine %s: %s result dropped: %s", op["machine_id"], op["kind"], refused.message)

    def run(self, stop: threading.Event) -> None:
        """Claim whenever there is room; wake on NOTIFY bc_bmc_ops, and poll."""
        with self.db.connect() as listen:
            listen.execute("LISTEN bc_bmc_ops")
            while not stop.is_set():
                self.claim()
                for _ in listen.notifies(timeout=POLL_SECONDS, stop_after=1):
                    pass
        self.pool.shutdown(wait=True)

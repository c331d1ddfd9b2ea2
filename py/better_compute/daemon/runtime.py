"""`bcd run`: the node's session with a gateway, and what the node does with what comes down it.

Two layers. `Daemon` is the node's behaviour, one message at a time and without a network, so tests
drive it with real keys and files: it verifies each spec and command with the control plane's
intent key (P14) and checks it names this node, converges the CDI file level-triggered (P2),
executes each command id once with the journal's help (P3), answers UNSUPPORTED for a kind it does
not know (P11), and keeps its renewed certificate. What it reports (inventory, observed, result) is
signed with its key and numbered within the session (the epoch of `hello`, then 1, 2, ...), so the
worker that verifies it can refuse a replay (P14). `run` is the session around it: it only dials
out (P5), with mutual TLS; after `hello` it sends its signed inventory, heartbeats, renews its
SVID before it expires, and reconnects after any end with exponential backoff and full jitter
(a FENCED close, 4001, included: a newer session of this node exists, and the daemon does not
fight it). Nothing the daemon does on a disconnect touches its CDI file: a partition changes a
condition, not what the containers on the node may use (P6).

Driver and file work (nvidia-smi runs up to 30 s, the journal and the CDI file are fsynced) runs
in a worker thread, one message at a time, so the connection keeps answering pings meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import signal
import ssl
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import UUID

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from better_compute.backoff import Backoff
from better_compute.daemon.cdi import (SPEC_DIRS, CdiError, CdiSpec, build_spec, granted_names, names_of, other_specs,
                                       withdraw, write_spec)
from better_compute.daemon.drivers import InventoryDriver, InventoryError
from better_compute.daemon.journal import DEFAULT_BOUND, Journal
from better_compute.daemon.mig import converge_all, not_normal
from better_compute.daemon.state import Credentials, NodeState
from better_compute.daemon.telemetry import Telemetry
from better_compute.daemon import withdrawal
from better_compute.nodeproto import (FENCED, INVALID_ARGUMENT, INVENTORY_REPORT, NODE_MESSAGE_BYTES, OBSERVED_REPORT,
                                      RESULT_REPORT, SESSION_PATH, UNSUPPORTED, Certificate, Command, Envelope, Error,
                                      Heartbeat, Hello, Inventory, Message, Observed, ProtocolError, Renew, Result, Spec,
                                      decode, encode, read_intent_key, report_body)
from better_compute.pki import EnvelopeError, PkiError, make_csr, open_envelope, renew_at, sign_envelope
from better_compute.pki.binding import RENEW_PURPOSE, public_key_der, renewal_body

if TYPE_CHECKING:
    from better_compute.daemon.hypervisor import Hypervisor

log = logging.getLogger(__name__)

SUCCEEDED, FAILED = "succeeded", "failed"
UNSUPPORTED_STATUS = "unsupported"
COLLECT_INVENTORY, REBOOT, DRAIN_PROCESSES = "collect_inventory", "reboot", "drain_processes"

ANSWER_SECONDS = 30.0  # how long the gateway may take to answer a join, or to open a session
RENEW_RETRY_SECONDS = 60.0  # a renewal without an answer is asked again after this long
DRIFT_SECONDS = 60.0  # how often the CDI file is checked against the last applied spec (P2, level-triggered)
FRAMES_QUEUED = 4  # frames received and not yet handled, per connection (P12: a simulator runs many)

Clock = Callable[[], datetime]
UNREACHABLE = (OSError, InvalidHandshake, InvalidURI, TimeoutError)  # what dialling a gateway may raise


def wall_clock() -> datetime:
    """Certificates expire by the wall clock, so that is what renewal reads (the daemon has no
    business time of its own)."""
    return datetime.now(timezone.utc)


def endpoint(gateway: str, path: str) -> str:
    """`wss://host:port` + a protocol path; nodes speak only TLS."""
    if not gateway.startswith("wss://"):
        raise ValueError(f"the gateway is a wss:// URL, not {gateway!r:.200}")
    return gateway.rstrip("/") + path


@contextlib.asynccontextmanager
async def dial(url: str, tls: ssl.SSLContext) -> AsyncIterator[ClientConnection]:
    """A WebSocket to the gateway with the protocol's bounds: frames up to NODE_MESSAGE_BYTES, a
    short receive queue and no compression (a deflate context per connection costs memory, and
    a simulator holds thousands of connections)."""
    async with connect(url, ssl=tls, max_size=NODE_MESSAGE_BYTES, max_queue=FRAMES_QUEUED, compression=None,
                       open_timeout=ANSWER_SECONDS) as connection:
        yield connection


class Rejected(Exception):
    """Intent that does not verify, or verifies but is not for this node: never acted on."""


class Daemon:
    """One node's behaviour: what it sends, and what it answers to each message from the gateway."""

    def __init__(self, state: NodeState, driver: InventoryDriver, cdi_path: Path, clock: Clock = wall_clock,
                 journal_bound: int = DEFAULT_BOUND, reconcile_seconds: float = DRIFT_SECONDS,
                 hypervisor: Hypervisor | None = None) -> None:
        self.state = state
        self.credentials: Credentials = state.load()  # NotJoined before anything is made in the directory
        self.driver = driver
        self.journal = Journal(state.directory, journal_bound)
        self.cdi_path = cdi_path
        self.clock = clock
        self.reconcile_seconds = reconcile_seconds  # how often the CDI file, MIG layouts and health are checked
        self.connected = False
        self.specs_applied = 0
        # Generation and devices of the newest verified spec, which the CDI file follows: the one
        # applied last, or a newer one that could not be applied (the drift check must not bring back
        # what it no longer grants).
        self.applied: tuple[int, list[Any]] | None = None
        self.gpus: list[Any] = []  # the newest verified spec's GPUs (MIG layout), which the GPUs follow
        self.reported: list[dict[str, Any]] | None = None  # the conditions last reported
        self.reported_instances: list[dict[str, Any]] | None = None  # and the instances' states
        self.inventory_due = False  # a GPU changed and the inventory saying so is not sent yet
        self.epoch = 0  # of the session open now (its hello), and the number of the last report sent in it
        self.seq = 0
        self.held_file = withdrawal.HeldFile(state.directory / withdrawal.HELD_FILE)
        self.withdrawal_failed: list[dict[str, Any]] = []  # the condition of a withdrawal not confirmed
        # The VPS reconciler (daemon/hypervisor.py), on hosts that run VMs; and the newest verified
        # spec's instances, which it converges to between specs too.
        self.hypervisor = hypervisor
        self.instances: list[Any] = []

    @property
    def node_id(self) -> UUID:
        return self.credentials.node_id

    def bookings(self) -> list[Any]:
        """The bookings of the newest verified spec (telemetry labels each device with its holder)."""
        return [] if self.applied is None else self.applied[1]

    def sign(self, purpose: str, body: dict[str, Any]) -> Envelope:
        return sign_envelope(purpose, body, self.credentials.key)

        self.epoch = 0  # of the session open now (its hello), and the number of the last report sent in it
        self.seq = 0
    # -- going up --------------------------------------------------------------------------------

    def session_opened(self, epoch: int) -> None:
        """Reports from now on belong to the session of `epoch`, numbered from 1 (nodeproto.report_body)."""
        self.epoch, self.seq = epoch, 0

    def report(self, purpose: str, payload: dict[str, Any]) -> Envelope:
        """A report of this node, signed with its key: what the worker verifies before it takes effect."""
        self.seq += 1
        return sign_envelope(purpose, report_body(str(self.node_id), self.epoch, self.seq, payload), self.credentials.key)

    def inventory(self) -> Inventory:
        """A freshly collected inventory, signed; InventoryError when the driver cannot read it."""
        return Inventory(self.report(INVENTORY_REPORT, {"inventory": self.driver.collect()}))

    def renew_at(self) -> datetime:
        return renew_at(self.credentials.certificate)

    def renewal(self) -> Renew:
        """A CSR for the next SVID, with the same key (the node's signatures keep their key), and the
        renewal signed with it under this session (the signer verifies it; pki/binding.py)."""
        key = self.credentials.key
        body = renewal_body(str(self.node_id), self.epoch, public_key_der(key.public_key()))
        return Renew(make_csr(key, self.credentials.hostname), sign_envelope(RENEW_PURPOSE, body, key))

    # -- coming down -----------------------------------------------------------------------------

    def handle(self, message: Message) -> list[Message]:
        """What to send back for one message from the gateway (in order)."""
        match message:
            case Spec(envelope):
                return self.apply_spec(envelope)
            case Command(envelope):
                return self.execute(envelope)
            case Certificate(pem):
                return self.renewed(pem)
            case Error(code, text, hint):
                log.warning("the gateway says %s: %.500s (%s)", code, text, hint)
                return []
            case _:
                return [Error(INVALID_ARGUMENT, f"a gateway does not send {message.TYPE} on a session")]

    def open_intent(self, envelope: Envelope, purpose: str) -> dict[str, Any]:
        """The body of a spec or command signed by the control plane for this node."""
        body, refusal = None, EnvelopeError("no intent key")
        for key in self.credentials.intent_keys:  # two during an intent key rollover
            try:
                body = open_envelope(envelope, key, purpose)
                break
            except EnvelopeError as error:
                refusal = error
        if body is None:
            raise Rejected(f"the {purpose} envelope does not verify: {refusal}") from None
        if body.get("node_id") != str(self.node_id):
            raise Rejected(f"the {purpose} is for node {body.get('node_id')!r:.60}, not {self.node_id}")
        return body

    def refuse(self, rejected: Rejected) -> list[Message]:
        log.warning("%s: not applied", rejected)
        return [Error(INVALID_ARGUMENT, str(rejected), "Intent must be signed by the control plane for this node.")]

    def keep_bundle(self, bundle: Any) -> None:
        """The node CAs to trust, as the signed spec lists them (a CA rotation reaches the node this
        way); unchanged, absent (an older worker) or unreadable: the bundle of before stays."""
        if not isinstance(bundle, list) or not bundle or not all(isinstance(pem, str) for pem in bundle):
            return
        text = "".join(bundle)
        if text == self.state.bundle_text():
            return
        try:
            self.credentials = self.state.save_bundle(self.credentials, text)
        except PkiError as error:
            log.error("the trust bundle of the spec is refused: %s", error)
            return
        log.info("trust bundle updated: %d node CA(s)", len(bundle))

    def keep_intent_keys(self, texts: Any) -> None:
        """The intent keys the signed spec lists (an intent key rollover: the next one before the
        switch, the previous one after it); unchanged, absent or unreadable: the keys of before stay."""
        if not isinstance(texts, list) or not texts or not all(isinstance(text, str) for text in texts):
            return
        try:
            keys = tuple(read_intent_key(text) for text in texts)
        except ProtocolError as error:
            log.error("the intent keys of the spec are refused: %s", error)
            return
        if keys == self.credentials.intent_keys:
            return
        self.credentials = self.state.save_intent_keys(self.credentials, keys)
        log.info("intent keys updated: %d accepted", len(keys))

    def apply_spec(self, envelope: Envelope) -> list[Message]:
        """Converge the CDI file to a verified spec and report what was applied. A generation older
        than the one applied last is skipped (it arrived late); the same one is applied again,
        which changes nothing on disk but re-checks the inventory and re-reports (a lost report).
        Fail closed: a device that cannot be written is left out and named; when no spec can be
        built or written, the devices this spec does not grant are withdrawn from the file."""
        try:
            body = self.open_intent(envelope, "spec")
            generation, spec = body.get("generation"), body.get("spec")
            if type(generation) is not int or not isinstance(spec, dict) or not isinstance(spec.get("devices"), list):
                raise Rejected("the spec body needs an integer generation and a spec with a devices list")
        except Rejected as rejected:
            return self.refuse(rejected)
        last = self.journal.last_generation
        if last is not None and generation < last:
            log.info("spec generation %d is older than the applied %d: skipped", generation, last)
            return []
        # Trust comes only with a spec not older than the one applied: a replayed old spec (a relay
        # can replay) cannot bring back a retired CA or intent key.
        self.keep_bundle(body.get("trust_bundle"))
        self.keep_intent_keys(body.get("intent_keys"))
        self.gpus = spec["gpus"] if isinstance(spec.get("gpus"), list) else []
        self.instances = spec["instances"] if isinstance(spec.get("instances"), list) else []
        # The processes before anything changes (none of them can be a new holder's): those the spec
        # no longer grants are stopped first, as they would hold a GPU's MIG layout change.
        withdrawn = self.withdraw_processes(spec)
        changed, gpu_conditions = self.converge_gpus(spec["devices"])
        first = self.inventory_after_change(changed)
        # The VMs before the CDI file: a GPU a VM holds is passed through, never a CDI device.
        instances, vm_conditions = self.converge_instances()
        try:
            cdi = self.cdi_spec(generation, spec["devices"])
            write_spec(cdi, self.cdi_path)
        except (InventoryError, CdiError, KeyError, TypeError, OSError) as error:
            log.error("spec generation %d cannot be applied: %s%s", generation, error, self.withdraw(spec["devices"]))
            self.applied = (generation, spec["devices"])
            failed = [{"type": "SpecFailed", "generation": generation, "message": str(error)[:1000]}]
            return first if last is None else [*first, self.observed(last, failed + self.withdrawal_failed + gpu_conditions + vm_conditions,
                                                                     instances=instances)]
        self.journal.last_generation = generation
        self.applied = (generation, spec["devices"])
        self.specs_applied += 1
        log.info("spec generation %d applied: %d device(s)%s%s", generation,
                 len(cdi.document["devices"]) if cdi.document else 0,
                 f", unresolved {', '.join(cdi.unresolved)}" if cdi.unresolved else "",
                 f", not writable {', '.join(name for name, _ in cdi.refused)}" if cdi.refused else "")
        return [*first, self.observed(generation, spec_conditions(cdi) + self.withdrawal_failed + gpu_conditions + vm_conditions,
                                      list(cdi.devices), withdrawn, instances)]

    def converge_gpus(self, devices: list[Any]) -> tuple[bool, list[dict[str, Any]]]:
        """One pass of every GPU's MIG layout towards the newest verified spec (mig.py), and health:
        whether a GPU changed (the inventory must follow), and the GPUs' conditions."""
        passed = passed_through(self.instances)  # a VM's GPU: its layout is the VM's business
        outcomes = converge_all(self.driver, [gpu for gpu in self.gpus if not (isinstance(gpu, dict) and gpu.get("uuid") in passed)],
                                devices)
        conditions = [condition for outcome in outcomes for condition in outcome.conditions()]
        health = getattr(self.driver, "health", None)
        if callable(health):
            try:
                conditions += health()
            except InventoryError as error:
                log.warning("GPU health not read: %s", error)
        return any(outcome.changed for outcome in outcomes), [c for c in conditions if not_normal(c)]

    def inventory_after_change(self, changed: bool) -> list[Message]:
        """A fresh inventory after a GPU changed (the database learns its MIG devices); when the
        driver cannot read it now, the next pass tries again."""
        self.inventory_due = self.inventory_due or changed
        if not self.inventory_due:
            return []
        try:
            inventory = self.inventory()
        except InventoryError as error:
            log.warning("inventory after a MIG change not sent yet: %s", error)
            return []
        self.inventory_due = False
        return [inventory]

    def reconcile(self) -> list[Message]:
        """Level-triggered between specs: the CDI file back to the newest verified spec, the GPUs'
        MIG layouts towards it, the VMs to its instances, and health. What to send: a fresh inventory when a GPU changed, an
        acknowledgement again when the GPUs' conditions did."""
        self.repair_drift()
        if self.applied is None or self.journal.last_generation is None:
            return []
        generation, devices = self.applied
        changed, gpu_conditions = self.converge_gpus(devices)
        messages = self.inventory_after_change(changed)
        instances, vm_conditions = self.converge_instances()  # a tampered or vanished domain is put back
        try:
            cdi_conditions = spec_conditions(self.cdi_spec(generation, devices))
        except (InventoryError, CdiError) as error:
            cdi_conditions = [{"type": "SpecFailed", "generation": generation, "message": str(error)[:1000]}]
        conditions = cdi_conditions + self.withdrawal_failed + gpu_conditions + vm_conditions
        if messages or conditions != self.reported or instances != self.reported_instances:
            messages.append(self.observed(self.journal.last_generation, conditions, instances=instances))
        return messages

    def withdraw_processes(self, spec: dict[str, Any]) -> dict[str, Any] | None:
        """Stop the processes (listed before the CDI file or a GPU changed) whose GPU or MIG
        instance the spec no longer grants or has handed over (withdrawal.py); the report's
        `withdrawal`, or None (and a WithdrawalFailed condition, reported until the next spec's
        withdrawal) when the driver cannot list or stop them: the control plane then keeps the next
        holders waiting."""
        self.withdrawal_failed = []
        try:
            running = self.driver.processes()
            inventory = self.driver.collect()
            held = withdrawal.held_places(spec["devices"], inventory)
            found = withdrawal.strays(running, held, self.held_file.load())
            done = withdrawal.withdraw(self.driver, found, inventory, withdrawal.grace_seconds(spec))
            self.held_file.save(held)
            return done.report()
        except Exception as error:  # whatever the driver raised: the withdrawal is not confirmed
            log.error("processes on devices no longer granted cannot be stopped: %s", error)
            self.withdrawal_failed = [{"type": "WithdrawalFailed", "message": f"{type(error).__name__}: {error}"[:1000]}]
            return None
    def converge_instances(self) -> tuple[list[dict[str, Any]] | None, list[dict[str, Any]]]:
        """Converge the host's VMs to the newest verified spec's instances: what each is now (None
        where this node runs no hypervisor) and the node's conditions."""
        if self.hypervisor is None:
            return None, []
        try:
            reports, conditions = self.hypervisor.converge(self.instances, self.driver.collect())
        except InventoryError as error:
            return [], [{"type": "HypervisorReady", "status": "False", "message": f"inventory unreadable: {error}"[:1000]}]
        return [report.document() for report in reports], conditions

    def cdi_spec(self, generation: int, devices: list[Any]) -> CdiSpec:
        """The CDI spec of these bookings on the node as the driver sees it now, with the driver's
        files every device shares."""
        inventory = self.driver.collect()
        return build_spec({"generation": generation, "devices": devices}, inventory,
                          self.driver.common_edits(inventory))

    def warn_other_specs(self, directories: tuple[Path, ...] = SPEC_DIRS) -> list[str]:
        """At start-up: log a warning for each device of this node another CDI spec also declares
        (nvidia-ctk's own spec, a stale copy), which a runtime would refuse or take from the other
        file. The warnings, for tests."""
        try:
            warnings = other_specs(self.cdi_path, names_of(self.driver.collect()), directories)
        except (InventoryError, OSError) as error:
            log.warning("other CDI specs not checked: %s", error)
            return []
        for warning in warnings:
            log.warning("%s", warning)
        return warnings

    def withdraw(self, devices: list[Any]) -> str:
        """Take the devices `devices` does not grant out of the CDI file; what was done, for the log."""
        try:
            return "; devices no longer granted withdrawn" if withdraw(self.cdi_path, granted_names(devices)) else ""
        except OSError as error:
            return f"; the CDI file cannot be changed either: {error}"

    def repair_drift(self) -> bool:
        """Level-triggered between specs: rewrite the CDI file from the newest verified spec when it
        no longer says what that spec does (edited or removed on the node, or that spec could not be
        applied when it came). Whether it had drifted."""
        if self.applied is None:
            return False
        generation, devices = self.applied
        try:
            drifted = write_spec(self.cdi_spec(generation, devices), self.cdi_path)
        except (InventoryError, CdiError, OSError) as error:
            log.error("the CDI file cannot be checked against spec generation %d: %s", generation, error)
            return False
        if drifted:
            log.warning("the CDI file had drifted from spec generation %d: rewritten", generation)
        return drifted

    def observed(self, generation: int, conditions: list[dict[str, Any]], devices: list[dict[str, Any]] | None = None,
                 withdrawal: dict[str, Any] | None = None, instances: list[dict[str, Any]] | None = None) -> Observed:
        """The acknowledgement of `generation`: the node's conditions and, for a spec applied, per
        booking whether its device is exposed and what was withdrawn (compute.node_observed); on a
        host that runs VMs, what each instance of the spec is (compute.instances_observed)."""
        self.reported = conditions
        self.reported_instances = instances
        payload: dict[str, Any] = {"generation": generation, "conditions": conditions}
        if devices is not None:
            payload["devices"] = devices
        if withdrawal is not None:
            payload["withdrawal"] = withdrawal
        if instances is not None:
            payload["instances"] = instances
        return Observed(self.report(OBSERVED_REPORT, payload))

    def execute(self, envelope: Envelope) -> list[Message]:
        """Execute a verified command once. A repeated delivery is answered from the journal. A
        reboot is journalled before it runs: a reboot that ended the daemon before it recorded
        would be delivered again after boot, and reboot again, forever."""
        try:
            body = self.open_intent(envelope, "command")
            command_id, kind, args = body.get("command_id"), body.get("kind"), body.get("args", {})
            if not isinstance(command_id, str) or not isinstance(kind, str) or not isinstance(args, dict):
                raise Rejected("the command body needs a command_id, a kind and args")
        except Rejected as rejected:
            return self.refuse(rejected)
        recorded = self.journal.status(command_id)
        if recorded is not None:
            log.info("command %s (%s) was executed before (%s): answered from the journal", command_id, kind, recorded)
            return [self.result(command_id, recorded, None)]
        if kind == REBOOT:
            self.journal.record(command_id, SUCCEEDED)
        status, output, messages = self.run_command(kind, args)
        if kind != REBOOT or status != SUCCEEDED:
            self.journal.record(command_id, status)
        log.info("command %s (%s): %s", command_id, kind, status)
        return [*messages, self.result(command_id, status, output)]

    def run_command(self, kind: str, args: dict[str, Any]) -> tuple[str, str | None, list[Message]]:
        """(status, output, messages to send before the result) of one command kind."""
        try:
            if kind == COLLECT_INVENTORY:
                return SUCCEEDED, None, [self.inventory()]
            if kind == REBOOT:
                self.driver.reboot()
                return SUCCEEDED, None, []
            if kind == DRAIN_PROCESSES:
                return SUCCEEDED, json.dumps(self.driver.processes()), []
        except Exception as error:  # a command that fails is reported, whatever failed in it
            log.warning("command %s failed: %s", kind, error)
            return FAILED, f"{type(error).__name__}: {error}", []
        return UNSUPPORTED_STATUS, f"{UNSUPPORTED}: this daemon does not know command kind {kind!r}", []

    def result(self, command_id: str, status: str, output: str | None) -> Result:
        return Result(self.report(RESULT_REPORT, {"command_id": command_id, "status": status, "output": output}))

    def renewed(self, pem: str) -> list[Message]:
        """Keep a renewed SVID; the next connection presents it."""
        try:
            self.credentials = self.state.save_certificate(self.credentials, pem, self.clock())
        except PkiError as error:
            log.error("the renewed certificate is refused: %s", error)
            return [Error(INVALID_ARGUMENT, f"the renewed certificate is refused: {error}")]
        log.info("certificate renewed; valid until %s", self.credentials.certificate.not_valid_after_utc)
        return []


def passed_through(instances: list[Any]) -> set[str]:
    """The UUIDs of the GPUs the spec's instances hold (passed through to their VMs)."""
    return {gpu["device_uuid"] for instance in instances if isinstance(instance, dict) and isinstance(instance.get("gpus"), list)
            for gpu in instance["gpus"] if isinstance(gpu, dict) and isinstance(gpu.get("device_uuid"), str)}


def spec_conditions(cdi: CdiSpec) -> list[dict[str, Any]]:
    """The conditions of an applied spec: bookings left out of the CDI file, and why."""
    conditions = []
    if cdi.unresolved:
        conditions.append({"type": "DevicesUnresolved", "devices": list(cdi.unresolved),
                           "message": "booked devices the inventory does not back (no such GPU, or no single MIG "
                                      "device of the booked UUID, profile and placement) are left out of the CDI spec"})
    if cdi.refused:
        conditions.append({"type": "DevicesNotWritable", "devices": [name for name, _ in cdi.refused],
                           "message": "; ".join(f"{name}: {why}" for name, why in cdi.refused)[:1000]})
    return conditions


# -- the session -------------------------------------------------------------------------------------

async def run(daemon: Daemon, gateways: Sequence[str], stop: asyncio.Event, backoff: Backoff | None = None) -> None:
    """Hold a session with one of the gateways until `stop` is set, reconnecting after every end:
    each new try goes to the next gateway in turn (any gateway serves any node: P1), so the nodes of
    a gateway that died come back on the others after one backoff."""
    urls = itertools.cycle([endpoint(gateway, SESSION_PATH) for gateway in gateways])
    backoff = backoff or Backoff()
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        url = next(urls)
        started = loop.time()
        try:
            await session(daemon, url, stop)
        except ConnectionClosed as closed:
            code = closed.rcvd.code if closed.rcvd is not None else None
            if code == FENCED:
                log.warning("fenced: a newer session of node %s exists; reconnecting after backoff", daemon.node_id)
            else:
                log.warning("session ended (%s)", closed)
        except (*UNREACHABLE, ProtocolError) as error:
            expired = daemon.credentials.certificate.not_valid_after_utc <= daemon.clock()
            log.warning("cannot hold a session with %s: %s%s", url, error,
                        "; the node's certificate has expired: join again with a new token" if expired else "")
        except Exception:
            # A bug or a broken disk: what was applied stays on disk. Try again after the backoff
            # (and in a simulator, do not end the other nodes).
            log.exception("session failed")
        if loop.time() - started > backoff.cap:  # a session that held a while: start the backoff over
            backoff.reset()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), backoff.next())


async def session(daemon: Daemon, url: str, stop: asyncio.Event) -> None:
    """One session, from the handshake to its end; returns when stopped, raises when it ends otherwise."""
    async with dial(url, daemon.state.session_tls()) as connection:
        helpers = [asyncio.create_task(close_on(stop, connection))]
        try:
            async with asyncio.timeout(ANSWER_SECONDS):
                hello = decode(await connection.recv())
            if isinstance(hello, Error):  # the gateway refused the session (e.g. an expired SVID)
                raise ProtocolError(hello.code, hello.message, hello.hint)
            if not isinstance(hello, Hello):
                raise ProtocolError(INVALID_ARGUMENT, f"the gateway opened the session with {hello.TYPE}, not hello")
            log.info("session open (epoch %d) with %s", hello.epoch, url)
            daemon.session_opened(hello.epoch)
            daemon.connected = True
            helpers += [asyncio.create_task(heartbeat(connection, hello.heartbeat_seconds)),
                        asyncio.create_task(keep_converged(daemon, connection, daemon.reconcile_seconds)),
                        asyncio.create_task(renew(daemon, connection))]
            try:
                await send(connection, await asyncio.to_thread(daemon.inventory))
            except InventoryError as error:
                log.warning("inventory not sent: %s", error)
            await converse(daemon, connection)
        except ConnectionClosed:
            if not stop.is_set():
                raise
        finally:
            daemon.connected = False
            for helper in helpers:
                helper.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)


async def converse(daemon: Daemon, connection: ClientConnection) -> None:
    """Handle the gateway's messages one at a time until the connection ends (ConnectionClosed)."""
    while True:
        frame = await connection.recv()
        try:
            message = decode(frame)
        except ProtocolError as error:
            log.warning("the gateway sent what is not a message: %s", error)
            await send(connection, error.error())
            continue
        for answer in await asyncio.to_thread(daemon.handle, message):
            await send(connection, answer)


async def send(connection: ClientConnection, message: Message) -> None:
    try:
        frame = encode(message)
    except ProtocolError as error:  # over its bound: not sent (the gateway would refuse it)
        log.error("%s not sent: %s", message.TYPE, error)
        return
    await connection.send(frame)


async def keep_converged(daemon: Daemon, connection: ClientConnection, seconds: float) -> None:
    with contextlib.suppress(ConnectionClosed):
        while True:
            await asyncio.sleep(seconds)
            for message in await asyncio.to_thread(daemon.reconcile):
                await send(connection, message)


async def heartbeat(connection: ClientConnection, seconds: float) -> None:
    with contextlib.suppress(ConnectionClosed):
        while True:
            await asyncio.sleep(seconds)
            await connection.send(encode(Heartbeat()))


async def renew(daemon: Daemon, connection: ClientConnection) -> None:
    """Ask for a new SVID once 2/3 of the current one's life has passed (pki.renew_at), and again
    every RENEW_RETRY_SECONDS until a `certificate` answer moves that moment on."""
    with contextlib.suppress(ConnectionClosed):
        while True:
            wait = (daemon.renew_at() - daemon.clock()).total_seconds()
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            log.info("renewing the certificate (valid until %s)", daemon.credentials.certificate.not_valid_after_utc)
            await send(connection, daemon.renewal())
            await asyncio.sleep(RENEW_RETRY_SECONDS)


async def close_on(stop: asyncio.Event, connection: ClientConnection) -> None:
    await stop.wait()
    await connection.close()


def stop_on_signals() -> asyncio.Event:
    """An event that SIGTERM or SIGINT sets (in the running loop): the graceful stop."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    return stop


def run_until_signalled(daemon: Daemon, gateways: Sequence[str], telemetry: Telemetry | None = None) -> None:
    """The session until a signal; `telemetry` pushes beside it, in a task of its own, whether or not
    a gateway answers (P8: metrics never travel on the session)."""
    daemon.warn_other_specs()

    async def main() -> None:
        pushing = asyncio.create_task(telemetry.run()) if telemetry else None
        try:
            await run(daemon, gateways, stop_on_signals())
        finally:
            if pushing:
                pushing.cancel()
                await asyncio.gather(pushing, return_exceptions=True)
    asyncio.run(main())
    log.info("stopped")

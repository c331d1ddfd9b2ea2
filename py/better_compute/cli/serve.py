"""`better-compute serve`: the long-running processes. This module is their composition root: it
builds the database pool, the clock and the ports, and passes them in (P10)."""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from enum import Enum
from typing import Annotated, TypeVar

import typer
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from psycopg_pool import PoolTimeout

from pathlib import Path

from better_compute.allinone import run_all
from better_compute.audit import AuditSigner
from better_compute.clock import Clock
from better_compute.db import AsyncDatabase, ContractError, Database
from better_compute.gateway import Gateway, GatewaySettings, serve_until_signalled
from better_compute.gateway.join import intent_public_key
from better_compute.pki import MAX_LIFETIME, CertificateAuthority, IntentSigner, PkiError
from better_compute.pki.csr import check_hostname
from better_compute.pki.pkcs11 import DEFAULT_MODULE, PIN_VARIABLE, Pkcs11CaKey, Pkcs11IntentKey, Pkcs11Token
from better_compute.ports.iam import BetterIam, IamError, IamPort, StaticIam
from better_compute.ports.ledger import BetterIamLedger, Ledger, LocalLedger
from better_compute.relay.app import Relay, RelaySettings
from better_compute.relay.protocol import HttpBounds
from better_compute.relay.server import relay_server, serve
from better_compute.relay.sse import StreamSettings
from better_compute.sealing import SecretKeyring
from better_compute.signer import Signer
from better_compute.siteagent.cli import site_agent_command
from better_compute.webhooks import WebhookSender
from better_compute.worker.handlers import default_handlers
from better_compute.worker.metrics import WorkerMetrics, served
from better_compute.worker.resealing import register_and_reseal
from better_compute.worker.runtime import Worker, WorkerSettings, default_owner, run_until_signalled

K = TypeVar("K")

app = typer.Typer(no_args_is_help=True, help="Run the control plane's processes.")
app.command("site-agent")(site_agent_command)

WORKER_ROLE = "bc_worker"
API_ROLE = "bc_api"
GATEWAY_ROLE = "bc_gateway"
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
POOL_SPARE_CONNECTIONS = 2  # the loop's own calls, beside one per running handler
RELAY_POOL_TIMEOUT_SECONDS = 5.0  # how long a request waits for a database connection (then 503)
HTTP = HttpBounds()  # the relay's HTTP bounds: the defaults of serve api's options, and serve all's


class LedgerKind(str, Enum):
    local = "local"
    better_iam = "better-iam"


def make_ledger(kind: LedgerKind, db: Database, url: str | None, token: str | None) -> Ledger:
    if kind is LedgerKind.local:
        return LocalLedger(db)
    if not url or not token:
        raise typer.BadParameter("--ledger better-iam needs --ledger-url and --ledger-token")
    return BetterIamLedger(url, token)


WebhooksToPrivateAddresses = Annotated[bool, typer.Option(
    "--webhooks-to-private-addresses", envvar="BETTER_COMPUTE_WEBHOOKS_TO_PRIVATE_ADDRESSES",
    help="Let webhooks reach loopback, private and link-local addresses (off: only public ones, so a tenant's "
         "URL cannot reach this network; docs/worker.md).")]


@app.command("worker")
def worker_command(
    dsn: Annotated[str, typer.Option("--dsn", envvar="BETTER_COMPUTE_DSN", help="libpq conninfo or URL.")],
    owner: Annotated[str | None, typer.Option(help="Lease owner shown in ops.work (default host:pid).")] = None,
    concurrency: Annotated[int, typer.Option(min=1, help="Work items run at once.")] = 8,
    lease_seconds: Annotated[float, typer.Option(min=1, help="Lease of a claimed item, renewed at a third.")] = 30.0,
    grace_seconds: Annotated[float, typer.Option(min=0, help="On SIGTERM, how long running items may finish.")] = 30.0,
    poll_seconds: Annotated[float, typer.Option(min=0.1, help="Poll interval besides LISTEN.")] = 1.0,
    ledger: Annotated[LedgerKind, typer.Option(help="Where usage goes (docs/worker.md).")] = LedgerKind.local,
    ledger_url: Annotated[str | None, typer.Option(envvar="BETTER_COMPUTE_LEDGER_URL",
                                                   help="Better IAM base URL, base path included "
                                                        "(https://iam.example/api/iam).")] = None,
    ledger_token: Annotated[str | None, typer.Option(envvar="BETTER_COMPUTE_LEDGER_TOKEN",
                                                     help="API key of a Better IAM service account holding "
                                                          "iam:billing:record.")] = None,
    audit_key: Annotated[Path, typer.Option(envvar="BETTER_COMPUTE_AUDIT_KEY",
                                            help="Ed25519 key that signs audit checkpoints (created if missing).")]
        = Path(".bc/audit-ed25519.pem"),
    intent_key: Annotated[Path, typer.Option(envvar="BETTER_COMPUTE_INTENT_KEY",
                                             help="Ed25519 key that signs node specs and commands (created if "
                                                  "missing).")] = Path(".bc/pki/intent.key"),
    webhook_key: Annotated[Path, typer.Option(envvar="BETTER_COMPUTE_WEBHOOK_KEY",
                                              help="X25519 key that opens webhook secrets (created if missing; every "
                                                   "worker needs the same one).")] = Path(".bc/pki/webhook.key"),
    webhook_old_key: Annotated[list[Path] | None, typer.Option(help="A previous --webhook-key, still opened while its "
                                                                    "secrets are resealed (repeatable).")] = None,
    webhooks_to_private_addresses: WebhooksToPrivateAddresses = False,
    ca_key: Annotated[Path | None, typer.Option(envvar="BETTER_COMPUTE_CA_KEY",
                                                help="The node CA's key: this worker also runs the signer (as "
                                                     "`serve signer`; none without it).")] = None,
    trust_domain: TrustDomain = "better-compute.local",
    svid_lifetime_seconds: SvidLifetime = 3600,
    intent_pkcs11_label: Annotated[str | None, typer.Option(help="The intent key is this Ed25519 key pair of the "
                                                                  "PKCS#11 token (instead of --intent-key).")] = None,
    intent_also: Annotated[list[Path] | None, typer.Option(help="An intent key (PEM public key or key file) nodes "
                                                               "accept besides the signing one: the next one before "
                                                               "a rollover, the previous one after it (repeatable).")]
        = None,
    pkcs11_module: Pkcs11Module = DEFAULT_MODULE,
    pkcs11_token: Pkcs11TokenLabel = None,
    metrics_host: Annotated[str, typer.Option(help="Address /metrics listens on.")] = "127.0.0.1",
    metrics_port: Annotated[int | None, typer.Option(min=0, max=65535, help="Serve /metrics (the worker's and the "
                                                                            "fleet's gauges) on this port (0: any "
                                                                            "free one; none: not served).")] = None,
) -> None:
    """Run the work queue as role bc_worker: sweeps, outbox fan-out, webhooks, usage export, audit checkpoints,
    signing node specs and commands (and, with --ca-key, node certificates)."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    settings = WorkerSettings(owner or default_owner(), concurrency, lease_seconds, poll_seconds, grace_seconds)
    db = worker_database(dsn, concurrency)
    signer = make_signer(dsn, ca_key, trust_domain, svid_lifetime_seconds) if ca_key is not None else None
    with db, signing(signer):
        worker = make_worker(db, settings, make_ledger(ledger, db, ledger_url, ledger_token),
                             WorkerKeys(audit_key, intent_key, SecretKeyring(webhook_key, webhook_old_key or ()),
                                        token_key(open_token(pkcs11_module, pkcs11_token),
                                                  intent_pkcs11_label, Pkcs11IntentKey),
                                        intent_keys_also(intent_also)),
                             webhooks_to_private_addresses)
        with served(worker.metrics, metrics_host, metrics_port):
            run_until_signalled(worker)


def worker_database(dsn: str, concurrency: int) -> Database:
    return Database(dsn, max_size=concurrency + POOL_SPARE_CONNECTIONS, name="better-compute-worker", role=WORKER_ROLE)


@dataclass(frozen=True)
class WorkerKeys:
    """The worker's key files: audit checkpoints, node intent, webhook secrets."""

    audit: Path
    intent: Path
    webhook: SecretKeyring
    intent_in_token: Pkcs11IntentKey | None = None  # instead of the intent file
    intent_also: tuple[Ed25519PublicKey, ...] = ()  # nodes accept these too (an intent key rollover)


def raw_public_key(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def intent_keys_also(paths: list[Path] | None) -> tuple[Ed25519PublicKey, ...]:
    """The public halves of --intent-also files (PEM public keys, or intent key files)."""
    keys = []
    for path in paths or ():
        if not path.exists():
            raise typer.BadParameter(f"--intent-also {path}: no such file")
        try:
            keys.append(intent_public_key(path))
        except PkiError as error:
            raise typer.BadParameter(str(error)) from error
    return tuple(keys)


def make_worker(db: Database, settings: WorkerSettings, ledger: Ledger, keys: WorkerKeys,
                webhooks_to_private_addresses: bool, process_metrics: bool = True) -> Worker:
    """The worker with every handler and its metrics (the process's own too, unless `process_metrics` is
    off), its clock anchored to the database's (the pool is open), its webhook key registered and the
    secrets it can open sealed to it (worker/resealing.py)."""
    with db.pool.connection() as conn:
        clock = Clock.anchored(conn, "worker_api.now")
    register_and_reseal(db, keys.webhook)
    intent = IntentSigner(keys.intent, keys.intent_in_token)
    # The intent keys nodes accept: the signing one, and during a rollover the next or the previous
    # one (docs/nodes.md); a change reaches every node in its next signed spec.
    db.call("worker_api.node_intent_keys_announce",
            [raw_public_key(key) for key in (intent.private_key.public_key(), *keys.intent_also)])
    handlers = default_handlers(db, ledger, WebhookSender(clock, webhooks_to_private_addresses), AuditSigner(keys.audit),
                                intent, keys.webhook)
    logging.getLogger(__name__).info("worker %s: %d kinds, concurrency %d", settings.owner, len(handlers),
                                     settings.concurrency)
    return Worker(db, handlers, settings, WorkerMetrics(db, handlers, process=process_metrics))


class IamKind(str, Enum):
    static = "static"
    better_iam = "better-iam"


def make_iam(kind: IamKind, file: Path | None, url: str | None, credential: str | None, tenant: str | None,
             timeout: float) -> IamPort:
    if kind is IamKind.static:
        if file is None:
            raise typer.BadParameter("--iam static needs --iam-file")
        try:
            return StaticIam.load(file)
        except IamError as error:
            raise typer.BadParameter(str(error)) from error
    if not url or not credential or not tenant:
        raise typer.BadParameter("--iam better-iam needs --iam-url, --iam-credential and --iam-tenant")
    try:
        return BetterIam(url, credential, tenant, timeout)
    except IamError as error:
        raise typer.BadParameter(str(error)) from error


@app.command("api")
def api_command(
    dsn: Annotated[str, typer.Option("--dsn", envvar="BETTER_COMPUTE_DSN", help="libpq conninfo or URL.")],
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port to listen on (0: any free one).")] = 8080,
    iam: Annotated[IamKind, typer.Option(help="Who decides: a static file or Better IAM.")] = IamKind.static,
    iam_file: Annotated[Path | None, typer.Option(envvar="BETTER_COMPUTE_IAM_FILE",
                                                  help="Static IAM file (.toml or .json).")] = None,
    iam_url: Annotated[str | None, typer.Option(envvar="BETTER_COMPUTE_IAM_URL", help="Better IAM base URL.")] = None,
    iam_credential: Annotated[str | None, typer.Option(envvar="BETTER_COMPUTE_IAM_CREDENTIAL",
                                                       help="The relay's own Better IAM credential: a service "
                                                            "account's API key with iam:actions:read.")] = None,
    iam_tenant: Annotated[str | None, typer.Option(envvar="BETTER_COMPUTE_IAM_TENANT",
                                                   help="The Better IAM tenant of that service account, where the "
                                                        "action catalog is read.")] = None,
    iam_timeout: Annotated[float, typer.Option(min=0.1, help="Seconds one IAM decision may take (then deny).")] = 2.0,
    resolve_secret: Annotated[str | None, typer.Option(envvar="BETTER_COMPUTE_RESOLVE_SECRET",
                                                       help="Shared secret of Better IAM's resolver endpoint.")] = None,
    pool_size: Annotated[int, typer.Option(min=1, help="Database connections (LISTEN uses one more).")] = 10,
    pool_timeout: Annotated[float, typer.Option(min=0.1, help="Seconds a request waits for a database connection "
                                                              "(then 503 UNAVAILABLE).")] = RELAY_POOL_TIMEOUT_SECONDS,
    head_seconds: Annotated[float, typer.Option(min=0.1, help="Seconds a request's line and headers may take to "
                                                              "arrive (then the connection is closed).")]
        = HTTP.head_seconds,
    body_seconds: Annotated[float, typer.Option(min=0.1, help="Seconds a request's body may take to arrive after "
                                                              "its headers (then the connection is closed).")]
        = HTTP.body_seconds,
    keep_alive_seconds: Annotated[float, typer.Option(min=0.1, help="Seconds an idle connection stays open between "
                                                                    "requests.")] = HTTP.keep_alive_seconds,
    max_connections: Annotated[int, typer.Option(min=2, help="Connections open at once, event streams included "
                                                             "(at the bound: 503).")] = HTTP.max_connections,
    heartbeat_seconds: Annotated[float, typer.Option(min=0.1, help="Quiet time before an event stream heartbeat.")]
        = 15.0,
    stream_buffer: Annotated[int, typer.Option(min=1, help="Events buffered per event stream.")] = 1000,
    stall_seconds: Annotated[float, typer.Option(min=0.1, help="How long an event stream waits for a client that "
                                                                "reads nothing.")] = 10.0,
    max_streams: Annotated[int, typer.Option(min=1, help="Event streams open at once.")] = 100,
    poll_seconds: Annotated[float, typer.Option(min=0.1, help="Event streams poll besides LISTEN this often.")] = 1.0,
    grace_seconds: Annotated[float, typer.Option(min=0, help="On SIGTERM, how long requests may finish.")] = 30.0,
) -> None:
    """Run the HTTP API relay as role bc_api: every catalog method, the event stream, /health, /metrics."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    streams = StreamSettings(heartbeat_seconds=heartbeat_seconds, poll_seconds=poll_seconds, buffer=stream_buffer,
                             stall_seconds=stall_seconds, max_streams=max_streams)
    bounds = HttpBounds(head_seconds=head_seconds, body_seconds=body_seconds, keep_alive_seconds=keep_alive_seconds,
                        max_connections=max_connections)
    serve(make_relay(dsn, pool_size, pool_timeout, make_iam(iam, iam_file, iam_url, iam_credential, iam_tenant, iam_timeout),
                     RelaySettings(resolve_secret, streams)), host, port, grace_seconds, bounds)


def make_relay(dsn: str, pool_size: int, pool_timeout: float, iam: IamPort, settings: RelaySettings) -> Relay:
    return Relay(AsyncDatabase(dsn, max_size=pool_size, name="better-compute-api", role=API_ROLE, timeout=pool_timeout),
                 iam, settings)


@app.command("gateway")
def gateway_command(
    dsn: Annotated[str, typer.Option("--dsn", envvar="BETTER_COMPUTE_DSN", help="libpq conninfo or URL.")],
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port to listen on (0: any free one).")] = 8443,
    name: Annotated[str, typer.Option(help="This gateway's name (node sessions, its certificate).")] = "gw-1",
    ca_bundle: Annotated[Path, typer.Option(help="Where the gateway writes the node CA bundle it serves (read from "
                                                 "the database), for nodes to trust.")] = Path(".bc/pki/ca-bundle.crt"),
    ca_key: Annotated[Path | None, typer.Option(envvar="BETTER_COMPUTE_CA_KEY", hidden=True,
                                                help="Refused: a gateway holds no CA key.")] = None,
    intent_key: Annotated[Path, typer.Option(envvar="BETTER_COMPUTE_INTENT_KEY",
                                             help="The worker's intent key, or its public key (PEM), handed to "
                                                  "joining nodes (created if missing).")]
        = Path(".bc/pki/intent.key"),
    server_name: Annotated[list[str] | None, typer.Option(help="Another DNS name or address for the gateway's "
                                                               "certificate (repeatable).")] = None,
    heartbeat_seconds: Annotated[float, typer.Option(min=0.1, help="Nodes heartbeat this often; heartbeats are "
                                                                   "written in one statement this often.")] = 5.0,
    spec_poll_seconds: Annotated[float, typer.Option(min=0.1, help="Sessions are polled for specs and commands "
                                                                   "this often, besides LISTEN.")] = 5.0,
    pool_size: Annotated[int, typer.Option(min=1, help="Database connections (LISTEN uses one more).")] = 10,
) -> None:
    """Run the node gateway as role bc_gateway: nodes join (/join) and hold their sessions (/session) here.
    It holds no CA key: certificates come from the signer (`serve signer`) through the database."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    if ca_key is not None:
        logging.getLogger(__name__).error(
            "the gateway holds no CA key (it relays, P14): give --ca-key to `better-compute serve signer` "
            "(or `serve worker --ca-key`) and start the gateway without it")
        raise typer.Exit(2)
    settings = GatewaySettings(name, host, port, heartbeat_seconds, spec_poll_seconds, tuple(server_name or ()))
    gateway = make_gateway(dsn, pool_size, ca_bundle, intent_key, settings)
    try:
        serve_until_signalled(gateway)
    except GATEWAY_START_ERRORS as error:
        logging.getLogger(__name__).error("the gateway cannot start: %s", error)
        raise typer.Exit(1) from error


GATEWAY_START_ERRORS = (ContractError, PoolTimeout, PkiError, OSError)  # the database, the CA, the address


def make_gateway(dsn: str, pool_size: int, ca_bundle: Path, intent_key: Path, settings: GatewaySettings) -> Gateway:
    logging.getLogger("websockets").setLevel(logging.WARNING)  # not a line per connection: the gateway logs sessions
    try:
        key = intent_public_key(intent_key)
        check_hostname(settings.name)
    except PkiError as error:
        raise typer.BadParameter(str(error)) from error
    db = AsyncDatabase(dsn, max_size=pool_size, name="better-compute-gateway", role=GATEWAY_ROLE)
    return Gateway(db, ca_bundle, key, settings)


CaKey = Annotated[Path, typer.Option("--ca-key", envvar="BETTER_COMPUTE_CA_KEY",
                                     help="The node CA's key (created if missing; its certificate is next to it, .crt).")]
TrustDomain = Annotated[str, typer.Option(help="SPIFFE trust domain of the node CA.")]
SvidLifetime = Annotated[int, typer.Option(min=60, max=int(MAX_LIFETIME.total_seconds()),
                                           help="Lifetime of the node certificates issued.")]


Pkcs11Module = Annotated[Path, typer.Option(envvar="BETTER_COMPUTE_PKCS11_MODULE",
                                            help="The PKCS#11 module (library) of the HSM.")]
Pkcs11TokenLabel = Annotated[str | None, typer.Option(envvar="BETTER_COMPUTE_PKCS11_TOKEN",
                                                      help="Label of the PKCS#11 token that holds keys (its user PIN "
                                                           "in BETTER_COMPUTE_PKCS11_PIN).")]


def open_token(module: Path, label: str | None) -> Pkcs11Token | None:
    """The PKCS#11 token named (None when none is), logged in with the PIN from the environment."""
    if label is None:
        return None
    pin = os.environ.get(PIN_VARIABLE)
    if not pin:
        raise typer.BadParameter(f"--pkcs11-token {label} needs its PIN in {PIN_VARIABLE}")
    try:
        return Pkcs11Token(module, label, pin)
    except PkiError as error:
        raise typer.BadParameter(str(error)) from error


def token_key(token: Pkcs11Token | None, label: str | None, make: Callable[[Pkcs11Token, str], K]) -> K | None:
    """The key labelled `label` in the token (None without a label); BadParameter without a token."""
    if label is None:
        return None
    if token is None:
        raise typer.BadParameter(f"a key in a PKCS#11 token ({label}) needs --pkcs11-token")
    try:
        return make(token, label)
    except PkiError as error:
        raise typer.BadParameter(str(error)) from error


def make_signer(dsn: str, ca_key: Path, trust_domain: str, svid_lifetime_seconds: int,
                hsm_key: Pkcs11CaKey | None = None) -> Signer:
    """The signer with its own small pool (role bc_worker), its clock anchored to the database's. Its
    CA key is the file `ca_key`, or `hsm_key` (then `ca_key` only says where the certificate is: .crt)."""
    db = Database(dsn, max_size=2, name="better-compute-signer", role=WORKER_ROLE)
    db.open()
    with db.pool.connection() as conn:
        clock = Clock.anchored(conn, "worker_api.now")
    try:
        ca = (CertificateAuthority.open(ca_key, trust_domain, clock.now()) if hsm_key is None else
              CertificateAuthority.of_key(hsm_key, trust_domain, clock.now(), ca_key.with_suffix(".crt")))
    except PkiError as error:
        db.close()
        raise typer.BadParameter(str(error)) from error
    return Signer(db, ca, clock, timedelta(seconds=svid_lifetime_seconds))


@contextmanager
def signing(signer: Signer | None) -> Iterator[None]:
    """Run the signer (when there is one) in a thread for the duration."""
    if signer is None:
        yield
        return
    thread = threading.Thread(target=signer.run, name="signer", daemon=True)
    thread.start()
    try:
        yield
    finally:
        signer.stop()
        thread.join(signer.poll_seconds + 5)
        signer.db.close()


@app.command("signer")
def signer_command(
    dsn: Annotated[str, typer.Option("--dsn", envvar="BETTER_COMPUTE_DSN", help="libpq conninfo or URL.")],
    ca_key: CaKey = Path(".bc/pki/ca.key"),
    trust_domain: TrustDomain = "better-compute.local",
    svid_lifetime_seconds: SvidLifetime = 3600,
    ca_pkcs11_label: Annotated[str | None, typer.Option(help="The CA key is this key pair of the PKCS#11 token "
                                                              "(--ca-key then only names the certificate: .crt).")]
        = None,
    pkcs11_module: Pkcs11Module = DEFAULT_MODULE,
    pkcs11_token: Pkcs11TokenLabel = None,
) -> None:
    """Run the signer as role bc_worker: the one process holding the node CA's key. It issues the
    certificates gateways asked for, as the database authorises them (docs/nodes.md)."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    hsm_key = token_key(open_token(pkcs11_module, pkcs11_token), ca_pkcs11_label, Pkcs11CaKey)
    signer = make_signer(dsn, ca_key, trust_domain, svid_lifetime_seconds, hsm_key)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda _signum, _frame: signer.stop())
    logging.getLogger(__name__).info("signer: CA certificate %s", ca_key.with_suffix(".crt").resolve())
    try:
        signer.run()
    finally:
        signer.db.close()


@app.command("all")
def all_command(
    dsn: Annotated[str, typer.Option("--dsn", envvar="BETTER_COMPUTE_DSN", help="libpq conninfo or URL.")],
    host: Annotated[str, typer.Option(help="Address the relay and the gateway listen on.")] = "127.0.0.1",
    api_port: Annotated[int, typer.Option(min=0, max=65535, help="The relay's port (0: any free one).")] = 8080,
    gateway_port: Annotated[int, typer.Option(min=0, max=65535, help="The gateway's port (0: any free one).")] = 8443,
    iam_file: Annotated[Path | None, typer.Option(envvar="BETTER_COMPUTE_IAM_FILE",
                                                  help="Static IAM file (.toml or .json).")] = None,
    keys: Annotated[Path, typer.Option(help="Folder of the node CA (ca.key, ca.crt), the intent, audit and webhook "
                                            "keys (created if missing).")] = Path(".bc/pki"),
    trust_domain: Annotated[str, typer.Option(help="SPIFFE trust domain of the node CA.")] = "better-compute.local",
    name: Annotated[str, typer.Option(help="The gateway's name (node sessions, its certificate).")] = "gw-1",
    heartbeat_seconds: Annotated[float, typer.Option(min=0.1, help="Node heartbeat interval.")] = 5.0,
    spec_poll_seconds: Annotated[float, typer.Option(min=0.1, help="Gateway poll besides LISTEN.")] = 5.0,
    concurrency: Annotated[int, typer.Option(min=1, help="Work items the worker runs at once.")] = 8,
    grace_seconds: Annotated[float, typer.Option(min=0, help="On SIGTERM, how long work in flight may finish.")] = 30.0,
    webhooks_to_private_addresses: WebhooksToPrivateAddresses = False,
) -> None:
    """Run the API relay, the node gateway and the worker in one process (a single machine), each as
    its own role (bc_api, bc_gateway, bc_worker), with the static IAM file and the local ledger."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    iam = make_iam(IamKind.static, iam_file, None, None, None, 2.0)
    relay = relay_server(make_relay(dsn, 10, RELAY_POOL_TIMEOUT_SECONDS, iam, RelaySettings(None, StreamSettings())),
                         host, api_port, grace_seconds, HTTP)
    # One process: its own series and the worker's are on the relay's /metrics, the gateway's has neither.
    gateway = make_gateway(dsn, 10, keys / "ca-bundle.crt", keys / "intent.key",
                           GatewaySettings(name, host, gateway_port, heartbeat_seconds, spec_poll_seconds,
                                           process_metrics=False))
    # One machine: the signer runs in this process too (the gateway code still never sees its key).
    signer = make_signer(dsn, keys / "ca.key", trust_domain, 3600)
    settings = WorkerSettings(default_owner(), concurrency, 30.0, 1.0, grace_seconds)
    db = worker_database(dsn, concurrency)
    with db, signing(signer):
        worker = make_worker(db, settings, LocalLedger(db),
                             WorkerKeys(keys / "audit.pem", keys / "intent.key", SecretKeyring(keys / "webhook.key")),
                             webhooks_to_private_addresses, process_metrics=False)
        relay.relay.metrics.join(worker.metrics)
        try:
            run_all(relay, gateway, worker)
        except GATEWAY_START_ERRORS as error:
            logging.getLogger(__name__).error("serve all cannot start: %s", error)
            raise typer.Exit(1) from error

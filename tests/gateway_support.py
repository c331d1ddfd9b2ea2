"""The real gateway and worker as child processes, and a minimal node built from nodeproto + pki,
for tests (the real daemon is `bcd`).

    with running_gateway(db_dsn, tmp_path) as gateway:           # `serve gateway --port 0`
        gateway.url, gateway.ca_path, gateway.metrics()
    with running_worker_process(db_dsn, tmp_path):                # `serve worker`, signs specs/commands
        ...
    node = TestNode("host-1", gpus=1, directory=tmp_path / "host-1")
    joined = await node.join(gateway, token)                      # Joined (or NodeRefused)
    async with node.session(gateway) as session:                  # mutual TLS with the SVID
        session.hello.epoch; await session.send(Heartbeat()); await session.expect(Spec)
        await session.send(Observed(session.report("node.observed", {"generation": 2, "conditions": []})))

Signer, gateway and worker share one key directory: the signer creates the CA (`ca.key`, `ca.crt`)
and publishes it; the gateway holds no CA key and writes the bundle it serves (`ca-bundle.crt`);
gateway and worker read the intent key (`intent.key`, created by whichever starts first).
"""

from __future__ import annotations

import asyncio
import os
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import ClientConnection, connect

from better_compute.nodeproto import (JOIN_PATH, SESSION_PATH, Error, Hello, Join, Joined, Message, Renew, decode,
                                      encode, read_intent_key, report_body)
from better_compute.pki import generate_node_key, make_csr, sign_envelope
from better_compute.pki.binding import RENEW_PURPOSE, join_token_binding, public_key_der, renewal_body
from better_compute.pki.keys import private_key_pem
from fleet import h200_inventory
from relay_support import LOG_TAIL_CHARS, Relay, start

REPO = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "better_compute.cli.main", "serve"]
CA_LINE = "ca: "
WORKER_READY = "kinds, concurrency"  # what `serve worker` logs once it is connected
SIGNER_READY = "published: node CA "  # what `serve signer` logs once its CA is published
START_SECONDS = 30.0
EXPECT_SECONDS = 10.0

M = TypeVar("M", bound=Message)


# -- processes -----------------------------------------------------------------------------------

@dataclass
class GatewayProcess:
    """`serve gateway` running: its URL, the CA certificate it printed, its process (relay_support's)."""

    server: Relay
    ca_path: Path
    keys: Path

    @property
    def url(self) -> str:
        return self.server.url

    def tls(self) -> ssl.SSLContext:
        """A client context that trusts the gateway's CA (and checks its name, here 127.0.0.1)."""
        return ssl.create_default_context(cafile=str(self.ca_path))

    def metrics(self) -> dict[str, float]:
        """GET /metrics on the gateway's port: sample name (with labels) -> value."""
        url = self.url.replace("wss://", "https://", 1) + "/metrics"
        response = httpx.get(url, verify=self.tls(), timeout=10)
        response.raise_for_status()
        return {sample.name + label_text(sample.labels): sample.value
                for family in text_string_to_metric_families(response.text) for sample in family.samples}

    def stop(self) -> int:
        return self.server.stop()


def label_text(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{key}="{value}"' for key, value in sorted(labels.items())) + "}" if labels else ""


def gateway_command(dsn: str, keys: Path, extra: Sequence[str]) -> list[str]:
    return [*CLI, "gateway", "--dsn", dsn, "--port", "0", "--name", "gw-test", "--ca-bundle", str(keys / "ca-bundle.crt"),
            "--intent-key", str(keys / "intent.key"), "--heartbeat-seconds", "1", "--spec-poll-seconds", "1", *extra]


@contextmanager
def running_gateway(dsn: str, keys: Path, extra: Sequence[str] = (),
                    signer_extra: Sequence[str] = ()) -> Iterator[GatewayProcess]:
    """`better-compute serve signer` (the CA key, `keys`/ca.key) and `better-compute serve gateway`
    (no CA key) on a free port, its keys in `keys`; SIGTERM (then SIGKILL) on exit."""
    with running_signer(dsn, keys, signer_extra), running_gateway_alone(dsn, keys, extra) as gateway:
        yield gateway


@contextmanager
def running_gateway_alone(dsn: str, keys: Path, extra: Sequence[str] = ()) -> Iterator[GatewayProcess]:
    """`better-compute serve gateway` on a free port (a signer must run); SIGTERM (then SIGKILL) on exit."""
    server = start(gateway_command(dsn, keys, extra))
    try:
        assert server.process.stdout is not None
        line = server.process.stdout.readline()
        assert line.startswith(CA_LINE), f"no CA line after the listening line: {line!r}\n{server.tail()}"
        yield GatewayProcess(server, Path(line[len(CA_LINE):].strip()), keys)
        server.stop()
        assert "Traceback" not in server.log(), f"the gateway failed somewhere:\n{server.tail()}"
    finally:
        server.stop()
        server.log_path.unlink(missing_ok=True)


@contextmanager
def running_signer(dsn: str, keys: Path, extra: Sequence[str] = ()) -> Iterator[subprocess.Popen[bytes]]:
    """`better-compute serve signer` with `keys`/ca.key, ready once it published its CA."""
    with running_logged([*CLI, "signer", "--dsn", dsn, "--ca-key", str(keys / "ca.key"), *extra],
                        SIGNER_READY, "signer") as process:
        yield process


@contextmanager
def running_worker_process(dsn: str, keys: Path, extra: Sequence[str] = ()) -> Iterator[subprocess.Popen[bytes]]:
    """`better-compute serve worker` (it signs specs and commands with `keys`/intent.key), ready once
    it logs that it runs; SIGTERM (then SIGKILL) on exit. Its log is quoted when it does not start."""
    with running_logged([*CLI, "worker", "--dsn", dsn, "--owner", "test-worker", "--poll-seconds", "0.2",
                         "--grace-seconds", "5", "--intent-key", str(keys / "intent.key"), "--audit-key",
                         str(keys / "audit.pem"), "--webhook-key", str(keys / "webhook.key"), *extra],
                        WORKER_READY, "worker") as process:
        yield process


@contextmanager
def running_logged(command: list[str], ready: str, what: str) -> Iterator[subprocess.Popen[bytes]]:
    """A `serve` process, ready once its log says `ready`; SIGTERM (then SIGKILL) on exit."""
    log_path = Path(tempfile.mkstemp(prefix=f"{what}-", suffix=".log")[1])
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log_file, cwd=REPO,
                                   env={**os.environ, "PYTHONPATH": str(REPO / "py")})
    try:
        deadline = time.monotonic() + START_SECONDS
        while ready not in log_path.read_text(errors="replace"):
            assert process.poll() is None and time.monotonic() < deadline, \
                f"the {what} did not start:\n{log_path.read_text(errors='replace')[-LOG_TAIL_CHARS:]}"
            time.sleep(0.05)
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log_path.unlink(missing_ok=True)


# -- a node --------------------------------------------------------------------------------------

class NodeRefused(Exception):
    def __init__(self, error: Error):
        super().__init__(f"{error.code}: {error.message}")
        self.error = error


@dataclass
class TestNode:
    """A node as the protocol sees it: a key, a CSR, an inventory; after join its SVID and node id."""

    __test__ = False  # not a pytest class

    hostname: str
    gpus: int
    directory: Path
    key: ec.EllipticCurvePrivateKey = field(default_factory=generate_node_key)
    joined: Joined | None = None

    @property
    def inventory(self) -> dict[str, Any]:
        return h200_inventory(self.hostname, self.gpus)

    @property
    def node_id(self) -> str:
        assert self.joined is not None, "join first"
        return self.joined.node_id

    def signed(self, purpose: str, body: dict[str, Any],
               key: ec.EllipticCurvePrivateKey | None = None) -> dict[str, Any]:
        return sign_envelope(purpose, body, key or self.key)

    def join_message(self, token: str) -> Join:
        token_ref, proof = join_token_binding(token, public_key_der(self.key.public_key()))
        return Join(token_ref, proof, make_csr(self.key, self.hostname), self.signed("inventory", self.inventory))

    async def join(self, gateway: GatewayProcess, token: str, message: Join | None = None) -> Joined:
        """Join (with `message`, else the proper one); NodeRefused with the gateway's error."""
        async with connect(gateway.url + JOIN_PATH, ssl=gateway.tls()) as connection:
            await connection.send(encode(message or self.join_message(token)))
            answer = decode(await connection.recv())
        if isinstance(answer, Error):
            raise NodeRefused(answer)
        assert isinstance(answer, Joined), answer
        self.joined = answer
        self.directory.mkdir(parents=True, exist_ok=True)
        self.write_certificate(answer.certificate)
        return answer

    def write_certificate(self, pem: str) -> None:
        (self.directory / "node.crt").write_text(pem)
        (self.directory / "node.key").write_bytes(private_key_pem(self.key))

    @property
    def intent_key(self) -> Ed25519PublicKey:
        """The control plane's key, as the node got it at join: what specs and commands verify with."""
        assert self.joined is not None, "join first"
        return read_intent_key(self.joined.intent_key)

    @property
    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate((self.directory / "node.crt").read_bytes())

    def tls(self, gateway: GatewayProcess) -> ssl.SSLContext:
        context = gateway.tls()
        context.load_cert_chain(self.directory / "node.crt", self.directory / "node.key")
        return context

    @asynccontextmanager
    async def session(self, gateway: GatewayProcess, expect_hello: bool = True) -> AsyncIterator[NodeSession]:
        async with connect(gateway.url + SESSION_PATH, ssl=self.tls(gateway), max_size=None) as connection:
            session = NodeSession(self, connection)
            if expect_hello:
                session.hello = await session.expect(Hello)
            yield session


@dataclass
class NodeSession:
    node: TestNode
    connection: ClientConnection
    hello: Hello | None = None
    received: list[Message] = field(default_factory=list)  # everything, in order
    seq: int = 0  # of the last report made in this session

    def report(self, purpose: str, payload: dict[str, Any], key: ec.EllipticCurvePrivateKey | None = None) -> dict[str, Any]:
        """A report envelope as the daemon makes it: node id, this session's epoch, the next number."""
        assert self.hello is not None, "the session has no hello"
        self.seq += 1
        return self.node.signed(purpose, report_body(self.node.node_id, self.hello.epoch, self.seq, payload), key)

    def renew(self, new_key: ec.EllipticCurvePrivateKey | None = None,
              signer: ec.EllipticCurvePrivateKey | None = None) -> Renew:
        """A renewal as the daemon makes it: a CSR (for `new_key`, else the node's key) and the
        node.renew envelope signed by `signer` (else the node's key: the one it registered)."""
        assert self.hello is not None, "the session has no hello"
        key = new_key or self.node.key
        body = renewal_body(self.node.node_id, self.hello.epoch, public_key_der(key.public_key()))
        return Renew(make_csr(key, self.node.hostname), sign_envelope(RENEW_PURPOSE, body, signer or self.node.key))

    async def send(self, message: Message) -> None:
        await self.connection.send(encode(message))

    async def expect(self, kind: type[M], where: Callable[[M], bool] = lambda _message: True,
                     timeout: float = EXPECT_SECONDS) -> M:
        """The next message of `kind` that `where` accepts (others are skipped, kept in `received`)."""
        async with asyncio.timeout(timeout):
            while True:
                message = decode(await self.connection.recv())
                self.received.append(message)
                if isinstance(message, kind) and where(message):
                    return message

    async def closed_with(self, timeout: float = EXPECT_SECONDS) -> int | None:
        """Wait for the connection to end (reading whatever comes); its close code."""
        async with asyncio.timeout(timeout):
            await self.connection.wait_closed()
        return self.connection.close_code

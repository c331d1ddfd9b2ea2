"""The site agent dials out to a gateway (P5; docs/bare-metal.md) and keeps its session.

Identity: at start, and again at 2/3 of its certificate's life, the agent makes a fresh P-256 key
(in memory only), and asks the gateway for a certificate (/agent/certificate) with a CSR and an
agent.certificate envelope signed by its registered Ed25519 signing key; the signer issues
`spiffe://<trust domain>/site/<site>/agent/<agent id>`, the database decides. It then dials /agent
with that certificate (mutual TLS; it trusts the node CA bundle `--ca-file`, as `bcd join` does).

Session: `agent_hello` (epoch, the BMC session cap, the control plane's time); the agent sends
`claim` when it has room and was woken (`wake`: operations were queued), on connect, and every
second; `ops` come back and run in threads; each signed result is queued and sent (`bmc_result`)
by the session's thread, and stays queued across a reconnect until sent (a result of an operation
taken back meanwhile is FENCED and dropped by the database: harmless). When the connection ends
it dials again with backoff (better_compute.backoff: up to 0.5 s doubling to `--redial-seconds`, 10 s, full jitter); nothing about its machines
changes meanwhile (P6).
"""

from __future__ import annotations

import collections
import logging
import ssl
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from websockets.exceptions import ConnectionClosed, InvalidHandshake
from websockets.sync.client import ClientConnection, connect

from better_compute.backoff import Backoff
from better_compute.clock import Clock
from better_compute.nodeproto import (AGENT_CERTIFICATE_PATH, AGENT_PATH, NODE_MESSAGE_BYTES, AgentCertify, AgentHello,
                                      BmcResult, Certificate, Claim, Error, Message, Ops, ProtocolError, Relayed, Wake,
                                      decode, encode)
from better_compute.pki import IntentSigner, generate_node_key, make_csr
from better_compute.pki.binding import AGENT_CERTIFICATE_PURPOSE, agent_certificate_body, public_key_der
from better_compute.pki.keys import private_key_pem
from better_compute.pki.svid import RENEW_AFTER_FRACTION
from better_compute.siteagent.agent import POLL_SECONDS, SiteAgent

log = logging.getLogger(__name__)

FIRST_PAUSE_SECONDS = 0.5
LAST_PAUSE_SECONDS = 10.0  # the default of `--redial-seconds`
RECEIVE_SECONDS = 0.1  # how often the session's thread looks for results to send
ANSWER_SECONDS = 60.0  # the certificate's answer (the gateway waits up to 30 s for the signer)


class Refused(Exception):
    """The gateway answered an error (its code and message)."""


class GatewayLink:
    def __init__(self, agent: SiteAgent, url: str, ca_file: Path, signer: IntentSigner,
                 redial_seconds: float = LAST_PAUSE_SECONDS):
        self.agent, self.url, self.ca_file, self.signer = agent, url.rstrip("/"), ca_file, signer
        self.redial_seconds = redial_seconds
        self.results: collections.deque[tuple[dict[str, Any], dict[str, Any]]] = collections.deque()
        self.lock = threading.Lock()
        self.clock: Clock | None = None
        self.tls: ssl.SSLContext | None = None
        self.renew_at = 0.0  # time.monotonic() when the certificate is 2/3 through its life

    # -- Link ------------------------------------------------------------------------------------

    def now(self) -> datetime:
        if self.clock is None:
            raise RuntimeError("no session yet: the control plane's time is not known")
        return self.clock.now()

    def relay(self, op: dict[str, Any], envelope: dict[str, Any]) -> None:
        with self.lock:
            self.results.append((op, envelope))

    # -- certificate -----------------------------------------------------------------------------

    def server_tls(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        return context

    def certify(self) -> None:
        """A fresh key and its certificate (through the gateway, from the signer) into a new client context."""
        key = generate_node_key()
        der = public_key_der(key.public_key())
        proof = self.signer.sign(AGENT_CERTIFICATE_PURPOSE, agent_certificate_body(str(self.agent.agent_id), der))
        with connect(self.url + AGENT_CERTIFICATE_PATH, ssl=self.server_tls(), max_size=NODE_MESSAGE_BYTES,
                     open_timeout=30) as connection:
            connection.send(encode(AgentCertify(str(self.agent.agent_id), make_csr(key, "site-agent"), proof)))
            answer = self.expect(connection, Certificate, ANSWER_SECONDS)
        certificate = x509.load_pem_x509_certificate(answer.certificate.encode("ascii"))
        context = self.server_tls()
        with tempfile.TemporaryDirectory(prefix="bc-site-agent-tls-") as directory:  # mode 0700
            cert_file, key_file = Path(directory) / "agent.crt", Path(directory) / "agent.key"
            cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
            key_file.touch(mode=0o600)
            key_file.write_bytes(private_key_pem(key))
            context.load_cert_chain(cert_file, key_file)
        lifetime = (certificate.not_valid_after_utc - certificate.not_valid_before_utc).total_seconds()
        self.tls, self.renew_at = context, time.monotonic() + lifetime * RENEW_AFTER_FRACTION - 60
        log.info("site agent %s: certificate issued (%s)", self.agent.agent_id, certificate.extensions.get_extension_for_class(
            x509.SubjectAlternativeName).value.get_values_for_type(x509.UniformResourceIdentifier)[0])

    @staticmethod
    def expect(connection: ClientConnection, kind: type[Any], timeout: float) -> Any:
        message = decode(connection.recv(timeout=timeout))
        if isinstance(message, Error):
            raise Refused(f"{message.code}: {message.message}")
        if not isinstance(message, kind):
            raise ProtocolError("INVALID_ARGUMENT", f"the gateway answered {message.TYPE}, not {kind.TYPE}")
        return message

    # -- session ---------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Dial, keep the session, dial again with backoff, until `stop`; then wait for running operations."""
        backoff = Backoff(FIRST_PAUSE_SECONDS, self.redial_seconds)
        while not stop.is_set():
            try:
                if self.tls is None or time.monotonic() >= self.renew_at:
                    self.certify()
                assert self.tls is not None
                with connect(self.url + AGENT_PATH, ssl=self.tls, max_size=NODE_MESSAGE_BYTES, open_timeout=30) as connection:
                    hello: AgentHello = self.expect(connection, AgentHello, 30)
                    self.clock = Clock(datetime.fromisoformat(hello.now))
                    self.agent.sessions = hello.bmc_sessions
                    log.info("site agent %s: session open (epoch %d) at %s", self.agent.agent_id, hello.epoch, self.url)
                    backoff.reset()
                    self.converse(connection, stop)
            except (OSError, ConnectionClosed, InvalidHandshake, ProtocolError, Refused, TimeoutError) as error:
                pause = backoff.next()
                log.warning("site agent %s: no session (%s); dialing again in %.1f s", self.agent.agent_id, error, pause)
                stop.wait(pause)
        self.agent.stop()

    def converse(self, connection: ClientConnection, stop: threading.Event) -> None:
        """Claim, run, send results, until the connection ends, `stop`, or the certificate is due."""
        wanted, claiming, claimed_at = True, False, 0.0
        while not stop.is_set() and time.monotonic() < self.renew_at:
            wanted = self.flush(connection) or wanted
            room = self.agent.room()
            if room > 0 and not claiming and (wanted or time.monotonic() - claimed_at >= POLL_SECONDS):
                connection.send(encode(Claim(room)))
                wanted, claiming, claimed_at = False, True, time.monotonic()
            try:
                message: Message = decode(connection.recv(timeout=RECEIVE_SECONDS))
            except TimeoutError:
                continue
            except ProtocolError as error:
                log.warning("site agent %s: the gateway sent %s", self.agent.agent_id, error)
                continue
            match message:
                case Ops(ops, now):
                    claiming = False
                    self.clock = Clock(datetime.fromisoformat(now))
                    self.agent.start(ops, self)
                case Wake():
                    wanted = True
                case Relayed(op_id, answer):
                    log.info("site agent %s: result of operation %s %s", self.agent.agent_id, op_id, answer)
                case Error(code, text, _hint):
                    claiming = False  # the claim's answer, or a result's: the next claim goes out at once
                    log.info("site agent %s: the gateway answered %s: %s", self.agent.agent_id, code, text)
                case _:
                    log.warning("site agent %s: unexpected %s", self.agent.agent_id, message.TYPE)

    def flush(self, connection: ClientConnection) -> bool:
        """Send every queued result; whether there was one (room to claim again). A result whose
        send fails stays queued for the next session."""
        sent = False
        while True:
            with self.lock:
                if not self.results:
                    return sent
                op, envelope = self.results[0]
            connection.send(encode(BmcResult(envelope)))
            with self.lock:
                self.results.popleft()
            log.info("machine %s: operation %s result sent", op["machine_id"], op["op_id"])
            sent = True

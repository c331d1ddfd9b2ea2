"""`better-compute serve site-agent`."""

from __future__ import annotations

import base64
import logging
import signal
import threading
from pathlib import Path
from typing import Annotated
from uuid import UUID

import typer
from cryptography.hazmat.primitives import serialization

from better_compute.db import Database
from better_compute.gateway.join import intent_public_key
from better_compute.pki import IntentSigner
from better_compute.sealing import SecretKeyring
from better_compute.siteagent.agent import DatabaseLink, SiteAgent
from better_compute.siteagent.dial import LAST_PAUSE_SECONDS, GatewayLink

SITE_AGENT_ROLE = "bc_site_agent"
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def raw_public_key(signer: IntentSigner) -> bytes:
    """The signing key's public key as ops.site_agent_register takes it (raw Ed25519, 32 bytes)."""
    return signer.private_key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def site_agent_command(
    gateway: Annotated[str, typer.Option(envvar="BETTER_COMPUTE_GATEWAY",
                                         help="The gateway to dial (wss://HOST:PORT): the agent's session, with its own "
                                              "certificate.")] = "",
    ca_file: Annotated[Path, typer.Option(envvar="BETTER_COMPUTE_CA_FILE",
                                          help="The node CA bundle (PEM) the gateway's certificate chains to (the "
                                               "gateway writes it, `ca: PATH`).")] = Path(".bc/pki/ca-bundle.crt"),
    redial_seconds: Annotated[float, typer.Option(min=0.5, help="The longest pause between two dials of the gateway "
                                                              "(the pause doubles from 0.5 s up to it).")] = LAST_PAUSE_SECONDS,
    dsn: Annotated[str, typer.Option("--dsn", envvar="BETTER_COMPUTE_DSN",
                                     help="Instead of --gateway (the fallback for one release): libpq conninfo or URL "
                                          "of a login that is a member of bc_site_agent.")] = "",
    agent_id: Annotated[str, typer.Option(help="This agent's id (ops.site_agent_register answered it).")] = "",
    key: Annotated[Path, typer.Option(envvar="BETTER_COMPUTE_SITE_AGENT_KEY",
                                      help="The agent's X25519 key (PEM, created mode 0600 if missing); BMC "
                                           "credentials are sealed to its public key.")] = Path(".bc/site-agent.key"),
    intent_key: Annotated[Path, typer.Option(envvar="BETTER_COMPUTE_INTENT_KEY",
                                             help="The workers' intent key, or its public key (PEM): BMC operations "
                                                  "must be signed by it.")] = Path(".bc/pki/intent.key"),
    signing_key: Annotated[Path, typer.Option(envvar="BETTER_COMPUTE_SITE_AGENT_SIGNING_KEY",
                                              help="The agent's Ed25519 key (PEM, created mode 0600 if missing); it "
                                                   "signs the agent's results.")] = Path(".bc/site-agent-signing.key"),
    print_public_key: Annotated[bool, typer.Option(help="Print the public key (base64, for ops.site_agent_register) "
                                                        "and exit.")] = False,
    print_signing_key: Annotated[bool, typer.Option(help="Print the signing key's public key (base64, raw Ed25519, for "
                                                         "ops.site_agent_register / ops.site_agent_signing_key_set) "
                                                         "and exit.")] = False,
) -> None:
    """Run the site agent: it dials a gateway (or, the fallback, logs in to PostgreSQL as bc_site_agent) and runs
    the BMC operations of its machines over Redfish."""
    signer = IntentSigner(signing_key)  # the key file is made when first used
    if print_signing_key:
        typer.echo(base64.b64encode(raw_public_key(signer)).decode())
        return
    keyring = SecretKeyring(key)
    if print_public_key:
        typer.echo(base64.b64encode(keyring.public_key).decode())
        return
    if not agent_id or not (gateway or dsn):
        raise typer.BadParameter("--agent-id and --gateway (or, the fallback, --dsn) are required")
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda _signum, _frame: stop.set())
    log = logging.getLogger(__name__)
    if gateway:
        agent = SiteAgent(UUID(agent_id), keyring, intent_public_key(intent_key), signer, 0)  # the cap comes with the session
        log.info("site agent %s: key %s, dialing %s", agent_id, keyring.key_id, gateway)
        GatewayLink(agent, gateway, ca_file, signer, redial_seconds).run(stop)
        return
    with Database(dsn, max_size=8, name="better-compute-site-agent", role=SITE_AGENT_ROLE) as db:
        sessions = db.call("site_api.bmc_sessions")
        agent = SiteAgent(UUID(agent_id), keyring, intent_public_key(intent_key), signer, sessions)
        log.info("site agent %s: key %s, %d BMC sessions at most (PostgreSQL as %s: the fallback)", agent_id,
                 keyring.key_id, sessions, SITE_AGENT_ROLE)
        DatabaseLink(db, agent).run(stop)

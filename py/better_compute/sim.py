"""`better-compute sim nodes`: many fake nodes in one process, to exercise gateways, the worker and
the database with a fleet and no GPUs.

Each simulated node is the real daemon (daemon.runtime's Daemon and session, daemon.join) with the
fake driver: hostname `sim-0001`, `sim-0002`, …, and GPU uuids derived from the hostname, so every
node is a distinct machine to the control plane. Each keeps its own state directory under
`--state-root` (key, SVID, journal, CDI file), so a second run with the same root reconnects the
nodes that joined before and mints tokens only for the others. Join tokens are minted through the
database as an operator would (compute.api_join_tokens_create, for the tenant of the pool's site).

All nodes share one asyncio loop; per node the memory is bounded: one inventory document, the
journal's bound, and a connection whose receive queue holds a few frames of at most
node_message_bytes (runtime.dial).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated
from uuid import UUID

import psycopg
import typer

from better_compute.daemon import gateway_url
from better_compute.daemon.drivers import InventoryError, fake
from better_compute.daemon.join import AlreadyJoined, JoinRefused, join
from better_compute.daemon.runtime import UNREACHABLE, Daemon, run, stop_on_signals
from better_compute.daemon.journal import JournalError
from better_compute.daemon.state import NodeState, NotJoined
from better_compute.nodeproto import ProtocolError
from better_compute.pki import PkiError

log = logging.getLogger(__name__)

app = typer.Typer(no_args_is_help=True, help="Simulate nodes (fake GPUs, real daemons) against a gateway.")

HOSTNAME_PREFIX = "sim-"
JOINS_AT_ONCE = 8  # joins in flight at once: each makes a key, a CSR and an SVID
CDI_FILE = Path("cdi") / "better-compute.yaml"
NODE_FAILURES = (JoinRefused, AlreadyJoined, NotJoined, JournalError, InventoryError, PkiError, ProtocolError,
                 ValueError, *UNREACHABLE)

MINT_TOKENS = """
    SELECT compute.api_join_tokens_create(s.tenant_id, gen_random_uuid()::text,
                                          jsonb_build_object('pool_id', p.pool_id)) ->> 'token'
      FROM compute.pools AS p JOIN compute.sites AS s ON s.site_id = p.site_id, generate_series(1, %s)
     WHERE p.pool_id = %s
"""


@dataclass(frozen=True)
class SimSettings:
    gateway: str
    ca_file: Path
    state_root: Path
    inventory: Path
    journal_bound: int


@dataclass
class SimNode:
    """One simulated node: its files, its fake GPUs, and once joined its daemon."""

    hostname: str
    state: NodeState
    driver: fake.Driver
    daemon: Daemon | None = None
    failure: str | None = None

    @classmethod
    def numbered(cls, number: int, settings: SimSettings) -> SimNode:
        hostname = f"{HOSTNAME_PREFIX}{number:04d}"
        return cls(hostname, NodeState(settings.state_root / hostname), fake.Driver(settings.inventory, hostname))


def mint_tokens(dsn: str, pool_id: UUID, count: int) -> list[str]:
    """`count` join tokens for the pool, in one statement."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        tokens = [row[0] for row in conn.execute(MINT_TOKENS, (count, pool_id))]
    if len(tokens) != count:
        raise LookupError(f"no pool {pool_id}")
    return tokens


async def live(node: SimNode, token: str | None, settings: SimSettings, joins: asyncio.Semaphore,
               stop: asyncio.Event) -> None:
    """Join (when a token is given), then hold a session until `stop`. A node that cannot join or
    start is counted as failed; the others go on."""
    try:
        if token is not None:
            async with joins:
                await join(settings.gateway, token, settings.ca_file, node.state, node.driver)
        node.daemon = Daemon(node.state, node.driver, node.state.directory / CDI_FILE,
                             journal_bound=settings.journal_bound)
    except NODE_FAILURES as error:
        node.failure = f"{type(error).__name__}: {error}"
        log.error("%s cannot run: %s", node.hostname, node.failure)
        return
    await run(node.daemon, [settings.gateway], stop)


def status_line(nodes: list[SimNode]) -> str:
    daemons = [node.daemon for node in nodes if node.daemon is not None]
    failed = sum(node.failure is not None for node in nodes)
    return (f"sim: {len(daemons)}/{len(nodes)} joined, {sum(daemon.connected for daemon in daemons)} connected, "
            f"{sum(daemon.specs_applied for daemon in daemons)} specs applied, {failed} failed")


async def report(nodes: list[SimNode], seconds: float) -> None:
    while True:
        await asyncio.sleep(seconds)
        typer.echo(status_line(nodes))


async def simulate(nodes: list[SimNode], tokens: dict[str, str], settings: SimSettings, status_seconds: float) -> None:
    """Run every node until SIGINT or SIGTERM (or until none is left running, when none could join),
    printing a status line every `status_seconds`."""
    stop = stop_on_signals()
    joins = asyncio.Semaphore(JOINS_AT_ONCE)
    reporter = asyncio.create_task(report(nodes, status_seconds))
    await asyncio.gather(*(live(node, tokens.get(node.hostname), settings, joins, stop) for node in nodes))
    reporter.cancel()
    typer.echo(status_line(nodes))


@app.command("nodes")
def nodes_command(
    count: Annotated[int, typer.Option(min=1, max=100_000, help="How many nodes.")],
    gateway: Annotated[str, typer.Option(callback=gateway_url, help="The gateway, wss://HOST:PORT.")],
    ca_file: Annotated[Path, typer.Option(exists=True, dir_okay=False, help="The node CA the gateway printed.")],
    dsn: Annotated[str, typer.Option("--dsn", envvar="BETTER_COMPUTE_DSN",
                                     help="A database connection that may mint join tokens.")],
    pool: Annotated[UUID, typer.Option(help="The pool the nodes join.")],
    state_root: Annotated[Path, typer.Option(help="One state directory per node below it.")] = Path(".bc/sim"),
    inventory: Annotated[Path, typer.Option(exists=True, dir_okay=False, help="The recorded inventory each node "
                                            "serves as its own.")] = Path("tests/fixtures/nvidia-h200/inventory.json"),
    journal_bound: Annotated[int, typer.Option(min=1, help="Command ids each node's journal remembers.")] = 1024,
    status_seconds: Annotated[float, typer.Option(min=0.1, help="Print a status line this often.")] = 5.0,
) -> None:
    """Join COUNT fake nodes to POOL (those not joined under --state-root yet) and run them until SIGINT."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = SimSettings(gateway, ca_file, state_root, inventory, journal_bound)
    nodes = [SimNode.numbered(number, settings) for number in range(1, count + 1)]
    unjoined = [node.hostname for node in nodes if not node.state.joined]
    try:
        tokens = dict(zip(unjoined, mint_tokens(dsn, pool, len(unjoined)))) if unjoined else {}
    except (psycopg.Error, LookupError) as error:
        typer.echo(f"sim: cannot mint join tokens: {error}", err=True)
        raise typer.Exit(1) from error
    typer.echo(f"sim: {count} nodes under {state_root}, {len(unjoined)} to join {pool} through {gateway}")
    asyncio.run(simulate(nodes, tokens, settings, status_seconds))
    if any(node.failure is not None for node in nodes):
        raise typer.Exit(1)

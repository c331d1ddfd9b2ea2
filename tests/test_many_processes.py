"""Many processes against one database (issue 18 part 3, architecture.md §16): two API relays, two
gateways, two workers and three `bcd` daemons (fake driver from the real H200 capture), every one a
real process. Each daemon names both gateways (`bcd run --gateway A --gateway B`); two hold their
session on gateway A, one on gateway B. Gateway A is killed with SIGKILL; before its nodes can dial
again (they are paused with SIGSTOP around it), a reservation for each of them and a command for
each are made through the relays:

- its nodes hold a new session on gateway B within the session timeout (compute.limits), with a newer
  epoch, and the epoch they had is FENCED;
- nothing sent while they moved is lost: each node acknowledges the spec granting its booked GPU
  (CDI file and observed generation) and runs its command;
- both workers run the queue, and no work item runs twice with effect: every webhook delivery of
  the events reaches the receiver exactly once (counted at the receiver, by delivery id)."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import AbstractContextManager, ExitStack, contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TypeVar

import psycopg
import pytest

from better_compute.daemon.drivers import fake
from fleet import H200_MODEL
from gateway_support import GatewayProcess, running_gateway_alone, running_signer, running_worker_process
from iam_server import statement, write_static_iam
from node_support import JoinedNode, converged, join_node, running_bcd, wait_until
from relay_support import Relay, running_relay, static_iam
from worker_support import Receiver, Reply

T = TypeVar("T")
TENANT = "cccccccc-0000-4000-8000-000000000018"
TOKEN = "token-of-the-operator"
WORKERS = ("worker-a", "worker-b")
WEBHOOKS = 3
RECEIVER_DELAY_SECONDS = 0.1  # each delivery takes a moment, so the workers' turns overlap

# (event, webhook) pairs of a tenant, for events after event_id %s, not delivered yet.
EVENTS_NOT_DELIVERED = """
SELECT count(*) FROM compute.outbox AS o JOIN compute.webhooks AS w ON w.tenant_id = o.tenant_id
 WHERE o.event_id > %s
   AND NOT EXISTS (SELECT 1 FROM compute.webhook_deliveries AS d
                    WHERE d.webhook_id = w.webhook_id AND d.event_id = o.event_id AND d.state = 'delivered')"""


def together(stack: ExitStack, contexts: Sequence[AbstractContextManager[T]]) -> list[T]:
    """Enter the contexts (processes to start) at once, in threads, and leave them at once when the
    stack ends: a start or a stop waits on a process, and these need not wait on each other."""
    with ThreadPoolExecutor(len(contexts)) as threads:
        entering = [threads.submit(context.__enter__) for context in contexts]
        wait(entering)
    entered = [context for context, future in zip(contexts, entering, strict=True) if future.exception() is None]

    def leave_all() -> None:
        with ThreadPoolExecutor(len(contexts)) as threads:
            for leaving in [threads.submit(context.__exit__, None, None, None) for context in entered]:
                leaving.result()
    stack.callback(leave_all)
    return [future.result() for future in entering]


@contextmanager
def paused(processes: Sequence[subprocess.Popen[bytes]]) -> Iterator[None]:
    """The processes stopped (SIGSTOP) inside the block, continued (SIGCONT) after it."""
    for process in processes:
        process.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        for process in processes:
            process.send_signal(signal.SIGCONT)


def call(relay: Relay, method: str, document: dict[str, object]) -> dict[str, object]:
    return relay.data(method, document, TOKEN, TENANT)


def session_of(sql: psycopg.Connection, node: JoinedNode) -> tuple[str, int] | None:
    """(gateway, epoch) of the node's open session; None while it has none."""
    return sql.execute("SELECT gateway, epoch FROM compute.node_sessions WHERE node_id = %s AND closed_at IS NULL",
                       (node.node_id,)).fetchone()


class LeaseOwners(threading.Thread):
    """Who holds running work items, sampled until stopped: which workers took part."""

    def __init__(self, dsn: str) -> None:
        super().__init__(daemon=True)
        self.dsn, self.seen, self.stopping = dsn, Counter[str](), threading.Event()

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stopping.wait(0.05):
                self.seen.update(owner for (owner,) in conn.execute(
                    "SELECT lease_owner FROM compute.work WHERE state = 'running'"))


@pytest.fixture
def owners(db_dsn: str) -> Iterator[LeaseOwners]:
    sampler = LeaseOwners(db_dsn)
    sampler.start()
    yield sampler
    sampler.stopping.set()
    sampler.join()


def test_a_killed_gateways_nodes_move_to_the_other_and_lose_nothing(db_dsn: str, sql: psycopg.Connection,
                                                                    tmp_path: Path, owners: LeaseOwners) -> None:
    keys = tmp_path / "keys"
    iam = write_static_iam(tmp_path / "iam.toml", [(TOKEN, "user:operator", TENANT, [statement("allow")])])
    worker = lambda owner: running_worker_process(db_dsn, keys, ["--owner", owner, "--webhooks-to-private-addresses"])  # noqa: E731
    with ExitStack() as stack:
        # The first worker makes the keys (intent, webhook) that the gateways and the other worker read.
        _, _, *relays = together(stack, [running_signer(db_dsn, keys), worker(WORKERS[0]),
                                         running_relay(db_dsn, static_iam(iam)), running_relay(db_dsn, static_iam(iam))])
        gateway_a, gateway_b, _ = together(stack, [running_gateway_alone(db_dsn, keys, ["--name", "gw-a"]),
                                                   running_gateway_alone(db_dsn, keys, ["--name", "gw-b"]), worker(WORKERS[1])])
        receiver = stack.enter_context(Receiver(lambda _request, _earlier: Reply(delay=RECEIVER_DELAY_SECONDS)))

        site = call(relays[0], "sites.create", {"name": "lab"})
        pool = str(call(relays[1], "pools.create", {"site_id": site["site_id"], "name": "h200", "gpu_model": H200_MODEL})["pool_id"])
        call(relays[0], "offerings.create", {"pool_id": pool, "shape": "gpu", "max_count": 1, "max_duration_seconds": 86400})
        for number in range(WEBHOOKS):
            call(relays[number % 2], "webhooks.create", {"url": f"{receiver.base_url}/hook-{number}", "secret": "s" * 32})
        events_from = sql.execute("SELECT coalesce(max(event_id), 0) FROM compute.outbox").fetchone()[0]

        placement = {"gpu-node-01": (gateway_a, gateway_b), "gpu-node-02": (gateway_a, gateway_b),
                     "gpu-node-03": (gateway_b, gateway_a)}
        tokens = {hostname: str(call(relays[0], "joinTokens.create", {"pool_id": pool})["token"]) for hostname in placement}
        with ThreadPoolExecutor(len(placement)) as pool_of_joins:
            nodes = dict(zip(placement, pool_of_joins.map(
                lambda hostname: join_node(placement[hostname][0], tokens[hostname], tmp_path, hostname), placement), strict=True))
        daemons = dict(zip(placement, together(stack, [
            running_bcd(first, nodes[hostname].state_dir, hostname, nodes[hostname].cdi_path, ["--gateway", second.url])
            for hostname, (first, second) in placement.items()]), strict=True))
        for hostname, node in nodes.items():
            wait_until(lambda node=node: converged(sql, node, []), f"{hostname}'s first spec observed", daemons[hostname].log)
            wait_until(lambda node=node, hostname=hostname: (session_of(sql, node) or ("",))[0] == ("gw-b" if hostname == "gpu-node-03" else "gw-a"),
                       f"{hostname}'s session on its first gateway", daemons[hostname].log)
        moving = [nodes["gpu-node-01"], nodes["gpu-node-02"]]
        epochs_before = {node.node_id: session_of(sql, node)[1] for node in moving}  # type: ignore[index]
        sql.execute("SELECT ops.node_cordon('gpu-node-03', 'the reservations below go to the moving nodes')")

        # A's nodes are paused (SIGSTOP) from before the kill until the spec changes and commands are
        # made, so these are made while the nodes hold no session anywhere: they must not be lost.
        with paused([daemons[node.hostname].process for node in moving]):
            killed_at = time.monotonic()
            gateway_a.server.process.kill()
            end = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()
            reservations = [call(relays[number], "reservations.create", {"pool_id": pool, "shape": "gpu", "count": 1, "end": end})
                            for number in range(2)]
            commands = [call(relays[number], "nodes.command", {"node_id": str(node.node_id), "kind": "collect_inventory"})
                        for number, node in enumerate(moving)]

        session_timeout = sql.execute("SELECT compute.limit('session_timeout_seconds')").fetchone()[0]
        for node in moving:
            wait_until(lambda node=node: (session_of(sql, node) or ("",))[0] == "gw-b", f"{node.hostname} on gateway B",
                       daemons[node.hostname].log, timeout=max(0.0, killed_at + float(session_timeout) - time.monotonic()))
        moved_in = time.monotonic() - killed_at
        for node in moving:
            _, epoch = session_of(sql, node)  # type: ignore[misc]
            assert epoch > epochs_before[node.node_id]
            with pytest.raises(psycopg.Error) as fenced:
                sql.execute("SELECT node_api.spec_get(%s, %s)", (node.node_id, epochs_before[node.node_id]))
            assert fenced.value.sqlstate == "BC410", fenced.value  # FENCED

        booked = {booking["node"]: booking for reservation in reservations for booking in reservation["bookings"]}  # type: ignore[attr-defined]
        assert sorted(booked) == ["gpu-node-01", "gpu-node-02"]
        for node in moving:
            gpu = fake.gpu_uuid(node.hostname, 0)
            wait_until(lambda node=node, gpu=gpu: converged(sql, node, [gpu]), f"{node.hostname}'s booked GPU acknowledged",
                       daemons[node.hostname].log)
        wait_until(lambda: sql.execute("SELECT bool_and(state = 'succeeded') FROM compute.node_commands WHERE command_id = ANY(%s)",
                                       ([uuid.UUID(str(command["command_id"])) for command in commands],)).fetchone()[0],
                   "the commands sent while the nodes moved run")

        for number, reservation in enumerate(reservations):
            call(relays[number], "reservations.release", {"reservation_id": reservation["reservation_id"]})
        wait_until(lambda: sql.execute(EVENTS_NOT_DELIVERED, (events_from,)).fetchone()[0] == 0,
                   "every event since the webhooks were made delivered to each of them", timeout=30)
        delivered = {str(delivery_id) for (delivery_id,) in sql.execute(
            "SELECT delivery_id FROM compute.webhook_deliveries WHERE state = 'delivered'")}
        received = Counter(request.header("X-Better-Compute-Delivery") for request in receiver.requests())
        assert delivered <= set(received) and max(received.values()) == 1, received
        assert set(owners.seen) >= set(WORKERS), owners.seen
    print(f"\nnodes of the killed gateway back on the other after {moved_in:.1f} s (session timeout {session_timeout} s); "
          f"{len(received)} webhook deliveries, each received once; running items per worker sampled: {dict(owners.seen)}")

"""The tutorial, end to end, with real processes: the API relay, the gateway, the worker and three
`bcd` daemons (fake driver built from the real H200 capture). A pool and join tokens made through
the API; `bcd join` adopts each node; a reservation through the API reaches the booked node's CDI
file within seconds, with its observed generation equal to the signed one; on release the device
leaves the file. The other nodes' files never list anything."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg
import pytest

from better_compute.daemon.drivers import fake
from fleet import H200_MODEL
from gateway_support import GatewayProcess
from iam_server import statement, write_static_iam
from node_support import SECONDS, JoinedNode, cdi_devices, converged, join_node, running_bcd, wait_until
from relay_support import Relay, running_relay, static_iam

TENANT = "cccccccc-0000-4000-8000-000000000003"
TOKEN = "token-of-the-operator"
NODES = 3


@pytest.fixture
def relay(db_dsn: str, tmp_path: Path) -> Iterator[Relay]:
    iam = write_static_iam(tmp_path / "iam.toml", [(TOKEN, "user:operator", TENANT, [statement("allow")])])
    with running_relay(db_dsn, static_iam(iam)) as running:
        yield running


def call(relay: Relay, method: str, document: dict[str, object]) -> dict[str, object]:
    return relay.data(method, document, TOKEN, TENANT)


def test_join_reserve_converge_release_with_three_daemons(relay: Relay, gateway: GatewayProcess,
                                                          sql: psycopg.Connection, tmp_path: Path) -> None:
    site = call(relay, "sites.create", {"name": "lab"})
    pool = str(call(relay, "pools.create", {"site_id": site["site_id"], "name": "h200", "gpu_model": H200_MODEL})["pool_id"])
    call(relay, "offerings.create", {"pool_id": pool, "shape": "gpu", "max_count": 8, "max_duration_seconds": 86400})

    nodes: list[JoinedNode] = []
    for number in range(1, NODES + 1):
        token = str(call(relay, "joinTokens.create", {"pool_id": pool})["token"])
        nodes.append(join_node(gateway, token, tmp_path, f"gpu-node-{number:02d}"))
    adopted = call(relay, "nodes.list", {"pool_id": pool})
    assert sorted(n["name"] for n in adopted) == [node.hostname for node in nodes]  # type: ignore[index]

    with ExitStack() as daemons:
        running = [daemons.enter_context(running_bcd(gateway, n.state_dir, n.hostname, n.cdi_path)) for n in nodes]
        for node, daemon in zip(nodes, running, strict=True):
            wait_until(lambda node=node: converged(sql, node, []), f"{node.hostname}'s first spec observed", daemon.log)

        end = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()
        reservation = call(relay, "reservations.create", {"pool_id": pool, "shape": "gpu", "count": 1, "end": end})
        [booking] = reservation["bookings"]  # type: ignore[misc]
        held = next(node for node in nodes if node.hostname == booking["node"])
        gpu = fake.gpu_uuid(held.hostname, 0)
        assert booking["cdi_name"] == f"nvidia.com/gpu={gpu}"
        booked = time.monotonic()
        wait_until(lambda: converged(sql, held, [gpu]), "the booked GPU in its node's CDI file",
                   running[nodes.index(held)].log)
        assert time.monotonic() - booked < SECONDS

        call(relay, "reservations.release", {"reservation_id": reservation["reservation_id"]})
        wait_until(lambda: converged(sql, held, []) and not held.cdi_path.exists(), "the released GPU gone from the CDI file",
                   running[nodes.index(held)].log)
        assert all(cdi_devices(node) == [] for node in nodes)

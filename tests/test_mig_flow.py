"""A real bcd SIGKILLed in the middle of a MIG layout change: the next one finishes it, no stray
instance. A MIG layout change scheduled in the database reaches a real bcd at its time and the node's fake
GPU converges, while the node's other GPU keeps its booking and its CDI device throughout; then an
injected Xid 79 on that other GPU keeps it out of new placements, changes no booking, and shows to
the operator (ops.nodes) and to the tenant (its reservation's device). Chaos: a real bcd SIGKILLed at
a random point of each of 20 layout changes, then started again, leaves every GPU as its spec. Real
processes: relay, gateway, worker, bcd (fake driver, GPU state in a file)."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest

from better_compute.daemon.drivers import fake
from better_compute.daemon.mig import Desired, MigState, matches
from fleet import H200_MODEL
from gateway_support import GatewayProcess
from iam_server import statement, write_static_iam
from node_support import H200_INVENTORY, JoinedNode, bcd, cdi_devices, converged, running_bcd, wait_until
from better_compute.daemon.state import NodeState
from relay_support import Relay, running_relay, static_iam
from test_mig import LAYOUTS

TENANT = "cccccccc-0000-4000-8000-000000000013"
TOKEN = "token-of-the-operator"
HOST = "mig-node-01"
LAYOUT = "mig:3g.71gb@0,3g.71gb@4"


@pytest.fixture
def relay(db_dsn: str, tmp_path: Path) -> Iterator[Relay]:
    iam = write_static_iam(tmp_path / "iam.toml", [(TOKEN, "user:operator", TENANT, [statement("allow")])])
    with running_relay(db_dsn, static_iam(iam)) as running:
        yield running


def call(relay: Relay, method: str, document: dict[str, object]) -> Any:
    return relay.data(method, document, TOKEN, TENANT)


def two_gpu_driver(tmp_path: Path) -> list[str]:
    """Fake-driver options: the H200 capture with a second GPU, its GPU state in a file."""
    document = json.loads(H200_INVENTORY.read_text())
    document["devices"].append(json.loads(json.dumps(document["devices"][0])) | {"index": 1, "uuid": "GPU-second"})
    (tmp_path / "two-h200.json").write_text(json.dumps(document))
    return ["--driver", "fake", "--driver-option", f"path={tmp_path / 'two-h200.json'}",
            "--driver-option", f"hostname={HOST}", "--driver-option", f"gpu_state={tmp_path / 'gpus.json'}"]


def gpu_conditions(sql: psycopg.Connection, node: JoinedNode) -> list[dict[str, Any]]:
    return sql.execute("SELECT coalesce(gpu_conditions, '[]') FROM ops.nodes WHERE node_id = %s", (node.node_id,)).fetchone()[0]


def join_two_gpu_node(relay: Relay, gateway: GatewayProcess, tmp_path: Path) -> tuple[JoinedNode, list[str]]:
    """A node of two fake H200s (GPU state in tmp_path/gpus.json) joined to a new pool; it and its driver options."""
    site = call(relay, "sites.create", {"name": "lab"})
    pool = str(call(relay, "pools.create", {"site_id": site["site_id"], "name": "h200", "gpu_model": H200_MODEL})["pool_id"])
    for shape in ("gpu", "mig:3g.71gb"):
        call(relay, "offerings.create", {"pool_id": pool, "shape": shape, "max_count": 8, "max_duration_seconds": 86400})
    token = str(call(relay, "joinTokens.create", {"pool_id": pool})["token"])
    driver_options = two_gpu_driver(tmp_path)
    state_dir = tmp_path / HOST
    joined = bcd("join", "--gateway", gateway.url, "--token", token, "--ca-file", str(gateway.ca_path),
                 "--state-dir", str(state_dir), *driver_options)
    assert joined.returncode == 0, joined.stderr
    return JoinedNode(HOST, state_dir, NodeState(state_dir).load().node_id, tmp_path / "cdi" / f"{HOST}.yaml"), driver_options


def test_a_scheduled_layout_converges_on_one_gpu_while_the_other_keeps_serving_then_xid_79(
        relay: Relay, gateway: GatewayProcess, sql: psycopg.Connection, tmp_path: Path) -> None:
    node, driver_options = join_two_gpu_node(relay, gateway, tmp_path)
    pool = str(sql.execute("SELECT pool_id FROM compute.nodes WHERE node_id = %s", (node.node_id,)).fetchone()[0])
    serving, changing = fake.gpu_uuid(HOST, 0), fake.gpu_uuid(HOST, 1)
    gpus = fake.Driver(tmp_path / "two-h200.json", hostname=HOST, gpu_state=tmp_path / "gpus.json")

    # bcd SIGKILLed in the middle of a layout change (each MIG call takes 0.2 s): the next bcd finishes it.
    with running_bcd(gateway, node.state_dir, HOST, node.cdi_path, ["--reconcile-seconds", "0.5"],
                     [*driver_options, "--driver-option", "mig_delay=0.2"]) as doomed:
        wait_until(lambda: converged(sql, node, []), "the first spec observed", doomed.log)
        sql.execute("SELECT ops.device_set_layout(%s, %s)", (changing, "mig:1g.18gb@0,1g.18gb@1,2g.35gb@2,3g.71gb@4"))
        wait_until(lambda: "created GPU instance 2" in doomed.log(), "the change under way", doomed.log)
        doomed.process.kill()
        doomed.process.wait()
    midway = gpus.mig_state(changing)
    assert len(midway.instances) < 4 or not all(i.cis for i in midway.instances), f"killed too late: {midway}"

    with running_bcd(gateway, node.state_dir, HOST, node.cdi_path, ["--reconcile-seconds", "0.5"], driver_options) as daemon:
        wait_until(lambda: sorted((i.key, len(i.cis)) for i in gpus.mig_state(changing).instances)
                   == [(("1g.18gb", 0), 1), (("1g.18gb", 1), 1), (("2g.35gb", 2), 1), (("3g.71gb", 4), 1)],
                   "the change finished by the next bcd, each GPU instance with one compute instance", daemon.log)
        sql.execute("SELECT ops.device_set_layout(%s, 'whole')", (changing,))
        wait_until(lambda: gpus.mig_state(changing) == MigState(mode="disabled"), "the GPU whole again", daemon.log)
        end = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()
        held = call(relay, "reservations.create", {"pool_id": pool, "shape": "gpu", "count": 1, "end": end})
        # Both GPUs are whole and free: placement draws either. The one it books serves from now on,
        # and the layout change goes to the other.
        serving = held["bookings"][0]["device_uuid"]
        changing = next(gpu for gpu in (fake.gpu_uuid(HOST, 0), fake.gpu_uuid(HOST, 1)) if gpu != serving)
        wait_until(lambda: converged(sql, node, [serving]), "the booked GPU in the CDI file", daemon.log)

        at = sql.execute("SELECT ops.now() + interval '2 seconds'").fetchone()[0]
        sql.execute("SELECT ops.device_set_layout(%s, %s, %s)", (changing, LAYOUT, at))
        assert gpus.mig_state(changing).mode == "disabled", "nothing changes before the time the layout holds from"

        def mig_device_exposed() -> bool:
            assert serving in cdi_devices(node), "the serving GPU left the CDI file during the change"
            assert sql.execute("SELECT count(*) FROM compute.active_bookings WHERE reservation_id = %s",
                               (held["reservation_id"],)).fetchone()[0] == 1
            state = gpus.mig_state(changing)
            return state.mode == "enabled" and sorted(i.key for i in state.instances) == [("3g.71gb", 0), ("3g.71gb", 4)] \
                and not any(c["critical"] for c in gpu_conditions(sql, node))
        wait_until(mig_device_exposed, "the changing GPU converged and no critical condition left", daemon.log)
        assert gpus.mig_state(serving).mode == "disabled", "the serving GPU was not touched"

        mig = call(relay, "reservations.create", {"pool_id": pool, "shape": "mig:3g.71gb", "count": 1, "end": end})
        [booking] = mig["bookings"]
        assert booking["device_uuid"] == changing and booking["cdi_name"].startswith("nvidia.com/gpu=MIG-")
        wait_until(lambda: converged(sql, node, sorted([serving, booking["cdi_name"].split("=", 1)[1]])),
                   "the MIG device and the serving GPU in the CDI file", daemon.log)

        # Xid 79 on the serving GPU.
        bookings_before = sql.execute("SELECT array_agg(booking_id::text || state || during::text ORDER BY booking_id) "
                                      "FROM compute.bookings").fetchone()[0]
        gpus.inject(serving, xid=[79])
        wait_until(lambda: any(c["gpu_uuid"] == serving and c["type"] == "FallenOffBus" and c["critical"]
                               for c in gpu_conditions(sql, node)), "FallenOffBus in ops.nodes", daemon.log)
        refused = relay.post("reservations/create".replace("/", ".", 1),
                             {"pool_id": pool, "shape": "gpu", "count": 1, "start": end,
                              "end": (datetime.now(timezone.utc) + timedelta(hours=2)).isoformat()}, TOKEN, TENANT)
        assert refused.status_code == 409, refused.text
        assert sql.execute("SELECT array_agg(booking_id::text || state || during::text ORDER BY booking_id) "
                           "FROM compute.bookings").fetchone()[0] == bookings_before, "no booking changed"
        seen = call(relay, "reservations.get", {"reservation_id": held["reservation_id"]})
        assert [(c["type"], c["reason"]) for c in seen["bookings"][0]["conditions"]] == [("FallenOffBus", "Xid79")]
        assert serving in cdi_devices(node), "the holder keeps its device (P6): the condition informs, it does not withdraw"


def spec_gpus(sql: psycopg.Connection, node: JoinedNode) -> dict[str, dict[str, Any]]:
    """The `gpus` entries of the node's spec, by GPU uuid."""
    spec = sql.execute("SELECT spec FROM compute.node_specs WHERE node_id = %s", (node.node_id,)).fetchone()[0]
    return {entry["uuid"]: entry for entry in spec["gpus"]}


def as_spec(sql: psycopg.Connection, node: JoinedNode, gpus: fake.Driver) -> bool:
    """Every GPU exactly as its spec entry (mode, instances each with its compute instance, nothing
    else), the spec observed at its generation and no GPU condition left."""
    generation, observed = sql.execute("SELECT generation, observed_generation FROM compute.node_specs WHERE node_id = %s",
                                       (node.node_id,)).fetchone()
    wanted = spec_gpus(sql, node)
    return observed == generation and not gpu_conditions(sql, node) \
        and all(matches(gpus.mig_state(uuid), Desired.of(entry)) for uuid, entry in wanted.items())


CHANGES = 20


def test_chaos_a_real_bcd_killed_anywhere_in_20_layout_changes_leaves_every_gpu_as_its_spec(
        relay: Relay, gateway: GatewayProcess, sql: psycopg.Connection, tmp_path: Path) -> None:
    node, driver_options = join_two_gpu_node(relay, gateway, tmp_path)
    uuids = [fake.gpu_uuid(HOST, 0), fake.gpu_uuid(HOST, 1)]
    gpus = fake.Driver(tmp_path / "two-h200.json", hostname=HOST, gpu_state=tmp_path / "gpus.json")
    chaos = random.Random(13)
    options = [*driver_options, "--driver-option", "mig_delay=0.05"]  # a change of up to 9 calls takes about 0.5 s

    layouts = {uuid: "whole" for uuid in uuids}
    landed = 0
    for change in range(CHANGES + 1):
        with running_bcd(gateway, node.state_dir, HOST, node.cdi_path, ["--reconcile-seconds", "0.3"], options) as daemon:
            # This bcd finishes what the one killed left (the first: observes the first spec).
            wait_until(lambda: as_spec(sql, node, gpus), f"change {change - 1} finished by the next bcd", daemon.log)
            assert {uuid: entry["layout"] for uuid, entry in spec_gpus(sql, node).items()} == layouts
            assert all(len(instance.cis) == 1 for uuid in uuids for instance in gpus.mig_state(uuid).instances)
            if change == CHANGES:
                break
            before = {uuid: gpus.mig_state(uuid) for uuid in uuids}
            for uuid in uuids:
                layouts[uuid] = chaos.choice([layout for layout in LAYOUTS if layout != layouts[uuid]])
                sql.execute("SELECT ops.device_set_layout(%s, %s)", (uuid, layouts[uuid]))
            wait_until(lambda: any(gpus.mig_state(uuid) != before[uuid] for uuid in uuids),
                       f"change {change} under way", daemon.log)
            time.sleep(chaos.uniform(0, 0.5))
            daemon.process.kill()  # SIGKILL: no handler runs
            daemon.process.wait()
        wanted = spec_gpus(sql, node)
        landed += not all(matches(gpus.mig_state(uuid), Desired.of(wanted[uuid])) for uuid in uuids)
    print(f"{landed} of {CHANGES} kills landed in the middle of a change")
    assert landed >= 10, f"only {landed} of {CHANGES} kills landed in the middle of a change: the test did not test much"

"""The VPS flow end to end with real processes: the API relay, the gateway, the worker and `bcd` with
its hypervisor on libvirt's test driver (test:///default: the domains live inside bcd, which writes
what libvirt lists to <vm-dir>/domains.json after each converge). A tenant creates a 2-GPU instance;
bcd defines a domain whose hostdevs are exactly the booked GPUs' PCI addresses, never in the CDI
file; stop, start and reboot reach it; release deletes it (domain, disk), with the events of any
reservation. Then bcd is SIGKILLed at random points of 20 create/delete cycles (a kill is a host
reboot for the test driver): at the end no stray domain and no missing one."""

from __future__ import annotations

import contextlib
import copy
import json
import random
import signal
import subprocess
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest

from better_compute.daemon.state import NodeState
from fleet import H200_MODEL
from gateway_support import GatewayProcess
from iam_server import statement, write_static_iam
from node_support import H200_INVENTORY, JoinedNode, RunningDaemon, bcd, converged, fake_driver, running_bcd, wait_until
from relay_support import Relay, running_relay, static_iam

TENANT = "dddddddd-0000-4000-8000-000000000004"
TOKEN = "token-of-the-vps-tenant"
HOST = "vps-node-01"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIO4e2e alice@laptop"


@pytest.fixture
def relay(db_dsn: str, tmp_path: Path) -> Iterator[Relay]:
    iam = write_static_iam(tmp_path / "iam.toml", [(TOKEN, "user:alice", TENANT, [statement("allow")])])
    with running_relay(db_dsn, static_iam(iam)) as running:
        yield running


def call(relay: Relay, method: str, document: dict[str, Any]) -> Any:
    return relay.data(method, document, TOKEN, TENANT)


def four_gpu_inventory(path: Path) -> Path:
    """The real H200 capture as a host of four GPUs, each at a PCI bus id of its own."""
    document = json.loads(H200_INVENTORY.read_text())
    template = document["devices"][0]
    document["devices"] = [copy.deepcopy(template) | {"index": index, "uuid": f"GPU-{uuid.uuid4()}",
                                                     "pci_bus_id": f"00000000:{0x18 + index:02X}:00.0",
                                                     "device_nodes": [f"/dev/nvidia{index}"], "nvlink_peers": []}
                           for index in range(4)]
    path.write_text(json.dumps(document))
    return path


class Host:
    """The VPS host: its node, inventory, images and VM folder, and `bcd run` with the hypervisor."""

    def __init__(self, gateway: GatewayProcess, token: str, root: Path) -> None:
        self.gateway = gateway
        self.inventory = four_gpu_inventory(root / "inventory.json")
        self.images, self.vm_dir = root / "images", root / "instances"
        self.images.mkdir()
        (self.images / "debian-12.raw").write_bytes(b"\0" * 4096)
        state_dir = root / HOST
        joined = bcd("join", "--gateway", gateway.url, "--token", token, "--ca-file", str(gateway.ca_path),
                     "--state-dir", str(state_dir), *fake_driver(HOST, self.inventory))
        assert joined.returncode == 0, joined.stderr
        self.node = JoinedNode(HOST, state_dir, NodeState(state_dir).load().node_id, root / "cdi.yaml")

    def run(self) -> Any:
        return running_bcd(self.gateway, self.node.state_dir, HOST, self.node.cdi_path,
                           ["--hypervisor", "test:///default", "--vm-images", str(self.images), "--vm-dir", str(self.vm_dir)],
                           driver=fake_driver(HOST, self.inventory))

    def domains(self) -> dict[str, Any]:
        path = self.vm_dir / "domains.json"
        return json.loads(path.read_text()) if path.exists() else {}


def instance_state(sql: psycopg.Connection, instance_id: str) -> str:
    return sql.execute("SELECT state FROM compute.instances WHERE instance_id = %s", (instance_id,)).fetchone()[0]


def settled(sql: psycopg.Connection, instance_id: str, state: str) -> bool:
    """The instance is `state` and the node observed its newest generation (or it is gone)."""
    row = sql.execute("SELECT state, generation, observed_generation FROM compute.instances WHERE instance_id = %s",
                      (instance_id,)).fetchone()
    return row[0] == state and (state == "deleted" or row[1] == row[2])


def end_in(hours: int = 1) -> str:
    return (datetime.now(timezone.utc) + timedelta(hours=hours)).isoformat()


def setup_pool(relay: Relay) -> str:
    site = call(relay, "sites.create", {"name": "vps-lab"})
    pool = str(call(relay, "pools.create", {"site_id": site["site_id"], "name": "h200-vms", "gpu_model": H200_MODEL})["pool_id"])
    call(relay, "offerings.create", {"pool_id": pool, "shape": "gpu", "max_count": 4, "max_duration_seconds": 86400,
                                     "instance_kind": "vps", "vcpus_per_atom": 16, "memory_mib_per_atom": 131072})
    return pool


def test_a_two_gpu_instance_end_to_end(relay: Relay, gateway: GatewayProcess, sql: psycopg.Connection, tmp_path: Path) -> None:
    pool = setup_pool(relay)
    host = Host(gateway, str(call(relay, "joinTokens.create", {"pool_id": pool})["token"]), tmp_path)
    with host.run() as daemon:
        wait_until(lambda: converged(sql, host.node, []), "the first spec observed", daemon.log)
        created = call(relay, "instances.create", {"pool_id": pool, "gpus": 2, "image": "debian-12.raw", "ssh_keys": [KEY],
                                                   "end": end_in(), "disk_gib": 1})
        instance, name = created["instance_id"], "bc-" + created["instance_id"]
        assert created["state"] == "provisioning" and (created["vcpus"], created["memory_mib"]) == (32, 262144)
        booked = sorted(gpu["pci_bus_id"] for gpu in created["gpus"])
        wait_until(lambda: settled(sql, instance, "running"), "the instance running", daemon.log)
        domain = host.domains()[name]
        assert domain["active"] and domain["hostdevs"] == [bus[4:].lower() for bus in booked]
        assert converged(sql, host.node, [])  # its GPUs are not devices: never in the CDI file

        call(relay, "instances.stop", {"instance_id": instance})
        wait_until(lambda: settled(sql, instance, "stopped") and not host.domains()[name]["active"], "stopped", daemon.log)
        call(relay, "instances.start", {"instance_id": instance})
        wait_until(lambda: settled(sql, instance, "running") and host.domains()[name]["active"], "started", daemon.log)
        call(relay, "instances.reboot", {"instance_id": instance})
        wait_until(lambda: settled(sql, instance, "running") and host.domains()[name]["reboots"] == 1, "rebooted", daemon.log)

        call(relay, "reservations.release", {"reservation_id": created["reservation_id"]})
        wait_until(lambda: instance_state(sql, instance) == "deleted" and name not in host.domains(), "deleted", daemon.log)
        assert not (host.vm_dir / instance).exists()

    events = [row[0] for row in sql.execute(
        "SELECT event_type FROM compute.outbox WHERE aggregate_id = %s ORDER BY event_id", (instance,))]
    assert events[:3] == ["instance.created", "instance.provisioning", "instance.running"]
    assert events[-2:] == ["instance.deleting", "instance.deleted"]
    reservation_events = [row[0] for row in sql.execute(
        "SELECT event_type FROM compute.outbox WHERE event_type LIKE 'reservation.%%' AND aggregate_id = %s ORDER BY event_id",
        (created["reservation_id"],))]
    assert reservation_events == ["reservation.created", "reservation.activated", "reservation.released"]
    (used,) = sql.execute("SELECT count(*) FROM compute.bookings WHERE reservation_id = %s AND state = 'released'"
                          " AND upper(during) > lower(during)", (created["reservation_id"],)).fetchone()
    assert used == 2  # the booked time, which usage windows count as any reservation's


def test_sigkill_during_20_create_delete_cycles_leaves_no_stray_and_no_missing_domain(
        relay: Relay, gateway: GatewayProcess, sql: psycopg.Connection, tmp_path: Path) -> None:
    pool = setup_pool(relay)
    host = Host(gateway, str(call(relay, "joinTokens.create", {"pool_id": pool})["token"]), tmp_path)
    draw = random.Random(15)
    live: list[str] = []
    for _cycle in range(20):
        with host.run() as daemon:
            if len(live) < 2:
                live.append(call(relay, "instances.create", {"pool_id": pool, "gpus": 1 + draw.randrange(2), "end": end_in(),
                                                             "image": "debian-12.raw", "ssh_keys": [KEY], "disk_gib": 1})["instance_id"])
            if draw.random() < 0.5 and live:
                call(relay, "instances.delete", {"instance_id": live.pop(draw.randrange(len(live)))})
            kill_after(daemon, draw.uniform(0.0, 3.0))  # before its session, mid-converge, or between converges
    with host.run() as daemon:
        wanted = {"bc-" + instance for instance in live}
        wait_until(lambda: set(host.domains()) == wanted and all(value["active"] for value in host.domains().values())
                   and all(settled(sql, instance, "running") for instance in live), "the host converged", daemon.log, timeout=60)
        wait_until(lambda: sql.execute("SELECT count(*) FROM compute.instances WHERE state = 'deleting'").fetchone()[0] == 0,
                   "every deleted instance acknowledged", daemon.log)
    folders = {path.name for path in host.vm_dir.iterdir() if path.is_dir()}
    assert folders == set(live)


def kill_after(daemon: RunningDaemon, seconds: float) -> None:
    """SIGKILL bcd after `seconds` (mid-converge or between converges, as the draw falls)."""
    with contextlib.suppress(subprocess.TimeoutExpired):  # still running, as expected
        daemon.process.wait(seconds)
    daemon.process.send_signal(signal.SIGKILL)
    daemon.process.wait()

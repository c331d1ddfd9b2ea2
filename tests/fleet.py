"""Small fleets built from the real H200 inventory, for pytest: the Python twin of
tests/fixtures/pgtap_setup.sql's inventory() and fleet().

A node's inventory copies the captured device (tests/fixtures/nvidia-h200/inventory.json) once per
GPU, each copy with its own uuid, index, PCI bus id and device node, so that every GPU keeps the
real H200's MIG profiles and placements. A pool is made through the same functions an operator
uses: compute.site_create, compute.pool_create, compute.node_register, compute.device_set_layout
and compute.offering_create.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Sequence
from datetime import timedelta
from functools import cache
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from better_compute.daemon.drivers.fake import gpu_uuid  # the same GPU uuids as pgtap_fixtures.inventory()

H200_INVENTORY = Path(__file__).parent / "fixtures" / "nvidia-h200" / "inventory.json"
H200_MODEL = "NVIDIA H200"

WHOLE = "whole"
MIG_2X_3G = "mig:3g.71gb@0,3g.71gb@4"  # two 3g.71gb instances: memory slices [0,4) and [4,8)
TIMESLICE_4 = "timeslice:4"
SHAPES = ("gpu", "mig:3g.71gb", "slot")


@cache
def _captured_inventory() -> dict[str, Any]:
    return json.loads(H200_INVENTORY.read_text())


def h200_inventory(hostname: str, gpus: int, nvlink: bool = False) -> dict[str, Any]:
    """An inventory document of `gpus` copies of the captured H200; NVLink between all of them when asked."""
    captured = copy.deepcopy(_captured_inventory())
    uuids = [gpu_uuid(hostname, index) for index in range(gpus)]
    devices = [
        captured["devices"][0] | {
            "uuid": uuids[index],
            "index": index,
            "pci_bus_id": f"00000000:{16 + index:x}:00.0",
            "model": H200_MODEL,
            "device_nodes": [f"/dev/nvidia{index}"],
            "nvlink_peers": [peer for peer in uuids if peer != uuids[index]] if nvlink else [],
        }
        for index in range(gpus)
    ]
    return captured | {"hostname": hostname, "devices": devices}


def device_id(conn: psycopg.Connection, pool_id: uuid.UUID, node_number: int, gpu_index: int) -> uuid.UUID:
    """The device_id of GPU `gpu_index` on node `node_number` (1-based, in registration order) of a pool."""
    row = conn.execute(
        """SELECT d.device_id FROM compute.devices AS d JOIN compute.nodes AS n ON n.node_id = d.node_id
            WHERE n.pool_id = %s AND d.index = %s ORDER BY n.rank OFFSET %s LIMIT 1""",
        (pool_id, gpu_index, node_number - 1)).fetchone()
    assert row is not None, f"pool {pool_id} has no GPU {gpu_index} on node {node_number}"
    return row[0]


def make_pool(conn: psycopg.Connection, layouts: Sequence[Sequence[str]], policy: str = "pack",
              shapes: Sequence[str] = SHAPES, max_count: int = 64,
              max_duration: timedelta = timedelta(days=30), tenant_id: uuid.UUID | str | None = None) -> uuid.UUID:
    """A site (of `tenant_id`, else an operator's) and a pool of H200 nodes laid out as
    register_nodes says, and an offering of each shape. Returns the pool id.

    Runs in the caller's transaction and at its compute_now(); the caller commits."""
    name = uuid.uuid4().hex[:8]
    site_id = conn.execute("SELECT compute.site_create(%s, %s)", (f"site-{name}", tenant_id)).fetchone()[0]
    pool_id = conn.execute("SELECT compute.pool_create(%s, %s, %s, %s)",
                           (site_id, f"pool-{name}", H200_MODEL, policy)).fetchone()[0]
    register_nodes(conn, pool_id, layouts)
    for shape in shapes:
        conn.execute("SELECT compute.offering_create(%s, %s, %s, %s)", (pool_id, shape, max_count, max_duration))
    return pool_id


def register_nodes(conn: psycopg.Connection, pool_id: uuid.UUID | str, layouts: Sequence[Sequence[str]]) -> None:
    """Register H200 nodes in a pool, node k having one GPU per entry of layouts[k] laid out as that
    entry says (whole, timeslice:N, mig:...). (Nodes join by themselves once bcd does; until then
    this is how a test adds them.)"""
    suffix = uuid.uuid4().hex[:8]
    for node_number, node_layouts in enumerate(layouts, start=1):
        hostname = f"node-{node_number}-{suffix}"
        conn.execute("SELECT compute.node_register(%s, %s, %s)",
                     (pool_id, hostname, Jsonb(h200_inventory(hostname, len(node_layouts)))))
        for gpu_index, layout in enumerate(node_layouts):
            if layout != WHOLE:
                conn.execute("SELECT compute.device_set_layout(%s, %s)",
                             (device_id(conn, pool_id, node_number, gpu_index), layout))

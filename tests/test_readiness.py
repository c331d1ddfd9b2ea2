"""Ready means usable, released means withdrawn (issue 13, parts 5 and 6).

The daemon reports, per booking of the spec it applied, whether it exposed the device, and stops
processes that still use a GPU no booking grants any more: real child processes stand for a
container that kept running past the end of its booking (the fake driver's `holders` file names
them, and it signals only those). End to end, with real `bcd run` processes, the gateway and the
worker: a reservation is ready only once its node exposed the device; a MIG layout the node cannot
make leaves it failed with the node's reason, until the node made the instance; the next holder of a
GPU is ready only after the node stopped what the previous one left running, and while the node is
silent it waits and says why.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

from better_compute.daemon.drivers import fake
from better_compute.nodeproto import Spec
from fleet import MIG_2X_3G, make_pool
from gateway_support import GatewayProcess
from node_support import H200_INVENTORY, JoinedNode, fake_driver, running_bcd, wait_until
from test_daemon import (GPU, HOSTNAME, TENANT, FlakyDriver, Node, api, bcd_join, control_plane, gpu_booking,  # noqa: F401
                         mig_recording, node)

HOLD = """import signal, sys, time
if sys.argv[1] == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("holding", flush=True)
time.sleep(600)
"""


@contextmanager
def holding(holders: Path, gpu: str, mode: str = "stubborn") -> Iterator[subprocess.Popen[str]]:
    """A real process that uses `gpu` as far as the fake driver can tell (named in `holders`);
    `stubborn` ignores SIGTERM, as a container that does not shut down would."""
    process = subprocess.Popen([sys.executable, "-c", HOLD, mode], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None and process.stdout.readline() == "holding\n"
        holders.write_text(json.dumps([{"pid": process.pid, "gpu_uuid": gpu, "gi": None, "ci": None}]))
        yield process
    finally:
        process.kill()
        process.wait()


def spec(node: Node, generation: int, *devices: dict[str, Any], grace: int = 1, gpus: list[Any] | None = None) -> Spec:
    """A signed spec with a withdrawal policy (and the GPUs' layouts), as the database writes it."""
    document = {"node_id": str(node.node_id), "devices": list(devices), "withdrawal": {"grace_seconds": grace}}
    if gpus is not None:
        document["gpus"] = gpus
    return Spec(node.intent.sign("spec", {"node_id": str(node.node_id), "generation": generation, "spec": document}))


# -- the daemon -------------------------------------------------------------------------------------------

def test_a_process_on_a_gpu_no_longer_booked_is_stopped_and_reported(node: Node) -> None:
    holders = node.tmp / "holders.json"
    node.driver = FlakyDriver(H200_INVENTORY, hostname=HOSTNAME, holders=holders)
    daemon = node.daemon()
    with holding(holders, GPU, "stubborn") as stubborn:
        [observed] = daemon.handle(spec(node, 1, gpu_booking()))
        assert node.opened(observed)["withdrawal"] == {"stopped": [], "in_use": []}
        assert stubborn.poll() is None  # booked: left alone
        [observed] = daemon.handle(spec(node, 2))
        assert stubborn.wait(5) == -signal.SIGKILL  # SIGTERM ignored: killed after the grace period
        assert node.opened(observed)["withdrawal"] == {
            "stopped": [{"pid": stubborn.pid, "gpu_uuid": GPU, "gi": None, "ci": None}], "in_use": []}
    with holding(holders, GPU, "polite") as polite:
        daemon.handle(spec(node, 3))
        assert polite.wait(5) == -signal.SIGTERM  # stopped within the grace period


def test_a_gpu_handed_to_the_next_holder_is_cleared_of_the_last_ones_processes_only(node: Node) -> None:
    """NVML does not say whose a process is: those running before the next holder's device was
    written are the last holder's. A handover seen across a restart (held.json) counts too."""
    holders = node.tmp / "holders.json"
    node.driver = FlakyDriver(H200_INVENTORY, hostname=HOSTNAME, holders=holders)
    node.daemon().handle(spec(node, 1, gpu_booking(reservation="r-1")))
    with holding(holders, GPU) as leftover:
        [observed] = node.daemon().handle(spec(node, 2, gpu_booking(reservation="r-2", booking_id=2)))
        assert leftover.wait(5) == -signal.SIGKILL
        assert [p["pid"] for p in node.opened(observed)["withdrawal"]["stopped"]] == [leftover.pid]
    daemon = node.daemon()
    with holding(holders, GPU) as own:
        daemon.handle(spec(node, 3, gpu_booking(reservation="r-2", booking_id=2), gpu_booking(reservation="r-3", booking_id=3)))
        assert own.poll() is None  # the holder stays (a slot holder joined): its own process runs on


def test_a_process_left_on_a_gpu_whose_layout_changes_is_stopped_before_the_change(node: Node) -> None:
    """The withdrawal comes first in a spec's application: a process the spec no longer grants would
    hold the GPU's MIG mode change (a reset is refused while a process uses the GPU)."""
    holders = node.tmp / "holders.json"
    node.driver = FlakyDriver(H200_INVENTORY, hostname=HOSTNAME, holders=holders)
    daemon = node.daemon()
    daemon.handle(spec(node, 1, gpu_booking()))
    layout = [{"uuid": GPU, "index": 0, "layout": "mig:3g.71gb@0",
               "mig": {"mode": "enabled", "instances": [{"profile": "3g.71gb", "placement": 0}]}}]
    with holding(holders, GPU, "polite") as leftover:
        inventory, observed = daemon.handle(spec(node, 2, gpus=layout))
        assert leftover.wait(5) == -signal.SIGTERM
    assert node.opened(observed)["conditions"] == [], "converged in the same pass: nothing abnormal"
    assert [p["pid"] for p in node.opened(observed)["withdrawal"]["stopped"]] == [leftover.pid]
    [gpu] = [d for d in node.opened(inventory)["inventory"]["devices"] if d["uuid"] == GPU]
    assert [(i["profile"], i["placement"]) for i in gpu["mig"]["instances"]] == [("3g.71gb", 0)]


def test_each_booking_is_reported_exposed_pending_or_failed(node: Node, tmp_path: Path) -> None:
    mig = gpu_booking(booking_id=7) | {"kind": "mig", "profile": "3g.71gb", "placement": 0, "cdi_name": None,
                                       "mig_uuid": None}
    [observed] = node.daemon().handle(spec(node, 1, gpu_booking(), mig))
    assert node.opened(observed)["devices"] == [
        {"booking_id": 1, "state": "exposed", "reason": None},
        {"booking_id": 7, "state": "failed",
         "reason": f"DevicesUnresolved: GPU {GPU} has no MIG device(s) 3g.71gb@0: its MIG layout is not the booked one"}]
    node.driver = FlakyDriver(mig_recording(tmp_path / "mig.json", [("3g.71gb", 0, 1)]), hostname=HOSTNAME)
    [observed] = node.daemon().handle(spec(node, 2, mig))
    [device] = node.opened(observed)["devices"]
    assert device["state"] == "pending" and "its name is on the way" in device["reason"]


# -- end to end -------------------------------------------------------------------------------------------

def readiness(sql: psycopg.Connection, reservation_id: str) -> dict[str, Any]:
    return sql.execute("SELECT compute.reservation_document(%s) -> 'readiness'", (reservation_id,)).fetchone()[0]


def reserve(sql: psycopg.Connection, pool_id: uuid.UUID, shape: str = "gpu") -> str:
    end = sql.execute("SELECT compute.compute_now() + interval '1 hour'").fetchone()[0]
    return str(api(sql, "reservations.create", {"pool_id": str(pool_id), "shape": shape, "count": 1,
                                                "end": end.isoformat()})["reservation_id"])


def test_a_layout_the_node_has_not_made_fails_with_its_reason_until_it_exposes_the_device(
        control_plane: GatewayProcess, db_dsn: str, sql: psycopg.Connection, tmp_path: Path) -> None:
    """The issue's walkthrough: the database lays the GPU out as two 3g.71gb instances, the node
    cannot make them (its GPU answers InsufficientResources). The reservation is active but not
    ready: failed, with the node's reason. Once the fault is gone, the node's next pass makes the
    instances, reports its inventory, and exposes the device: ready."""
    pool_id = make_pool(sql, [], shapes=("gpu", "mig:3g.71gb"), tenant_id=TENANT)
    node: JoinedNode = bcd_join(control_plane, db_dsn, pool_id, tmp_path)
    gpu = fake.gpu_uuid(node.hostname, 0)
    gpus = fake.Driver(H200_INVENTORY, hostname=node.hostname, gpu_state=tmp_path / "gpus.json")
    gpus.inject(gpu, insufficient_resources=True)
    sql.execute("SELECT compute.device_set_layout(d.device_id, %s) FROM compute.devices AS d WHERE d.node_id = %s",
                (MIG_2X_3G, node.node_id))
    reservation = reserve(sql, pool_id, "mig:3g.71gb")  # before the node says its GPU failed (placement would skip it)
    driver = [*fake_driver(node.hostname), "--driver-option", f"gpu_state={tmp_path / 'gpus.json'}"]
    with running_bcd(control_plane, node.state_dir, node.hostname, node.cdi_path, ["--reconcile-seconds", "0.5"],
                     driver) as daemon:
        failed = wait_until(lambda: (r := readiness(sql, reservation))["state"] == "failed" and r, "failed", daemon.log)
        assert "has no MIG device(s) 3g.71gb@0" in failed["reason"], failed
        assert sql.execute("SELECT state FROM compute.reservations WHERE reservation_id = %s",
                           (reservation,)).fetchone()[0] == "active"
        gpus.inject(gpu, insufficient_resources=None)
        wait_until(lambda: readiness(sql, reservation)["state"] == "ready", "ready once exposed", daemon.log)
    assert sorted(i.key for i in gpus.mig_state(gpu).instances) == [("3g.71gb", 0), ("3g.71gb", 4)]


def test_the_next_holder_is_ready_only_after_the_node_stopped_the_last_ones_process(
        control_plane: GatewayProcess, db_dsn: str, sql: psycopg.Connection, tmp_path: Path) -> None:
    pool_id = make_pool(sql, [], shapes=("gpu",), tenant_id=TENANT)
    node = bcd_join(control_plane, db_dsn, pool_id, tmp_path)
    gpu = fake.gpu_uuid(node.hostname, 0)
    holders = tmp_path / "holders.json"
    options = ["--driver-option", f"holders={holders}"]
    sql.execute("UPDATE compute.limits SET value = 1 WHERE name = 'withdrawal_grace_seconds'")
    with running_bcd(control_plane, node.state_dir, node.hostname, node.cdi_path, options) as daemon:
        first = reserve(sql, pool_id)
        wait_until(lambda: readiness(sql, first)["state"] == "ready", "the first holder ready", daemon.log)
        daemon.process.kill()  # the node goes silent
        daemon.process.wait()
    with holding(holders, gpu, "stubborn") as leftover:  # the first holder's container keeps running
        api(sql, "reservations.release", {"reservation_id": first})
        following = reserve(sql, pool_id)
        waiting = wait_until(lambda: "not connected" in ((r := readiness(sql, following))["reason"] or "") and r,
                             "the next holder sees the node is silent")
        assert waiting["state"] == "waiting_for_node" and f"withdraws reservation {first}" in waiting["reason"], waiting
        assert leftover.poll() is None
        assert sql.execute("SELECT count(*) FROM ops.withdrawals WHERE reservation_id = %s", (first,)).fetchone()[0] == 1
        with running_bcd(control_plane, node.state_dir, node.hostname, node.cdi_path, options) as daemon:
            wait_until(lambda: readiness(sql, following)["state"] == "ready", "the next holder ready", daemon.log)
            assert leftover.poll() == -signal.SIGKILL  # stopped before the next holder was told it is ready

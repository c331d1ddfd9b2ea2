"""MIG layouts converge per GPU through the fake driver (daemon/mig.py), every failure mode ends in its
condition, and a daemon killed anywhere in a change leaves no stray instance after its next pass."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from better_compute.daemon.drivers import fake
from better_compute.daemon.health import health_conditions
from better_compute.daemon.mig import Desired, MigState, converge, converge_all

REPO = Path(__file__).resolve().parents[1]
H200 = REPO / "tests" / "fixtures" / "nvidia-h200" / "inventory.json"
HOST = "mig-host"
GPU = fake.gpu_uuid(HOST, 0)


def two_gpus() -> Path:
    """The H200 document with two GPUs (the fake driver derives their uuids from the host name)."""
    document = json.loads(H200.read_text())
    second = json.loads(json.dumps(document["devices"][0])) | {"index": 1, "uuid": "GPU-second"}
    document["devices"].append(second)
    return document


@pytest.fixture
def driver(tmp_path: Path) -> fake.Driver:
    path = tmp_path / "inventory.json"
    path.write_text(json.dumps(two_gpus()))
    return fake.Driver(path, hostname=HOST, gpu_state=tmp_path / "gpus.json")


def spec_gpu(uuid: str, layout: str) -> dict[str, Any]:
    """A spec `gpus` entry as sql's node_spec_document writes it."""
    if layout == "whole":
        return {"uuid": uuid, "layout": layout, "mig": {"mode": "disabled", "instances": []}}
    instances = [{"profile": item.split("@")[0], "placement": int(item.split("@")[1])} for item in layout[4:].split(",")]
    return {"uuid": uuid, "layout": layout, "mig": {"mode": "enabled", "instances": instances}}


def conditions_of(outcome_conditions: list[dict[str, Any]]) -> dict[str, tuple[bool, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in outcome_conditions}


def layout_of(state: MigState) -> str:
    if state.mode != "enabled" or not state.instances:
        return "whole"
    return "mig:" + ",".join(f"{i.profile}@{i.placement}" for i in sorted(state.instances, key=lambda i: i.placement))


def test_a_gpu_converges_to_its_layout_and_the_inventory_lists_its_mig_devices(driver: fake.Driver) -> None:
    outcome = converge(driver, GPU, Desired.of(spec_gpu(GPU, "mig:3g.71gb@0,3g.71gb@4")), [])
    assert outcome.changed and outcome.converged
    assert conditions_of(outcome.conditions()) == {"MigConverged": (True, "Converged"),
                                                   "MigPendingReset": (False, "NoPendingReset"),
                                                   "MigFailed": (False, "NoFailure")}
    device = driver.collect()["devices"][0]
    assert device["mig"]["mode"] == "enabled"
    assert [(i["profile"], i["placement"], i["ci"]) for i in device["mig"]["instances"]] == [("3g.71gb", 0, 0), ("3g.71gb", 4, 0)]
    again = converge(driver, GPU, Desired.of(spec_gpu(GPU, "mig:3g.71gb@0,3g.71gb@4")), [])
    assert again.converged and not again.changed, "a second pass changes nothing (level-triggered, idempotent)"
    back = converge(driver, GPU, Desired.of(spec_gpu(GPU, "whole")), [])
    assert back.converged and driver.mig_state(GPU) == MigState(mode="disabled")


def test_only_the_gpu_the_spec_changes_is_touched(driver: fake.Driver) -> None:
    other = fake.gpu_uuid(HOST, 1)
    before = driver.mig_state(other)
    booking = [{"device_uuid": other, "kind": "gpu", "cdi_name": f"nvidia.com/gpu={other}"}]
    outcomes = converge_all(driver, [spec_gpu(GPU, "mig:1g.18gb@0"), spec_gpu(other, "whole")], booking)
    assert [o.converged for o in outcomes] == [True, True]
    assert driver.mig_state(other) == before


def test_a_booked_instance_is_not_destroyed_and_a_booked_gpu_keeps_its_mode(driver: fake.Driver) -> None:
    converge(driver, GPU, Desired.of(spec_gpu(GPU, "mig:3g.71gb@0,3g.71gb@4")), [])
    held = [{"device_uuid": GPU, "kind": "mig", "profile": "3g.71gb", "placement": 4}]
    outcome = converge(driver, GPU, Desired.of(spec_gpu(GPU, "mig:3g.71gb@0")), held)
    assert not outcome.converged and layout_of(driver.mig_state(GPU)) == "mig:3g.71gb@0,3g.71gb@4"
    assert conditions_of(outcome.conditions())["MigConverged"] == (False, "Booked")
    whole = [{"device_uuid": GPU, "kind": "gpu"}]
    converge(driver, GPU, Desired.of(spec_gpu(GPU, "whole")), [])
    assert conditions_of(converge(driver, GPU, Desired.of(spec_gpu(GPU, "mig:1g.18gb@0")), whole).conditions())[
        "MigConverged"] == (False, "Booked")
    assert driver.mig_state(GPU).mode == "disabled"



def test_a_booked_instance_the_gpu_does_not_have_yet_is_made(driver: fake.Driver) -> None:
    """A MIG booking that starts with its layout (or was placed before the node converged) holds no
    instance yet: nothing is taken from it, so its GPU changes mode to make it."""
    wanted = [{"device_uuid": GPU, "kind": "mig", "profile": "3g.71gb", "placement": 0}]
    outcome = converge(driver, GPU, Desired.of(spec_gpu(GPU, "mig:3g.71gb@0,3g.71gb@4")), wanted)
    assert outcome.converged, outcome.conditions()
    assert layout_of(driver.mig_state(GPU)) == "mig:3g.71gb@0,3g.71gb@4"
    assert conditions_of(converge(driver, GPU, Desired.of(spec_gpu(GPU, "whole")), wanted).conditions())[
        "MigConverged"] == (False, "Booked"), "once made, the booked instance keeps the GPU in MIG mode"

@pytest.mark.parametrize(("faults", "processes", "layout_first", "layout", "expected"), [
    ({"insufficient_resources": True}, [], None, "mig:3g.71gb@0",
     {"MigConverged": (False, "InsufficientResources"), "MigFailed": (True, "InsufficientResources")}),
    ({"in_use": True}, [], "mig:3g.71gb@0", "mig:1g.18gb@0",
     {"MigConverged": (False, "InUse"), "MigFailed": (True, "InUse")}),
    ({"needs_reset": True}, [], None, "mig:3g.71gb@0",
     {"MigConverged": (True, "Converged"), "MigPendingReset": (False, "NoPendingReset")}),
    ({"needs_reset": True}, [{"pid": 4242, "gpu_uuid": GPU, "gi": None, "ci": None}], None, "mig:3g.71gb@0",
     {"MigConverged": (False, "ResetRefused"), "MigPendingReset": (True, "ResetRefused"), "MigFailed": (True, "ResetRefused")}),
], ids=["insufficient-resources", "instance-in-use", "pending-reset-then-reset", "reset-refused-while-processes-run"])
def test_each_failure_mode_ends_in_its_condition(driver: fake.Driver, faults: dict[str, Any], processes: list[Any],
                                                 layout_first: str | None, layout: str,
                                                 expected: dict[str, tuple[bool, str]]) -> None:
    if layout_first:
        assert converge(driver, GPU, Desired.of(spec_gpu(GPU, layout_first)), []).converged
    driver.inject(GPU, **faults)
    state = driver.load()
    state["processes"] = processes
    driver.save(state)
    found = conditions_of(converge(driver, GPU, Desired.of(spec_gpu(GPU, layout)), []).conditions())
    assert {kind: found[kind] for kind in expected} == expected
    driver.inject(GPU, **{name: None for name in faults})
    state = driver.load()
    state["processes"] = []
    driver.save(state)
    assert converge(driver, GPU, Desired.of(spec_gpu(GPU, layout)), []).converged, "the fault gone, the next pass converges"


def test_a_gpu_instance_left_without_its_compute_instance_is_finished_or_removed(driver: fake.Driver) -> None:
    # What a daemon killed between the GPU instance and the compute instance leaves.
    driver.set_mig_mode(GPU, True)
    gi = driver.create_gpu_instance(GPU, "3g.71gb", 4)
    assert converge(driver, GPU, Desired.of(spec_gpu(GPU, "mig:3g.71gb@4")), []).converged
    assert [i.cis for i in driver.mig_state(GPU).instances] == [(0,)]
    driver.destroy_compute_instance(GPU, gi, 0)
    assert converge(driver, GPU, Desired.of(spec_gpu(GPU, "mig:1g.18gb@0")), []).converged
    assert layout_of(driver.mig_state(GPU)) == "mig:1g.18gb@0"


@pytest.mark.parametrize(("faults", "critical"), [
    ({"xid": [79]}, "FallenOffBus"), ({"lost": True}, "FallenOffBus"), ({"xid": [48]}, "XidCritical"),
    ({"ecc_uncorrectable": 2}, "EccUncorrectable"), ({"row_remap_pending": True}, "RowRemapPending"),
    ({"row_remap_failed": True}, "RowRemapFailed"), ({"thermal_slowdown": True}, "ThermalSlowdown"),
    ({"power_slowdown": True}, "PowerSlowdown"),
])
def test_each_injected_fault_ends_in_its_health_condition(driver: fake.Driver, faults: dict[str, Any], critical: str) -> None:
    assert not any(c["status"] for c in driver.health())
    driver.inject(GPU, **faults)
    true = [(c["gpu_uuid"], c["type"]) for c in driver.health() if c["status"]]
    assert true == [(GPU, critical)]


def test_an_application_xid_is_no_health_condition() -> None:
    assert not any(c["status"] for c in health_conditions(GPU, xid=[13, 31, 43]))


CHILD = """
import sys, json
from better_compute.daemon.drivers import fake
from better_compute.daemon.mig import converge_all
driver = fake.Driver(sys.argv[1], hostname=sys.argv[2], gpu_state=sys.argv[3], mig_delay=sys.argv[4])
gpus = json.loads(sys.argv[5])
print("started", flush=True)
while not all(o.converged for o in converge_all(driver, gpus, [])):
    pass
print("converged", flush=True)
"""

LAYOUTS = ["whole", "mig:3g.71gb@0,3g.71gb@4", "mig:1g.18gb@0,1g.18gb@1,2g.35gb@2,3g.71gb@4", "mig:7g.141gb@0",
           "mig:3g.71gb@0,1g.18gb@6", "mig:4g.71gb@0,2g.35gb@4,1g.18gb@6"]


def test_chaos_a_daemon_killed_anywhere_in_20_layout_changes_leaves_every_gpu_as_its_spec(tmp_path: Path) -> None:
    document, state = tmp_path / "inventory.json", tmp_path / "gpus.json"
    document.write_text(json.dumps(two_gpus()))
    gpus = [fake.gpu_uuid(HOST, 0), fake.gpu_uuid(HOST, 1)]
    chaos = random.Random(13)
    env = {**os.environ, "PYTHONPATH": str(REPO / "py")}
    kills = 0
    for change in range(20):
        spec = [spec_gpu(gpu, chaos.choice(LAYOUTS)) for gpu in gpus]
        argv = [sys.executable, "-c", CHILD, str(document), HOST, str(state), "0.02", json.dumps(spec)]
        # Killed once at a random point of the change (SIGKILL: no handler runs), then started again.
        child = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
        assert child.stdout is not None and child.stdout.readline() == "started\n"
        time.sleep(chaos.uniform(0, 0.3))
        if child.poll() is None:
            child.send_signal(signal.SIGKILL)
            kills += 1
        child.wait()
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
        assert done.stdout.endswith("converged\n"), done.stderr
        driver = fake.Driver(document, hostname=HOST, gpu_state=state)
        for gpu, entry in zip(gpus, spec):
            observed = driver.mig_state(gpu)
            assert layout_of(observed) == entry["layout"], f"change {change}: GPU {gpu} is {observed}"
            assert observed.pending is None and all(len(i.cis) == 1 for i in observed.instances), \
                f"change {change}: a stray or unfinished instance on {gpu}: {observed}"
    assert kills >= 10, f"only {kills} of 20 changes were killed midway: the test did not test much"

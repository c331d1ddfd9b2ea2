"""The CDI spec writer (better_compute.daemon.cdi): every document it builds, and every file it
writes, is checked against the CDI JSON schema (tests/fixtures/cdi-schema) and the reference
implementation's device-name rule."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7

from better_compute.daemon import cdi, files
from better_compute.daemon.cdi import CdiError, CdiSpec, build_spec, write_spec
from fleet import gpu_uuid, h200_inventory

FIXTURES = Path(__file__).parent / "fixtures"
SCHEMA = FIXTURES / "cdi-schema"
NODE = "node-1"
SHARED_NODES = [{"path": "/dev/nvidiactl"}, {"path": "/dev/nvidia-uvm"}, {"path": "/dev/nvidia-uvm-tools"}]


def validator() -> jsonschema.Draft7Validator:
    """schema.json, with its references to defs.json resolved from the fixture."""
    defs = Resource.from_contents(json.loads((SCHEMA / "defs.json").read_text()), default_specification=DRAFT7)
    return jsonschema.Draft7Validator(json.loads((SCHEMA / "schema.json").read_text()),
                                      registry=Registry().with_resource("defs.json", defs))


VALIDATOR = validator()


def check(document: dict[str, Any]) -> dict[str, Any]:
    """A document a CDI runtime loads: schema-valid, with devices, unique and well-formed names."""
    VALIDATOR.validate(document)
    names = [device["name"] for device in document["devices"]]
    assert names and len(set(names)) == len(names)
    assert all(cdi.DEVICE_NAME.fullmatch(name) for name in names)
    return document


def build(desired: dict[str, Any], inventory: dict[str, Any]) -> CdiSpec:
    spec = build_spec(desired, inventory)
    if spec.document is not None:
        check(spec.document)
    return spec


def written(path: Path) -> dict[str, Any]:
    """The spec file as a runtime reads it, checked."""
    text = path.read_text()
    return check(json.loads(text) if path.suffix == ".json" else yaml.safe_load(text))


def booking(kind: str, device: str, reservation: str, gpu: int = 0) -> dict[str, Any]:
    return {"cdi_name": f"nvidia.com/gpu={device}", "device_uuid": gpu_uuid(NODE, gpu), "kind": kind,
            "reservation_id": reservation}


def mig_booking(instance: dict[str, Any], reservation: str, gpu: int = 1, **changes: Any) -> dict[str, Any]:
    """A booking of the MIG atom `instance` is (profile and placement), named as the control plane
    names it (compute.atom_cdi_name): by the instance's MIG UUID."""
    return booking("mig", instance["uuid"], reservation, gpu) | {
        "profile": instance["profile"], "placement": instance["placement"], "mig_uuid": instance["uuid"]} | changes


def mig_node() -> dict[str, Any]:
    """Two H200s; GPU 1 in MIG mode as two 3g.71gb instances (memory slices 0-3 and 4-7), with the
    capability device nodes the daemon reads for each."""
    inventory = h200_inventory(NODE, 2)
    gpu = inventory["devices"][1]
    gpu["mig"] = gpu["mig"] | {"mode": "enabled", "instances": [  # a new dict: the GPUs share the captured one
        {"profile": "3g.71gb", "placement": placement, "gi": gi, "ci": 0, "uuid": f"MIG-{gpu_uuid(NODE, 10 + gi)[4:]}",
         "device_nodes": [f"/dev/nvidia-caps/nvidia-cap{10 * gi + 1}", f"/dev/nvidia-caps/nvidia-cap{10 * gi + 2}"]}
        for gi, placement in ((1, 0), (2, 4))]}
    return inventory


def test_the_schema_fixture_accepts_a_real_spec_and_refuses_a_broken_one() -> None:
    """The validator is the one the tests rely on: nvidia-ctk's real spec passes, a spec without
    devices or with a device node lacking its path does not."""
    check(yaml.safe_load((FIXTURES / "public/cdi/tesla-t4-g4dn-xlarge-nvidia-ctk-cdi-generate.yaml").read_text()))
    with pytest.raises(jsonschema.ValidationError):
        VALIDATOR.validate({"cdiVersion": "0.6.0", "kind": cdi.KIND})
    with pytest.raises(jsonschema.ValidationError):
        VALIDATOR.validate({"cdiVersion": "0.6.0", "kind": cdi.KIND, "devices": [
            {"name": "0", "containerEdits": {"deviceNodes": [{"hostPath": "/dev/nvidia0"}]}}]})


def test_whole_gpus(tmp_path: Path) -> None:
    inventory = h200_inventory(NODE, 2)
    spec = build({"generation": 7, "devices": [booking("gpu", gpu_uuid(NODE, 1), "r2", gpu=1),
                                               booking("gpu", gpu_uuid(NODE, 0), "r1")]}, inventory)
    assert spec.unresolved == ()
    assert spec.document == {
        "cdiVersion": "0.6.0", "kind": "nvidia.com/gpu", "annotations": {"better-compute/generation": "7"},
        "containerEdits": {"deviceNodes": SHARED_NODES},
        "devices": sorted([
            {"name": gpu_uuid(NODE, 0), "annotations": {"better-compute/reservations": "r1"},
             "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}},
            {"name": gpu_uuid(NODE, 1), "annotations": {"better-compute/reservations": "r2"},
             "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia1"}]}}], key=lambda device: device["name"])}
    path = tmp_path / "cdi" / "better-compute.yaml"
    assert write_spec(spec, path)
    assert written(path) == spec.document
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert os.listdir(path.parent) == ["better-compute.yaml"]  # no temporary file left behind


def test_mig_instances_by_uuid() -> None:
    inventory = mig_node()
    first, second = inventory["devices"][1]["mig"]["instances"]
    spec = build({"generation": 3, "devices": [mig_booking(first, "r1"), mig_booking(second, "r2")]}, inventory)
    assert {device["name"]: device["containerEdits"]["deviceNodes"] for device in spec.document["devices"]} == {
        first["uuid"]: [{"path": "/dev/nvidia1"}, {"path": "/dev/nvidia-caps/nvidia-cap11"},
                        {"path": "/dev/nvidia-caps/nvidia-cap12"}],
        second["uuid"]: [{"path": "/dev/nvidia1"}, {"path": "/dev/nvidia-caps/nvidia-cap21"},
                         {"path": "/dev/nvidia-caps/nvidia-cap22"}]}
    assert spec.unresolved == () and spec.refused == ()


def test_a_mig_atom_is_exposed_only_as_the_instance_of_its_uuid_profile_and_placement() -> None:
    """GPU 1 was re-laid to 1g.18gb@0..3 while its old 3g.71gb instance (slices 0-3) still exists:
    a booking of 1g.18gb@0 must not be handed the 3g.71gb instance, under any name."""
    inventory = mig_node()
    old, _ = inventory["devices"][1]["mig"]["instances"]
    small = {"profile": "1g.18gb", "placement": 0}
    spec = build({"generation": 4, "devices": [
        mig_booking(old, "r1") | small | {"cdi_name": "nvidia.com/gpu=1:0", "mig_uuid": None},  # the old fallback name
        mig_booking(old, "r2") | small,  # the instance's UUID, another profile
        mig_booking(old, "r3", placement=4),  # the instance's UUID and profile, another placement
        mig_booking(old, "r4", mig_uuid="MIG-recreated"),  # the instance was destroyed and made again
    ]}, inventory)
    assert spec.document is None
    assert spec.unresolved == ("nvidia.com/gpu=1:0", *[f"nvidia.com/gpu={old['uuid']}"] * 3)


def test_a_gpu_instance_with_two_compute_instances_is_not_one_device() -> None:
    """Which of the two would the booking get? Neither: the node reports it."""
    inventory = mig_node()
    first, _ = inventory["devices"][1]["mig"]["instances"]
    inventory["devices"][1]["mig"]["instances"].append(first | {"ci": 1, "uuid": "MIG-second-ci"})
    spec = build({"generation": 4, "devices": [mig_booking(first, "r1")]}, inventory)
    assert spec == CdiSpec(document=None, unresolved=(f"nvidia.com/gpu={first['uuid']}",), refused=())


def test_time_slice_slots_of_one_gpu_are_one_device() -> None:
    slots = [booking("slot", gpu_uuid(NODE, 0), reservation) for reservation in ("r2", "r1", "r3", "r1")]
    spec = build({"generation": 2, "devices": slots}, h200_inventory(NODE, 1))
    (device,) = spec.document["devices"]
    assert device["name"] == gpu_uuid(NODE, 0)
    assert device["annotations"] == {"better-compute/reservations": "r1,r2,r3"}


def test_nothing_booked_removes_the_file(tmp_path: Path) -> None:
    """The schema would take `devices: []`, but the reference implementation refuses a spec without
    devices, which would make the runtime report the whole file as broken."""
    path = tmp_path / "better-compute.yaml"
    write_spec(build({"generation": 1, "devices": [booking("gpu", gpu_uuid(NODE, 0), "r1")]}, h200_inventory(NODE, 1)),
               path)
    empty = build({"generation": 2, "devices": []}, h200_inventory(NODE, 1))
    assert empty == CdiSpec(document=None, unresolved=(), refused=())
    assert write_spec(empty, path) and not path.exists()
    assert not write_spec(empty, path)


def test_bookings_the_inventory_cannot_back_are_left_out_and_named(tmp_path: Path) -> None:
    inventory = mig_node()
    first, _ = inventory["devices"][1]["mig"]["instances"]
    spec = build({"generation": 5, "devices": [
        booking("gpu", gpu_uuid(NODE, 0), "r1"),
        booking("gpu", gpu_uuid("gone", 0), "r2") | {"device_uuid": gpu_uuid("gone", 0)},
        mig_booking(first, "r3", placement=2),  # no instance at slice 2
        mig_booking(first, "r4", gpu=0),  # GPU 0 is not in MIG mode
        booking("mig", "x", "r5", gpu=1) | {"cdi_name": None, "profile": "3g.71gb", "placement": 4},  # no name
    ]}, inventory)
    assert [device["name"] for device in spec.document["devices"]] == [gpu_uuid(NODE, 0)]
    assert spec.unresolved == (f"nvidia.com/gpu={gpu_uuid('gone', 0)}", f"nvidia.com/gpu={first['uuid']}",
                               f"nvidia.com/gpu={first['uuid']}", f"mig 3g.71gb@4 of {gpu_uuid(NODE, 1)}")
    path = tmp_path / "spec.json"
    write_spec(spec, path)
    assert written(path) == spec.document


def test_only_unbacked_bookings_write_no_spec() -> None:
    inventory = mig_node()
    first, _ = inventory["devices"][1]["mig"]["instances"]
    spec = build({"generation": 1, "devices": [mig_booking(first, "r1", gpu=0)]}, h200_inventory(NODE, 1))
    assert spec == CdiSpec(document=None, unresolved=(f"nvidia.com/gpu={first['uuid']}",), refused=())


def test_json_by_suffix_and_rewrites_only_on_change(tmp_path: Path) -> None:
    inventory = h200_inventory(NODE, 2)
    path = tmp_path / "better-compute.json"
    first = build({"generation": 1, "devices": [booking("gpu", gpu_uuid(NODE, 0), "r1")]}, inventory)
    assert write_spec(first, path)
    inode = path.stat().st_ino
    assert not write_spec(first, path) and path.stat().st_ino == inode
    second = build({"generation": 2, "devices": [booking("gpu", gpu_uuid(NODE, 1), "r2", gpu=1)]}, inventory)
    assert write_spec(second, path) and path.stat().st_ino != inode
    assert written(path) == second.document


def test_a_failed_write_keeps_the_old_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash before the rename leaves the previous spec whole, and no temporary file."""
    inventory = h200_inventory(NODE, 2)
    path = tmp_path / "better-compute.yaml"
    old = build({"generation": 1, "devices": [booking("gpu", gpu_uuid(NODE, 0), "r1")]}, inventory)
    write_spec(old, path)

    def crash(source: str, target: str) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(files.os, "replace", crash)
    new = build({"generation": 2, "devices": [booking("gpu", gpu_uuid(NODE, 1), "r2", gpu=1)]}, inventory)
    with pytest.raises(OSError, match="disk gone"):
        write_spec(new, path)
    assert written(path) == old.document and os.listdir(tmp_path) == ["better-compute.yaml"]


LEGACY = "MIG-GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f/2/0"  # a MIG UUID as drivers before R470 print it


@pytest.mark.parametrize("bad, reason", [
    (booking("gpu", "GPU-x", "r1") | {"cdi_name": "amd.com/gpu=GPU-x"}, "not a CDI"),
    (booking("gpu", "GPU x", "r1"), "not a CDI"),
    (booking("mig", LEGACY, "r1", gpu=1) | {"profile": "1g.18gb", "placement": 2, "mig_uuid": LEGACY}, "not a CDI"),
    (booking("vgpu", "GPU-x", "r1"), "kind 'vgpu'"),
    ({"cdi_name": "nvidia.com/gpu=GPU-y", "kind": "gpu"}, "device_uuid"),
])
def test_a_booking_that_cannot_be_written_is_left_out_and_named(bad: dict[str, Any], reason: str) -> None:
    """One bad booking costs its own device, not the spec: the others are written, and the bad one
    is named with why (a spec that raised instead left the previous generation's devices in place)."""
    spec = build({"generation": 1, "devices": [booking("gpu", gpu_uuid(NODE, 0), "r1"), bad]}, mig_node())
    assert [device["name"] for device in spec.document["devices"]] == [gpu_uuid(NODE, 0)]
    ((name, why),) = spec.refused
    assert name == bad["cdi_name"] and reason in why and spec.unresolved == ()


def test_a_generation_that_is_not_an_integer_is_no_spec() -> None:
    with pytest.raises(CdiError, match="not an integer"):
        build_spec({"generation": "1", "devices": []}, h200_inventory(NODE, 1))


def test_withdraw_keeps_only_the_devices_still_granted(tmp_path: Path) -> None:
    """What the daemon does when it cannot build or write a spec: the devices the current spec does
    not grant leave the file at once; the file goes when none is left, or when it cannot be read."""
    inventory = h200_inventory(NODE, 2)
    path = tmp_path / "better-compute.yaml"
    both = build({"generation": 1, "devices": [booking("gpu", gpu_uuid(NODE, 0), "r1"),
                                               booking("gpu", gpu_uuid(NODE, 1), "r2", gpu=1)]}, inventory)
    write_spec(both, path)
    granted = cdi.granted_names([booking("gpu", gpu_uuid(NODE, 1), "r2", gpu=1), {"cdi_name": "nvidia.com/gpu=a/b"}])
    assert granted == {gpu_uuid(NODE, 1)}
    assert cdi.withdraw(path, granted)
    assert [device["name"] for device in written(path)["devices"]] == [gpu_uuid(NODE, 1)]
    assert not cdi.withdraw(path, granted)  # nothing more to take away
    assert cdi.withdraw(path, set()) and not path.exists()
    assert not cdi.withdraw(path, set())
    path.write_text("devices: [unreadable")
    assert cdi.withdraw(path, granted) and not path.exists()


def test_spec_files_end_in_yaml_or_json(tmp_path: Path) -> None:
    spec = build({"generation": 1, "devices": [booking("gpu", gpu_uuid(NODE, 0), "r1")]}, h200_inventory(NODE, 1))
    with pytest.raises(CdiError, match="ends in .yaml or .json"):
        write_spec(spec, tmp_path / "better-compute.yml")

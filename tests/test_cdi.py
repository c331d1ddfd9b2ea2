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


def test_mig_instances_by_uuid_or_by_placement() -> None:
    inventory = mig_node()
    first, second = inventory["devices"][1]["mig"]["instances"]
    spec = build({"generation": 3, "devices": [booking("mig", first["uuid"], "r1", gpu=1),
                                               booking("mig", "1:4", "r2", gpu=1)]}, inventory)
    assert {device["name"]: device["containerEdits"]["deviceNodes"] for device in spec.document["devices"]} == {
        first["uuid"]: [{"path": "/dev/nvidia1"}, {"path": "/dev/nvidia-caps/nvidia-cap11"},
                        {"path": "/dev/nvidia-caps/nvidia-cap12"}],
        "1:4": [{"path": "/dev/nvidia1"}, {"path": "/dev/nvidia-caps/nvidia-cap21"},
                {"path": "/dev/nvidia-caps/nvidia-cap22"}]}
    assert second["placement"] == 4


def test_a_placement_name_stays_a_string_in_yaml(tmp_path: Path) -> None:
    """YAML 1.1 reads an unquoted 1:4 as the number 64 (base 60): the writer must quote it."""
    spec = build({"generation": 1, "devices": [booking("mig", "1:4", "r1", gpu=1)]}, mig_node())
    path = tmp_path / "better-compute.yaml"
    write_spec(spec, path)
    assert [device["name"] for device in written(path)["devices"]] == ["1:4"]


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
    assert empty == CdiSpec(document=None, unresolved=())
    assert write_spec(empty, path) and not path.exists()
    assert not write_spec(empty, path)


def test_bookings_the_inventory_cannot_back_are_left_out_and_named(tmp_path: Path) -> None:
    inventory = mig_node()
    spec = build({"generation": 5, "devices": [
        booking("gpu", gpu_uuid(NODE, 0), "r1"),
        booking("gpu", gpu_uuid("gone", 0), "r2") | {"device_uuid": gpu_uuid("gone", 0)},
        booking("mig", "1:2", "r3", gpu=1),  # no instance at slice 2
        booking("mig", "0:4", "r4"),  # GPU 0 is not in MIG mode
    ]}, inventory)
    assert [device["name"] for device in spec.document["devices"]] == [gpu_uuid(NODE, 0)]
    assert spec.unresolved == (f"nvidia.com/gpu={gpu_uuid('gone', 0)}", "nvidia.com/gpu=1:2", "nvidia.com/gpu=0:4")
    path = tmp_path / "spec.json"
    write_spec(spec, path)
    assert written(path) == spec.document


def test_only_unbacked_bookings_write_no_spec() -> None:
    spec = build({"generation": 1, "devices": [booking("mig", "0:4", "r1")]}, h200_inventory(NODE, 1))
    assert spec == CdiSpec(document=None, unresolved=("nvidia.com/gpu=0:4",))


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


@pytest.mark.parametrize("desired, message", [
    ({"generation": 1, "devices": [booking("gpu", "GPU-x", "r1") | {"cdi_name": "amd.com/gpu=GPU-x"}]}, "not a CDI"),
    ({"generation": 1, "devices": [booking("gpu", "GPU x", "r1")]}, "not a CDI"),
    ({"generation": 1, "devices": [booking("vgpu", "GPU-x", "r1")]}, "kind 'vgpu'"),
    ({"generation": "1", "devices": []}, "not an integer"),
])
def test_malformed_desired_state(desired: dict[str, Any], message: str) -> None:
    with pytest.raises(CdiError, match=message):
        build_spec(desired, h200_inventory(NODE, 1))


def test_spec_files_end_in_yaml_or_json(tmp_path: Path) -> None:
    spec = build({"generation": 1, "devices": [booking("gpu", gpu_uuid(NODE, 0), "r1")]}, h200_inventory(NODE, 1))
    with pytest.raises(CdiError, match="ends in .yaml or .json"):
        write_spec(spec, tmp_path / "better-compute.yml")

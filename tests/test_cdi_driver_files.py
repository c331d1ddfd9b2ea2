"""The driver's files in the CDI spec (better_compute.daemon.driverfiles) and the start-up check for
other specs of the same devices (better_compute.daemon.cdi.other_specs).

The reference is a real `nvidia-ctk cdi generate` of a Tesla T4 node (driver 570.133.20,
tests/fixtures/public/cdi/): discovery below a directory laid out like that node's driver installation
must find the same container edits, and a fake `nvidia-ctk` on PATH that prints that spec must be used
as it is. Every spec built with either validates against the CDI schema (test_cdi.check)."""

from __future__ import annotations

import copy
import json
import logging
import os
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml

from better_compute.daemon.cdi import CommonEdits, build_spec, names_of, other_specs, write_spec
from better_compute.daemon.driverfiles import DriverFiles
from better_compute.daemon.drivers import InventoryError, fake
from fleet import H200_INVENTORY, gpu_uuid, h200_inventory
from test_cdi import booking, check, written

CAPTURE = Path(__file__).parent / "fixtures" / "public" / "cdi" / "tesla-t4-g4dn-xlarge-nvidia-ctk-cdi-generate.yaml"
GENERATED: dict[str, Any] = yaml.safe_load(CAPTURE.read_text())
VERSION = "570.133.20"
NODE = "node-1"
LIBRARY_DIR = "/usr/lib/x86_64-linux-gnu"
SHARED_NODES = [node["path"] for node in GENERATED["containerEdits"]["deviceNodes"]]


def t4_inventory() -> dict[str, Any]:
    """A node inventory with the captured node's driver version and shared device nodes."""
    inventory = h200_inventory(NODE, 2)
    return inventory | {"driver": inventory["driver"] | {"version": VERSION}, "shared_device_nodes": SHARED_NODES}


def lay_out(root: Path, *paths: str) -> None:
    for path in paths:
        (root / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (root / path.lstrip("/")).write_bytes(b"")


def hook_binary(root: Path, path: str, *commands: str) -> None:
    """A toolkit hook binary at `path` below `root` whose `--help` lists `commands`, as urfave/cli
    prints them."""
    lay_out(root, path)
    listed = "".join(f"   {command}  does {command}\\n" for command in commands)
    (root / path.lstrip("/")).write_text(f'#!/bin/sh\nprintf "NAME:\\n   hooks\\n\\nCOMMANDS:\\n{listed}"\n')
    (root / path.lstrip("/")).chmod(0o755)


def t4_root(root: Path) -> Path:
    """A directory laid out like the captured node: each file its spec mounts, the links the driver
    installs beside its libraries (libcuda.so.1 ...), files of other versions and other programs
    that are not the driver's, and the toolkit's hook binary (of the toolkit that wrote the capture)."""
    lay_out(root, *(mount["hostPath"] for mount in GENERATED["containerEdits"]["mounts"]),
            f"{LIBRARY_DIR}/libcuda.so.535.54.03", f"{LIBRARY_DIR}/libssl.so.3", "/usr/bin/python3",
            "/lib/firmware/nvidia/535.54.03/gsp_tu10x.bin")
    hook_binary(root, "/usr/bin/nvidia-cdi-hook", "chmod", "create-symlinks", "enable-cuda-compat", "update-ldcache")
    for library in ("libcuda.so.1", "libnvidia-ml.so.1", "libnvidia-allocator.so.1"):
        (root / LIBRARY_DIR.lstrip("/") / library).symlink_to(library.replace(".so.1", f".so.{VERSION}"))
    return root


def under(root: Path, edits: dict[str, Any]) -> dict[str, Any]:
    """The captured edits as nvidia-ctk writes them for a driver installed below `root`: host paths
    (mounts' and hooks') below it, paths in the container as they are."""
    edits = copy.deepcopy(edits)
    for mount in edits["mounts"]:
        mount["hostPath"] = str(root / mount["hostPath"].lstrip("/"))
    for hook in edits["hooks"]:
        hook["path"] = str(root / hook["path"].lstrip("/"))
    return edits


def comparable(edits: dict[str, Any]) -> dict[str, Any]:
    """Edits in an order of their own: nvidia-ctk orders mounts and hooks by how it found them."""
    return edits | {"mounts": sorted(edits["mounts"], key=lambda mount: mount["containerPath"]),
                    "hooks": sorted(edits["hooks"], key=lambda hook: hook["args"])}


def fake_nvidia_ctk(directory: Path, printed: dict[str, Any] | None, exit_code: int = 0) -> Path:
    """An `nvidia-ctk` that records its arguments (one call a line, in calls.txt) and prints
    `printed` as JSON, as `cdi generate --format=json` does, or fails with `exit_code`."""
    directory.mkdir(parents=True, exist_ok=True)
    output = directory / "generated.json"
    output.write_text(json.dumps(printed))
    script = directory / "nvidia-ctk"
    answer = f"cat {output}\n" if exit_code == 0 else f"echo 'ERROR: failed to initialize NVML' >&2\nexit {exit_code}\n"
    script.write_text(f'#!/bin/sh\necho "$@" >> {directory}/calls.txt\n{answer}')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def calls(directory: Path) -> list[str]:
    return (directory / "calls.txt").read_text().splitlines()


def test_discovery_finds_what_nvidia_ctk_generates_on_the_same_installation(tmp_path: Path) -> None:
    root = t4_root(tmp_path / "root")
    edits = DriverFiles(root=root, nvidia_ctk=None).common_edits(t4_inventory()).container_edits
    assert comparable(edits) == comparable(under(root, GENERATED["containerEdits"]))


def test_a_spec_with_discovered_files_is_valid_and_carries_nodes_mounts_and_hooks(tmp_path: Path) -> None:
    root = t4_root(tmp_path / "root")
    inventory = t4_inventory()
    spec = build_spec({"generation": 3, "devices": [booking("gpu", gpu_uuid(NODE, 0), "r-1")]}, inventory,
                      DriverFiles(root=root, nvidia_ctk=None).common_edits(inventory))
    assert spec.document is not None
    write_spec(spec, tmp_path / "cdi" / "better-compute.yaml")
    document = written(tmp_path / "cdi" / "better-compute.yaml")
    common = document["containerEdits"]
    assert [node["path"] for node in common["deviceNodes"]] == SHARED_NODES
    assert f"{LIBRARY_DIR}/libcuda.so.{VERSION}" in {mount["containerPath"] for mount in common["mounts"]}
    assert {hook["args"][1] for hook in common["hooks"]} == {"create-symlinks", "enable-cuda-compat", "update-ldcache"}
    assert [device["name"] for device in document["devices"]] == [gpu_uuid(NODE, 0)]  # only the booked GPU


def test_what_is_not_installed_is_left_out(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A bare installation (libraries only, no hook binary, no firmware, no daemon sockets) gives
    what it has; without a hook binary no hooks, since a hook that cannot run fails the container
    (said once, not on every rebuild of the spec)."""
    root = tmp_path / "root"
    lay_out(root, f"/usr/lib64/libcuda.so.{VERSION}", f"/usr/lib64/libnvidia-ml.so.{VERSION}")
    files = DriverFiles(root=root, nvidia_ctk=None)
    with caplog.at_level(logging.WARNING):
        edits = files.common_edits(t4_inventory()).container_edits
        assert files.common_edits(t4_inventory()).container_edits == edits
    assert caplog.text.count("the CDI spec has no hooks") == 1
    assert [mount["containerPath"] for mount in edits["mounts"]] == [f"/usr/lib64/libcuda.so.{VERSION}",
                                                                     f"/usr/lib64/libnvidia-ml.so.{VERSION}"]
    assert all(mount["options"] == ["ro", "nosuid", "nodev", "bind"] for mount in edits["mounts"])
    assert "hooks" not in edits


def test_an_older_toolkit_runs_its_hooks_through_nvidia_ctk_and_only_those_it_has(tmp_path: Path) -> None:
    """An older toolkit, without nvidia-cdi-hook, runs hooks as `nvidia-ctk hook …` and has no
    enable-cuda-compat: a hook it does not know would fail every container."""
    root = tmp_path / "root"
    lay_out(root, f"{LIBRARY_DIR}/libcuda.so.{VERSION}")
    hook_binary(root, "/usr/bin/nvidia-ctk", "chmod", "create-symlinks", "update-ldcache")
    edits = DriverFiles(root=root, nvidia_ctk=None).common_edits(t4_inventory()).container_edits
    assert {hook["path"] for hook in edits["hooks"]} == {str(root / "usr/bin/nvidia-ctk")}
    assert [hook["args"] for hook in edits["hooks"]] == [
        ["nvidia-ctk", "hook", "create-symlinks", "--link", f"libcuda.so.1::{LIBRARY_DIR}/libcuda.so"],
        ["nvidia-ctk", "hook", "update-ldcache", "--folder", LIBRARY_DIR]]


def test_a_hook_binary_that_cannot_list_its_hooks_gets_only_the_old_ones(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "root"
    lay_out(root, f"{LIBRARY_DIR}/libcuda.so.{VERSION}", "/usr/bin/nvidia-cdi-hook")  # not executable
    with caplog.at_level(logging.WARNING):
        edits = DriverFiles(root=root, nvidia_ctk=None).common_edits(t4_inventory()).container_edits
    assert [hook["args"][1] for hook in edits["hooks"]] == ["create-symlinks", "update-ldcache"]
    assert "cannot list its hooks" in caplog.text


def test_an_installed_nvidia_ctk_gives_the_edits_once_per_driver_version(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tool = tmp_path / "toolkit"
    fake_nvidia_ctk(tool, GENERATED)
    monkeypatch.setenv("PATH", f"{tool}{os.pathsep}{os.environ['PATH']}")
    files = DriverFiles()  # nvidia-ctk found on PATH, the driver below /
    inventory = t4_inventory()
    assert files.common_edits(inventory) == CommonEdits(GENERATED["containerEdits"], "0.6.0")
    assert files.common_edits(inventory) == CommonEdits(GENERATED["containerEdits"], "0.6.0")
    assert calls(tool) == ["cdi generate --format=json"]
    spec = build_spec({"generation": 1, "devices": [booking("gpu", gpu_uuid(NODE, 1), "r-1", gpu=1)]}, inventory,
                      files.common_edits(inventory))
    assert spec.document is not None
    document = check(spec.document)
    assert document["containerEdits"] == GENERATED["containerEdits"]
    assert [device["name"] for device in document["devices"]] == [gpu_uuid(NODE, 1)]  # not nvidia-ctk's "0", "all"


def test_the_spec_declares_the_cdi_version_nvidia_ctks_edits_need(tmp_path: Path) -> None:
    """A runtime refuses a spec whose content needs a newer CDI version than it declares: where
    nvidia-ctk's edits need a newer one than ours (0.6.0), the spec declares theirs; never an older one."""
    desired = {"generation": 1, "devices": [booking("gpu", gpu_uuid(NODE, 0), "r-1")]}
    for printed, declared in (("0.7.0", "0.7.0"), ("0.10.0", "0.10.0"), ("0.5.0", "0.6.0"), ("latest", "0.6.0")):
        tool = tmp_path / printed
        files = DriverFiles(root=tmp_path, nvidia_ctk=str(fake_nvidia_ctk(tool, GENERATED | {"cdiVersion": printed})))
        spec = build_spec(desired, t4_inventory(), files.common_edits(t4_inventory()))
        assert spec.document is not None
        assert check(spec.document)["cdiVersion"] == declared


def test_a_failing_nvidia_ctk_falls_back_to_discovery(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = t4_root(tmp_path / "root")
    tool = tmp_path / "toolkit"
    files = DriverFiles(root=root, nvidia_ctk=str(fake_nvidia_ctk(tool, None, exit_code=1)))
    with caplog.at_level(logging.WARNING):
        edits = files.common_edits(t4_inventory()).container_edits
    assert calls(tool) == [f"cdi generate --format=json --driver-root={root}"]
    assert "failed to initialize NVML" in caplog.text
    assert comparable(edits) == comparable(under(root, GENERATED["containerEdits"]))


def test_the_fake_driver_reads_driver_files_only_below_its_root(tmp_path: Path) -> None:
    root = t4_root(tmp_path / "root")
    without = fake.Driver(H200_INVENTORY, hostname=NODE)
    inventory = without.collect()
    assert without.common_edits(inventory) == CommonEdits({
        "deviceNodes": [{"path": node} for node in inventory["shared_device_nodes"]]})
    rooted = fake.Driver(H200_INVENTORY, hostname=NODE, root=str(root))
    edits = rooted.common_edits(inventory | {"driver": {"version": VERSION}}).container_edits
    assert {mount["hostPath"] for mount in edits["mounts"]} == {
        mount["hostPath"] for mount in under(root, GENERATED["containerEdits"])["mounts"]}


def spec_file(path: Path, kind: str, *names: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {"cdiVersion": "0.6.0", "kind": kind,
                "devices": [{"name": name, "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}}
                            for name in names]}
    path.write_text(json.dumps(document) if path.suffix == ".json" else yaml.safe_dump(document))


def test_other_specs_declaring_our_devices_are_named(tmp_path: Path) -> None:
    etc, run = tmp_path / "etc" / "cdi", tmp_path / "var" / "run" / "cdi"
    ours = etc / "better-compute.yaml"
    inventory = h200_inventory(NODE, 2)
    gpu0, gpu1 = gpu_uuid(NODE, 0), gpu_uuid(NODE, 1)
    spec_file(ours, "nvidia.com/gpu", gpu0)
    spec_file(etc / "nvidia.yaml", "nvidia.com/gpu", "0", gpu0, "all")  # nvidia-ctk's own spec
    spec_file(run / "stale.json", "nvidia.com/gpu", gpu1, "GPU-of-another-node")
    spec_file(run / "net.yaml", "example.com/net", gpu0)  # another kind: another device
    (run / "broken.yaml").write_text("kind: [")
    (run / "notes.txt").write_text(gpu0)
    warnings = other_specs(ours, names_of(inventory), (etc, run))
    assert warnings == [
        f"{etc / 'nvidia.yaml'} also declares nvidia.com/gpu={gpu0}: both specs are in one directory, "
        "so the runtime refuses the device",
        f"{run / 'stale.json'} also declares nvidia.com/gpu={gpu1}: {run} overrides the entries of lower-priority "
        "directories, so the runtime silently uses its device, not ours",
    ]


def test_mig_devices_are_checked_by_the_names_we_write(tmp_path: Path) -> None:
    etc, run = tmp_path / "etc", tmp_path / "run"
    inventory = h200_inventory(NODE, 1)
    legacy = f"MIG-GPU-{gpu_uuid(NODE, 0)[4:]}/3/0"
    inventory["devices"][0]["mig"] = inventory["devices"][0]["mig"] | {"instances": [
        {"profile": "3g.71gb", "placement": 0, "gi": 3, "ci": 0, "uuid": legacy, "device_nodes": []}]}
    written_as = f"MIG-GPU-{gpu_uuid(NODE, 0)[4:]}-gi3-ci0"
    spec_file(etc / "nvidia.yaml", "nvidia.com/gpu", written_as)
    assert other_specs(run / "ours.yaml", names_of(inventory), (etc, run)) == [
        f"{etc / 'nvidia.yaml'} also declares nvidia.com/gpu={written_as}: ours overrides it (a higher-priority "
        "directory); remove it to avoid confusion"]


def test_a_spec_outside_the_cdi_directories_is_named_as_such(tmp_path: Path) -> None:
    etc = tmp_path / "etc"
    spec_file(etc / "nvidia.yaml", "nvidia.com/gpu", gpu_uuid(NODE, 0))
    assert other_specs(tmp_path / "elsewhere" / "ours.yaml", names_of(h200_inventory(NODE, 1)), (etc,)) == [
        f"{etc / 'nvidia.yaml'} also declares nvidia.com/gpu={gpu_uuid(NODE, 0)}: ours is outside these directories, "
        "so a runtime reading them uses that file's device"]


def test_an_inventory_without_a_driver_version_is_an_inventory_error(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match="names no driver version"):
        DriverFiles(root=tmp_path, nvidia_ctk=None).common_edits(t4_inventory() | {"driver": {"name": "nvidia"}})

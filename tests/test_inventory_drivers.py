"""The inventory drivers (better_compute.daemon.drivers) on real captures.

The nvidia-smi driver runs its commands through an injected runner that answers from the captured
transcripts (tests/fixtures/nvidia-h200/*.txt, *.xml: `$ command`, its output, `[exit N]`), and
reads the host from a directory laid out like the captured machine's /dev and /proc. The NVML
mapping reads the recorded NVML dump. Both must give the hand-checked document of that machine
(tests/fixtures/nvidia-h200/inventory.json), and so each other's.
"""

from __future__ import annotations

import ctypes.util
import json
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from better_compute.daemon import app
from better_compute.daemon.drivers import InventoryDriver, InventoryError, driver, fake, nvidia_smi, nvml
from better_compute.daemon.drivers.document import MigProfile, Process
from better_compute.daemon.drivers.host import Host, run_command
from better_compute.daemon.drivers.nvidia_smi import (QueriedGpu, Topology, mig_instances, parse_gpu_instances,
                                                      parse_mig_profiles, parse_mig_uuids, parse_query_xml,
                                                      parse_topology)
from fleet import gpu_uuid, h200_inventory

FIXTURES = Path(__file__).parent / "fixtures"
H200 = FIXTURES / "nvidia-h200"
PUBLIC = FIXTURES / "public"
H200_TRANSCRIPTS = ("nvidia-smi-q.xml", "nvidia-smi-mig.txt", "nvidia-smi-topo.txt", "nvidia-smi-L.txt")


def transcript(path: Path) -> dict[str, tuple[int, str]]:
    """A capture transcript: each `$ command` -> (exit status, what it printed)."""
    commands: dict[str, tuple[int, str]] = {}
    command, output = None, []
    for line in path.read_text().splitlines():
        if line.startswith("$ ") and command is None:
            command, output = line[2:], []
        elif (ended := re.fullmatch(r"\[exit (\d+)\]", line)) and command is not None:
            commands[command] = (int(ended[1]), "".join(f"{printed}\n" for printed in output))
            command = None
        elif command is not None:
            output.append(line)
    return commands


class Transcripts:
    """A Host.run that answers each command as the captured machine did, and remembers what it ran."""

    def __init__(self, *paths: Path) -> None:
        self.answers = {command: answer for path in paths for command, answer in transcript(path).items()}
        self.ran: list[str] = []

    def __call__(self, argv: Sequence[str]) -> str:
        command = " ".join(argv)
        self.ran.append(command)
        status, output = self.answers[command]
        if status != 0:
            raise InventoryError(f"{command} exited {status}: {output}")
        return output


def output(path: Path, command: str) -> str:
    return transcript(path)[command][1]


@pytest.fixture
def h200_root(tmp_path: Path) -> Path:
    """A root laid out like the captured H200's: its /dev/nvidia* nodes (as empty files: the driver
    only checks they exist) and the hostname and boot id that inventory.json records."""
    recorded = json.loads((H200 / "inventory.json").read_text())
    for line in (H200 / "devnodes.txt").read_text().splitlines():
        if line.startswith("c") and (node := line.split()[-1]).startswith("/dev/"):
            (tmp_path / node.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / node.lstrip("/")).touch()
    (tmp_path / "proc/sys/kernel/random").mkdir(parents=True)
    (tmp_path / "proc/sys/kernel/hostname").write_text(recorded["hostname"] + "\n")
    (tmp_path / "proc/sys/kernel/random/boot_id").write_text(recorded["boot_id"] + "\n")
    return tmp_path


@pytest.fixture
def h200_host(h200_root: Path) -> Host:
    return Host(root=h200_root, run=Transcripts(*(H200 / name for name in H200_TRANSCRIPTS)))


def h200_nvml_snapshot() -> dict[str, Any]:
    """nvml.json as recorded, completed with what its dumper did not ask NVML for: each profile's
    name (nvmlDeviceGetGpuInstanceProfileInfo v2) and possible placements, the volatile ECC total,
    the memory affinity (topo -m's NUMA Affinity) and the MIG devices (none: MIG is disabled).
    These are taken from the nvidia-smi captures of the
    same GPU, which print what NVML answers to those calls; so for these fields the comparison with
    nvidia-smi below checks the join by profile id and the mapping, not NVML's own values."""
    dump = json.loads((H200 / "nvml.json").read_text())
    mig = H200 / "nvidia-smi-mig.txt"
    captured = {profile.id: profile
                for profile in parse_mig_profiles(output(mig, "nvidia-smi mig -lgip"),
                                                  output(mig, "nvidia-smi mig -lgipp"))[0]}
    (gpu,) = dump["gpus"]
    for profile in gpu["gpu_instance_profiles"]:
        if not nvml.failed(profile):
            same = captured[profile["id"]]
            profile |= {"name": f"MIG {same.name}", "placements": [[start, same.slices] for start in same.placements]}
    gpu["ecc_uncorrected"] = parse_query_xml(output(H200 / "nvidia-smi-q.xml", "nvidia-smi -q -x")).gpus[0].ecc_uncorrected
    gpu["mig_devices"] = []
    (topology,) = parse_topology(output(H200 / "nvidia-smi-topo.txt", "nvidia-smi topo -m")).values()
    gpu["memory_affinity"] = [topology.numa_node]
    return dump


@pytest.fixture
def h200_documents(h200_host: Host) -> dict[str, dict[str, Any]]:
    """The H200's inventory as each driver reads it, and as recorded by hand."""
    return {"nvidia-smi": nvidia_smi.Driver(h200_host).collect(),
            "nvml": nvml.document_from_snapshot(h200_nvml_snapshot(), h200_host),
            "recorded": json.loads((H200 / "inventory.json").read_text())}


def test_both_drivers_read_the_h200_as_recorded(h200_documents: dict[str, dict[str, Any]]) -> None:
    """Acceptance: the parsers of both GPU drivers produce the same inventory document from the H200
    captures, and it is the hand-checked one, field for field (boot id and hostname come from the
    host in both drivers; every other field from nvidia-smi's output or NVML's values)."""
    assert h200_documents["nvidia-smi"] == h200_documents["nvml"]
    assert h200_documents["nvidia-smi"] == h200_documents["recorded"]


@pytest.mark.parametrize("source", ["nvidia-smi", "nvml"])
def test_h200_identity_memory_and_mig_placements(h200_documents: dict[str, dict[str, Any]], source: str) -> None:
    (gpu,) = h200_documents[source]["devices"]
    assert (gpu["uuid"], gpu["pci_bus_id"], gpu["memory_mib"]) == (
        "GPU-fa1e3565-6f0b-4506-b6d4-3b9b3e1f32a9", "00000000:00:06.0", 143771)
    profiles = {profile["name"]: profile for profile in gpu["mig"]["profiles"]}
    # Memory slices (of 8), not NVML's compute slice_count (3 for 3g, 7 for 7g).
    assert profiles["3g.71gb"] == {"name": "3g.71gb", "id": 9, "slices": 4, "memory_mib": 71424, "sm": 60,
                                 "placements": [0, 4]}
    assert (profiles["7g.141gb"]["slices"], profiles["7g.141gb"]["placements"]) == (8, [0])
    assert profiles["1g.18gb+me"]["placements"] == [0, 1, 2, 3, 4, 5, 6]  # 7 placements, 1 instance at a time
    assert h200_documents[source]["driver"] == {"name": "nvidia", "version": "580.159.04", "cuda": "13.0"}


def test_nvidia_smi_runs_only_read_only_queries(h200_host: Host) -> None:
    nvidia_smi.Driver(h200_host).collect()
    assert h200_host.run.ran == ["nvidia-smi -q -x", "nvidia-smi topo -m", "nvidia-smi mig -lgip",
                                 "nvidia-smi mig -lgipp"]  # MIG disabled: no -lgi, no -L


def test_query_xml_of_a_mig_enabled_a100() -> None:
    query = parse_query_xml((PUBLIC / "nvidia-smi/a100-sxm4-80gb-mig-nvidia-smi-q-x.xml").read_text())
    assert (query.driver_version, query.cuda_version) == ("535.54.03", "12.2")
    (gpu,) = query.gpus
    assert gpu == QueriedGpu(uuid="GPU-513536b6-7d19-9063-b049-1e69664bb298", index=0, pci_bus_id="00000000:01:00.0",
                             model="NVIDIA A100-SXM4-80GB", memory_mib=81920, minor=1, mig_supported=True,
                             mig_enabled=True, mig_devices=((0, 3, 0), (1, 4, 0), (2, 5, 0), (3, 6, 0)),
                             ecc_uncorrected=0, processes=())


def test_query_xml_of_two_workstation_gpus_with_processes() -> None:
    """Two GPUs whose minor numbers run against their index: a device node follows the minor."""
    query = parse_query_xml((PUBLIC / "nvidia-smi/dual-rtx-a5000-nvidia-smi-q-x.xml").read_text())
    assert [(gpu.index, gpu.pci_bus_id, gpu.minor, gpu.memory_mib, gpu.mig_supported) for gpu in query.gpus] == [
        (0, "00000000:81:00.0", 1, 24564, False), (1, "00000000:C1:00.0", 0, 24564, False)]
    assert [process for gpu in query.gpus for process in gpu.processes] == [
        Process(pid=100477, gpu_uuid="GPU-12345678-aaaa-bbbb-cccc-0123456789ab", used_memory_mib=22430, gi=None, ci=None),
        Process(pid=100477, gpu_uuid="GPU-12345678-aaaa-bbbb-cccc-0123456789cd", used_memory_mib=17246, gi=None, ci=None)]
    assert Host.gpu_device_nodes(query.gpus[0].minor) == ["/dev/nvidia1"]


def test_nvidia_smi_processes() -> None:
    host = Host(run=lambda argv: (PUBLIC / "nvidia-smi/dual-rtx-a5000-nvidia-smi-q-x.xml").read_text())
    assert nvidia_smi.Driver(host).processes() == [
        {"pid": 100477, "gpu_uuid": "GPU-12345678-aaaa-bbbb-cccc-0123456789ab", "used_memory_mib": 22430,
         "gi": None, "ci": None},
        {"pid": 100477, "gpu_uuid": "GPU-12345678-aaaa-bbbb-cccc-0123456789cd", "used_memory_mib": 17246,
         "gi": None, "ci": None}]


def test_topology_of_nvlink_machines() -> None:
    dgx = parse_topology((PUBLIC / "topo/dgx-a100-8gpu-topo-m.txt").read_text())
    assert sorted(dgx) == list(range(8))
    assert dgx[3] == Topology(nvlink_peers=(0, 1, 2, 4, 5, 6, 7), numa_node=1)  # NICs are not peers
    pasted = parse_topology((PUBLIC / "topo/h100-8gpu-topo-m-spaces.txt").read_text())
    assert pasted[7] == Topology(nvlink_peers=(0, 1, 2, 3, 4, 5, 6), numa_node=1)


def test_numa_node_from_numa_affinity_where_the_gpu_numa_id_is_not_available() -> None:
    """Older drivers print no GPU NUMA ID column, newer ones print N/A in it on every machine whose
    GPU memory is not a NUMA node of its own: the node the GPU is attached to is NUMA Affinity."""
    dgx = parse_topology((PUBLIC / "topo/dgx-a100-8gpu-topo-m.txt").read_text())
    assert [dgx[gpu].numa_node for gpu in range(8)] == [3, 3, 1, 1, 7, 7, 5, 5]
    pasted = parse_topology((PUBLIC / "topo/h100-8gpu-topo-m-spaces.txt").read_text())
    assert [pasted[gpu].numa_node for gpu in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    # The H200's row has one cell more than its header; its GPU NUMA ID is N/A, its NUMA Affinity 0.
    assert parse_topology(output(H200 / "nvidia-smi-topo.txt", "nvidia-smi topo -m")) == {
        0: Topology(nvlink_peers=(), numa_node=0)}
    # A GPU NUMA ID, where there is one, is the GPU's own memory node (Grace Hopper): it wins.
    own = "\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \t0-71\t0\t\t4\n"
    assert parse_topology(own) == {0: Topology(nvlink_peers=(), numa_node=4)}
    several = "\tGPU0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \t0-71\t0-1\n"
    assert parse_topology(several) == {0: Topology(nvlink_peers=(), numa_node=None)}


def test_mig_profiles_need_a_placement_line() -> None:
    mig = H200 / "nvidia-smi-mig.txt"
    lgipp = "".join(line for line in output(mig, "nvidia-smi mig -lgipp").splitlines(keepends=True)
                    if "Profile ID  9 " not in line)
    profiles = parse_mig_profiles(output(mig, "nvidia-smi mig -lgip"), lgipp)[0]
    assert 9 not in {profile.id for profile in profiles} and len(profiles) == 6


def test_gpu_instances_and_mig_uuids() -> None:
    placed = parse_gpu_instances((PUBLIC / "mig/a100-40gb-7x1g.5gb-mig-lgi.txt").read_text())
    assert placed == {(0, gi): ("1g.5gb", gi - 7) for gi in range(7, 14)}
    mixed = parse_mig_uuids((PUBLIC / "mig/h100-80gb-mixed-nvidia-smi-L.txt").read_text())  # CRLF
    assert mixed == {(0, 0): "MIG-7089d0f3-293f-58c9-8f8c-5ea666eedbde",
                     (0, 1): "MIG-56c30729-347f-5dd6-8da0-c3cc59e969e0",
                     (0, 2): "MIG-9d14fb21-4ae1-546f-a636-011582899c39",
                     (0, 3): "MIG-0f709664-740c-52b0-ae79-3e4c9ede6d3b"}
    one = parse_mig_uuids((PUBLIC / "mig/a100-sxm4-80gb-8gpu-nvidia-smi-L-one-mig.txt").read_text())
    assert one == {(0, 0): "MIG-fca28630-a1bd-5e73-9206-ccd17a013f5f"}


# nvidia-smi -L of drivers before R470 names MIG devices by a legacy UUID, MIG-GPU-<gpu uuid>/<gi>/<ci>,
# and the oldest print no profile name (`MIG Device 0:`). No public capture of either was found: the
# lines below are written in the format the MIG user guide documents, for the GPU of the public
# A100-40GB `mig -lgi` capture (GI 7-13, 1g.5gb at placements 0-6).
A100_40GB = "GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f"
LEGACY_L = (f"GPU 0: A100-SXM4-40GB (UUID: {A100_40GB})\n"
            + "".join(f"  MIG 1g.5gb Device {device}: (UUID: MIG-{A100_40GB}/{device + 7}/0)\n" for device in range(7)))
NAMELESS_L = (f"GPU 0: A100-SXM4-40GB (UUID: {A100_40GB})\n"
              + "".join(f"  MIG Device {device}: (UUID: MIG-{A100_40GB}/{device + 7}/0)\n" for device in range(7)))


def a100_40gb_with_seven_instances() -> QueriedGpu:
    return QueriedGpu(uuid=A100_40GB, index=0, pci_bus_id="00000000:07:00.0", model="A100-SXM4-40GB",
                      memory_mib=40536, minor=0, mig_supported=True, mig_enabled=True,
                      # -q -x lists MIG devices in its own order: here not that of -L.
                      mig_devices=tuple((device, 13 - device, 0) for device in range(7)), ecc_uncorrected=0,
                      processes=())


def test_legacy_mig_uuids_are_parsed_into_gpu_gi_and_ci() -> None:
    assert nvidia_smi.legacy_mig_uuid(f"MIG-{A100_40GB}/7/0") == (A100_40GB, 7, 0)
    assert nvidia_smi.legacy_mig_uuid("MIG-7089d0f3-293f-58c9-8f8c-5ea666eedbde") is None
    placed = parse_gpu_instances((PUBLIC / "mig/a100-40gb-7x1g.5gb-mig-lgi.txt").read_text())
    instances = mig_instances(a100_40gb_with_seven_instances(), placed, parse_mig_uuids(LEGACY_L))
    # Each legacy UUID goes to the instance it names (GI, CI), whatever the device indexes say.
    assert {(instance.gi, instance.ci, instance.placement, instance.uuid) for instance in instances} == {
        (gi, 0, gi - 7, f"MIG-{A100_40GB}/{gi}/0") for gi in range(7, 14)}


def test_mig_devices_listed_without_a_profile_name_take_it_from_the_gpu_instances() -> None:
    """`MIG Device 0:` (no profile) is not a race: the profile comes from -lgi."""
    assert parse_mig_uuids(NAMELESS_L) == parse_mig_uuids(LEGACY_L)
    placed = parse_gpu_instances((PUBLIC / "mig/a100-40gb-7x1g.5gb-mig-lgi.txt").read_text())
    instances = mig_instances(a100_40gb_with_seven_instances(), placed, parse_mig_uuids(NAMELESS_L))
    assert {instance.profile for instance in instances} == {"1g.5gb"} and len(instances) == 7


def test_an_unreadable_mig_listing_is_said_plainly_not_as_a_race() -> None:
    placed = parse_gpu_instances((PUBLIC / "mig/a100-40gb-7x1g.5gb-mig-lgi.txt").read_text())
    unreadable = f"GPU 0: A100-SXM4-40GB (UUID: {A100_40GB})\n  MIG Gerät 0: (Kennung: MIG-x)\n"
    with pytest.raises(InventoryError, match="nvidia-smi -L names no MIG device of GPU 0") as raised:
        mig_instances(a100_40gb_with_seven_instances(), placed, parse_mig_uuids(unreadable))
    assert "changed while" not in str(raised.value)
    with pytest.raises(InventoryError, match="nvidia-smi mig -lgi lists no GPU instance of GPU 0"):
        mig_instances(a100_40gb_with_seven_instances(), {}, parse_mig_uuids(LEGACY_L))


def test_mig_memory_is_the_profiles_real_size_not_the_rounded_gib() -> None:
    """-lgip prints GiB with two decimals: the A100-40GB's 3g.20gb (20096 MiB, NVML's memorySizeMB)
    prints as 19.62, which times 1024 is 20090.88. The row is written in -lgip's format."""
    lgip = "|   0  MIG 3g.20gb        9     2/2        19.62      No     42     2     0   |\n"
    lgipp = "GPU  0 Profile ID  9 Placements: {0,4}:4\n"
    (profile,) = parse_mig_profiles(lgip, lgipp)[0]
    assert profile.memory_mib == 20096
    # Where two decimals are exact, they stay exact (the captured H200 and A100-80GB).
    mig = H200 / "nvidia-smi-mig.txt"
    h200 = parse_mig_profiles(output(mig, "nvidia-smi mig -lgip"), output(mig, "nvidia-smi mig -lgipp"))[0]
    assert {profile.name: profile.memory_mib for profile in h200} == {
        "1g.18gb": 16384, "1g.18gb+me": 16384, "1g.35gb": 33280, "2g.35gb": 33280, "3g.71gb": 71424,
        "4g.71gb": 71424, "7g.141gb": 143360}
    assert [nvidia_smi.gib_to_mib(gib) for gib in ("9.50", "19.50", "39.50", "79.25", "4.75")] == [
        9728, 19968, 40448, 81152, 4864]


def test_mig_instances_join_the_three_outputs() -> None:
    """No public capture has -q -x, -lgi and -L of one MIG-enabled machine. The GPU here is the real
    A100 capture (four MIG devices: GI 3-6, CI 0, 14 SMs and 19968 MiB each, i.e. 1g.20gb); the
    placements and UUIDs are written in the shape the parsers above return for real captures."""
    (gpu,) = parse_query_xml((PUBLIC / "nvidia-smi/a100-sxm4-80gb-mig-nvidia-smi-q-x.xml").read_text()).gpus
    placed = {(0, gi): ("1g.20gb", placement) for gi, placement in ((3, 0), (4, 2), (5, 4), (6, 6))}
    uuids = {(0, device): f"MIG-00000000-0000-0000-0000-00000000000{device}" for device in range(4)}
    instances = mig_instances(gpu, placed, uuids)
    assert [(instance.gi, instance.ci, instance.placement, instance.uuid) for instance in instances] == [
        (3, 0, 0, uuids[0, 0]), (4, 0, 2, uuids[0, 1]), (5, 0, 4, uuids[0, 2]), (6, 0, 6, uuids[0, 3])]
    with pytest.raises(InventoryError, match="changed while nvidia-smi was read"):
        mig_instances(gpu, placed, {key: value for key, value in uuids.items() if key != (0, 3)})


def test_mig_device_nodes_come_from_the_driver_capabilities(tmp_path: Path) -> None:
    """The format is the driver's (DeviceFileMinor/Mode/Modify lines); no capture of a MIG-enabled
    /proc was available, so the files are written here."""
    for capability, minor in (("gi2/access", 21), ("gi2/ci0/access", 22)):
        path = tmp_path / "proc/driver/nvidia/capabilities/gpu0/mig" / capability
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"DeviceFileMinor: {minor}\nDeviceFileMode: 292\nDeviceFileModify: 1\n")
    host = Host(root=tmp_path)
    assert host.mig_device_nodes(0, 2, 0) == ["/dev/nvidia-caps/nvidia-cap21", "/dev/nvidia-caps/nvidia-cap22"]
    assert host.mig_device_nodes(0, 3, 0) == []  # no such instance: nothing to hand out
    assert host.mig_device_nodes(None, 2, 0) == []


def test_profiles_are_listed_smallest_first() -> None:
    """NVML lists profiles by its profile constant (19, 14, 9, 5, 0, 20, 15 on the H200); the document
    lists them as nvidia-smi does, whichever driver read them."""
    dump_order = [profile["id"] for profile in h200_nvml_snapshot()["gpus"][0]["gpu_instance_profiles"]
                  if not nvml.failed(profile)]
    assert dump_order == [19, 14, 9, 5, 0, 20, 15]
    recorded = json.loads((H200 / "inventory.json").read_text())["devices"][0]["mig"]["profiles"]
    profiles = [MigProfile(**profile | {"placements": tuple(profile["placements"])}) for profile in recorded]
    assert sorted(profiles, key=MigProfile.order) == profiles


@pytest.mark.parametrize("own, attached, numa", [
    ({"error": "NVMLError_NotSupported", "msg": "Not Supported"}, [1], 1),  # a PCIe GPU: the node it is attached to
    (4, [0], 4),  # Grace Hopper: the GPU's memory is a node of its own
    (-1, [0, 1], None),  # attached to two nodes: none of them
    ({"error": "NVMLError_NotSupported", "msg": "Not Supported"},
     {"error": "NVMLError_NotSupported", "msg": "Not Supported"}, None),
])
def test_nvml_numa_node_falls_back_to_the_memory_affinity(own: Any, attached: Any, numa: int | None) -> None:
    assert nvml.numa_node({"numa_node": own, "memory_affinity": attached}) == numa


def test_cuda_version() -> None:
    assert [nvml.cuda_version(version) for version in (13000, 12020, 11080)] == ["13.0", "12.2", "11.8"]


@pytest.mark.skipif(ctypes.util.find_library("nvidia-ml") is not None, reason="this machine has NVML")
def test_nvml_without_a_gpu_driver_is_an_inventory_error() -> None:
    with pytest.raises(InventoryError):
        driver("nvml").collect()


def test_live_nvml_layer_calls_only_what_nvidia_ml_py_has() -> None:
    """The live layer cannot run here; at least every NVML name it uses must exist in the binding."""
    pynvml = pytest.importorskip("pynvml")
    used = set(re.findall(r"\bnvml\.((?:c_)?(?:nvml|NVML)\w+)", Path(nvml.__file__).read_text()))
    assert used and {name for name in used if not hasattr(pynvml, name)} == set()
    # What changes a GPU: only the MIG calls (issue 13), and only in NvmlMig, which daemon/mig.py drives.
    changing = {name for name in used if re.search(r"^nvml(Device|GpuInstance)(Set|Create)|Destroy$", name)}
    assert changing == {"nvmlDeviceSetMigMode", "nvmlDeviceCreateGpuInstanceWithPlacement",
                        "nvmlGpuInstanceCreateComputeInstance", "nvmlComputeInstanceDestroy", "nvmlGpuInstanceDestroy"}
    source = Path(nvml.__file__).read_text()
    mig_class = source[source.index("class NvmlMig"):source.index("\ndef ", source.index("class NvmlMig"))]
    assert all(source.count(f"nvml.{name}(") == mig_class.count(f"nvml.{name}(") for name in changing)


def test_fake_driver_makes_distinct_nodes_of_one_recording(tmp_path: Path) -> None:
    recording = tmp_path / "inventory.json"
    recording.write_text(json.dumps(h200_inventory("recorded", 2, nvlink=True)))
    nodes = {hostname: driver("fake", path=recording, hostname=hostname).collect() for hostname in ("a", "b", "c")}
    for hostname, document in nodes.items():
        assert document["hostname"] == hostname
        assert [device["uuid"] for device in document["devices"]] == [gpu_uuid(hostname, 0), gpu_uuid(hostname, 1)]
        assert document["devices"][0]["nvlink_peers"] == [gpu_uuid(hostname, 1)]
    assert len({device["uuid"] for document in nodes.values() for device in document["devices"]}) == 6
    assert driver("fake", path=recording).collect() == json.loads(recording.read_text())


def test_fake_driver_records_reboots_and_serves_processes() -> None:
    processes = [{"pid": 7, "gpu_uuid": gpu_uuid("n", 0), "used_memory_mib": 10, "gi": None, "ci": None}]
    node = fake.Driver(H200 / "inventory.json", hostname="n", processes=processes)
    assert isinstance(node, InventoryDriver)
    before = node.collect()["boot_id"]
    node.reboot()
    assert node.reboots == 1 and node.collect()["boot_id"] != before
    assert node.processes() == processes


def test_fake_driver_renames_mig_instances() -> None:
    recorded = json.loads((H200 / "inventory.json").read_text())
    recorded["devices"][0]["mig"]["instances"] = [{"profile": "3g.71gb", "placement": 4, "gi": 2, "ci": 0,
                                                   "uuid": "MIG-recorded"}]
    (a,), (b,) = (fake.as_host(recorded, hostname)["devices"][0]["mig"]["instances"] for hostname in ("a", "b"))
    assert a["uuid"].startswith("MIG-") and a["uuid"] != b["uuid"] and a["placement"] == 4


def test_real_drivers_reboot_through_systemd(h200_root: Path) -> None:
    ran: list[list[str]] = []
    host = Host(root=h200_root, run=lambda argv: ran.append(list(argv)) or "")
    nvidia_smi.Driver(host).reboot()
    nvml.Driver(host).reboot()
    assert ran == [["systemctl", "reboot"]] * 2


def test_unknown_driver() -> None:
    with pytest.raises(ValueError, match="nvidia-smi, nvml, fake"):
        driver("rocm")


def test_run_command_reports_failures() -> None:
    assert run_command(["sh", "-c", "echo hi"]) == "hi\n"
    with pytest.raises(InventoryError, match="exited 3: no GPU"):
        run_command(["sh", "-c", "echo no GPU >&2; exit 3"])
    with pytest.raises(InventoryError, match="No such file"):
        run_command(["/nonexistent/nvidia-smi", "-q", "-x"])
    with pytest.raises(InventoryError, match="timed out"):
        run_command(["sleep", "5"], timeout=0.1)


def test_bcd_inventory_and_version() -> None:
    runner = CliRunner()
    shown = runner.invoke(app, ["inventory", "--driver", "fake", "--option", f"path={H200 / 'inventory.json'}",
                                "--option", "hostname=node-9"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output)["devices"][0]["uuid"] == gpu_uuid("node-9", 0)
    assert runner.invoke(app, ["inventory", "--driver", "fake", "--option", "colour=blue"]).exit_code == 2
    assert runner.invoke(app, ["version"]).output.startswith("bcd ")


def test_nvml_binding_is_imported_only_when_nvml_is_used() -> None:
    """CI machines have no GPU: loading the daemon and every driver module must not load pynvml."""
    check = ("import sys, better_compute.daemon, better_compute.daemon.drivers.nvml, "
             "better_compute.daemon.drivers.nvidia_smi, better_compute.daemon.drivers.fake; "
             "sys.exit('pynvml' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", check], check=False).returncode == 0

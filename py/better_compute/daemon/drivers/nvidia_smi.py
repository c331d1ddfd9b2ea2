"""The nvidia-smi driver: the inventory from the output of `nvidia-smi`, read-only queries only.

`-q -x` (XML) gives each GPU's identity, memory, MIG mode, MIG devices, ECC counters and processes;
`topo -m` its NVLink peers and NUMA node; `mig -lgip` the MIG profiles (name, id, memory, SMs) and
`mig -lgipp` their legal placements in memory slices. Where MIG is enabled, `mig -lgi` places each
GPU instance and `-L` names each MIG device's UUID. Each output has a pure parser below, tested on
real captures; the driver only runs the commands (through Host.run) and joins what they say.
Telemetry readings come from one `--query-gpu` CSV (whole GPUs only: it has no MIG rows).

MIG changes (issue 13, daemon/mig.py converges with them): `-i GPU -mig 1|0`, `mig -i GPU -cgi
PROFILE:PLACEMENT -C` (the GPU instance with its compute instance), `mig -i GPU -gi N -ci M -dci`,
`mig -i GPU -gi N -dgi`, and `--gpu-reset -i GPU` for a MIG mode pending a reset; the state is read
back with `--query-gpu=mig.mode.current,mig.mode.pending`, `mig -lgi` and `mig -lci`. A refusal is a
MigError whose reason comes from nvidia-smi's words (In use by another client: InUse, ...).
"""

from __future__ import annotations

import csv
import dataclasses
import re
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from typing import Any

from better_compute.daemon.drivers import InventoryError, Reading
from better_compute.daemon.drivers.document import (Gpu, MigInstance, MigProfile, Process, inventory_document,
                                                    without_mig_prefix)
from better_compute.daemon.cdi import CommonEdits
from better_compute.daemon.driverfiles import DriverFiles
from better_compute.daemon.drivers.host import Host
from better_compute.daemon.mig import DISABLED, ENABLED, GpuInstance, MigError, MigState


@dataclass(frozen=True)
class QueriedGpu:
    """One <gpu> of `nvidia-smi -q -x`; `index` is its position, which is nvidia-smi's index."""

    uuid: str
    index: int
    pci_bus_id: str
    model: str
    memory_mib: int
    minor: int | None
    mig_supported: bool
    mig_enabled: bool
    mig_devices: tuple[tuple[int, int, int], ...]  # (MIG device index, gi, ci)
    ecc_uncorrected: int
    processes: tuple[Process, ...]


@dataclass(frozen=True)
class Query:
    """What `nvidia-smi -q -x` says."""

    driver_version: str
    cuda_version: str
    gpus: tuple[QueriedGpu, ...]


@dataclass(frozen=True)
class Topology:
    """One GPU's row of `nvidia-smi topo -m`."""

    nvlink_peers: tuple[int, ...]  # indexes of the GPUs it reaches over NVLink
    numa_node: int | None  # "GPU NUMA ID", else "NUMA Affinity"; null where neither names one node


def _value(element: ElementTree.Element, path: str) -> str | None:
    """The text at `path`, or None where it is absent or N/A."""
    found = element.find(path)
    text = None if found is None or found.text is None else found.text.strip()
    return None if text in (None, "", "N/A") else text


def _required(element: ElementTree.Element, path: str) -> str:
    text = _value(element, path)
    if text is None:
        raise InventoryError(f"nvidia-smi -q -x: <{element.tag}> has no {path}")
    return text


def _number(element: ElementTree.Element, path: str, unit: str = "") -> int | None:
    """The number at `path` ('143771 MiB' with unit 'MiB' -> 143771), or None where absent or N/A."""
    text = _value(element, path)
    return None if text is None else int(text.removesuffix(unit))


def parse_query_xml(text: str) -> Query:
    """Parse `nvidia-smi -q -x`."""
    try:
        root = ElementTree.fromstring(text)
    except ElementTree.ParseError as error:
        raise InventoryError(f"nvidia-smi -q -x printed no XML: {error}") from error
    return Query(driver_version=_required(root, "driver_version"), cuda_version=_required(root, "cuda_version"),
                 gpus=tuple(_queried_gpu(index, gpu) for index, gpu in enumerate(root.iterfind("gpu"))))


def _queried_gpu(index: int, gpu: ElementTree.Element) -> QueriedGpu:
    uuid = _required(gpu, "uuid")
    current_mig = _value(gpu, "mig_mode/current_mig")
    return QueriedGpu(
        uuid=uuid, index=index, pci_bus_id=_required(gpu, "pci/pci_bus_id"), model=_required(gpu, "product_name"),
        memory_mib=int(_required(gpu, "fb_memory_usage/total").removesuffix("MiB")), minor=_number(gpu, "minor_number"),
        mig_supported=current_mig is not None, mig_enabled=current_mig == "Enabled",
        mig_devices=tuple((int(_required(device, "index")), int(_required(device, "gpu_instance_id")),
                           int(_required(device, "compute_instance_id")))
                          for device in gpu.iterfind("mig_devices/mig_device")),
        # Volatile counters (since the driver loaded), as NVML's total: DRAM and SRAM, whichever
        # the XML version splits them into; N/A (ECC off or absent) counts as none.
        ecc_uncorrected=sum(int(counter.text) for counter in gpu.iterfind("ecc_errors/volatile/*")
                            if "uncorrectable" in counter.tag and (counter.text or "").strip().isdigit()),
        processes=tuple(Process(pid=int(_required(process, "pid")), gpu_uuid=uuid,
                                used_memory_mib=_number(process, "used_memory", "MiB"),
                                gi=_number(process, "gpu_instance_id"), ci=_number(process, "compute_instance_id"))
                        for process in gpu.iterfind("processes/process_info")),
    )


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _cells(line: str) -> list[str]:
    """A `topo -m` line's cells: tab-separated as printed, or whitespace-separated as often pasted."""
    return [cell.strip() for cell in line.split("\t")] if "\t" in line else line.split()


def _numa(cell: str | None) -> int | None:
    """A NUMA cell naming one node ('3'); N/A, a range ('0-1') or a list name none."""
    return int(cell) if cell is not None and cell.isdigit() else None


def parse_topology(text: str) -> dict[int, Topology]:
    """Parse `nvidia-smi topo -m` into each GPU's NVLink peers (cells `NV<links>`) and NUMA node.

    The NUMA node is `GPU NUMA ID` where it names one (the GPU's memory is a node of its own, as on
    Grace Hopper), else `NUMA Affinity`, the node the GPU is attached to: `GPU NUMA ID` is N/A on
    ordinary machines, and drivers before it printed only `NUMA Affinity`. Rows can hold more cells
    than the header (nvidia-smi pads before `GPU NUMA ID`), so GPU columns are read from the left
    and the NUMA columns from the right."""
    lines = [_ANSI.sub("", line) for line in text.splitlines()]
    header = next((line for line in lines if re.search(r"\bGPU0\b", line) and not line.startswith("GPU")), None)
    if header is None:
        raise InventoryError("nvidia-smi topo -m printed no GPU header")
    columns = [int(cell[3:]) for cell in _cells(header) if re.fullmatch(r"GPU\d+", cell)]
    numa_columns = [column for column in ("NUMA Affinity", "GPU NUMA ID") if column in header]
    topology = {}
    for line in lines:
        cells = _cells(line)
        if not cells or not re.fullmatch(r"GPU\d+", cells[0]):
            continue
        links = cells[1:1 + len(columns)]
        filled = [cell for cell in cells if cell]  # the padding cells are empty
        numa = dict(zip(numa_columns, filled[len(filled) - len(numa_columns):]))
        own, affinity = _numa(numa.get("GPU NUMA ID")), _numa(numa.get("NUMA Affinity"))
        topology[int(cells[0][3:])] = Topology(
            nvlink_peers=tuple(peer for peer, link in zip(columns, links) if link.startswith("NV")),
            numa_node=own if own is not None else affinity)
    return topology


_PROFILE_ROW = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+MIG\s+(?P<name>\S+)\s+(?P<id>\d+)\s+\d+/\d+\s+(?P<gib>[\d.]+)\s+\S+\s+(?P<sm>\d+)\s")
_PLACEMENTS_ROW = re.compile(
    r"^GPU\s+(?P<gpu>\d+)\s+Profile ID\s+(?P<id>\d+)\s+Placements?\s*:\s*\{(?P<starts>[\d,]*)\}:(?P<size>\d+)")


def parse_mig_profiles(lgip: str, lgipp: str) -> dict[int, tuple[MigProfile, ...]]:
    """Each GPU's MIG profiles, by GPU index: name, id, memory and SMs from `nvidia-smi mig -lgip`,
    legal placements and their width in memory slices from `nvidia-smi mig -lgipp`. A profile
    without a placement line cannot be laid out and is left out."""
    placements = {}
    for line in lgipp.splitlines():
        if found := _PLACEMENTS_ROW.match(line.strip()):
            placements[int(found["gpu"]), int(found["id"])] = (
                tuple(int(start) for start in found["starts"].split(",") if start), int(found["size"]))
    profiles: dict[int, list[MigProfile]] = {}
    for line in lgip.splitlines():
        found = _PROFILE_ROW.match(line)
        if found is None or (int(found["gpu"]), int(found["id"])) not in placements:
            continue
        starts, size = placements[int(found["gpu"]), int(found["id"])]
        profiles.setdefault(int(found["gpu"]), []).append(MigProfile(
            name=without_mig_prefix(found["name"]), id=int(found["id"]), slices=size,
            memory_mib=gib_to_mib(found["gib"]), sm=int(found["sm"]), placements=starts))
    return {gpu: tuple(found) for gpu, found in profiles.items()}


def gib_to_mib(gib: str) -> int:
    """A profile's memory from the GiB that -lgip prints with two decimals: of the MiB counts that
    print so, the roundest (most trailing zero bits), which is NVML's size: 20096 MiB prints as
    19.62 (20090.88 MiB), 71424 as 69.75. MIG memory sizes are multiples of 128 MiB or more, and
    two decimals of a GiB (about 10 MiB wide) hold only one of those."""
    hundredths = round(float(gib) * 100)
    low, high = -(-(hundredths * 1024 - 512) // 100), (hundredths * 1024 + 512) // 100
    return max(range(low, high + 1), key=lambda mib: (mib & -mib, -abs(mib * 100 - hundredths * 1024)))


_INSTANCE_ROW = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+MIG\s+(?P<name>\S+)\s+(?P<profile>\d+)\s+(?P<gi>\d+)\s+(?P<start>\d+):(?P<size>\d+)\s*\|")


def parse_gpu_instances(text: str) -> dict[tuple[int, int], tuple[str, int]]:
    """`nvidia-smi mig -lgi`: (GPU index, GPU instance id) -> (profile name, placement start)."""
    return {(int(found["gpu"]), int(found["gi"])): (without_mig_prefix(found["name"]), int(found["start"]))
            for found in map(_INSTANCE_ROW.match, text.splitlines()) if found}


_COMPUTE_ROW = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+(?P<gi>\d+)\s+MIG\s+(?P<name>\S+)\s+(?P<profile>\d+)\s+(?P<ci>\d+)\s+(?P<start>\d+):(?P<size>\d+)\s*\|")


def parse_compute_instances(text: str) -> dict[tuple[int, int], list[int]]:
    """`nvidia-smi mig -lci`: (GPU index, GPU instance id) -> its compute instance ids."""
    found: dict[tuple[int, int], list[int]] = {}
    for row in map(_COMPUTE_ROW.match, text.splitlines()):
        if row:
            found.setdefault((int(row["gpu"]), int(row["gi"])), []).append(int(row["ci"]))
    return found


_CREATED_GI = re.compile(r"Successfully created GPU instance ID\s+(?P<gi>\d+)")
# nvidia-smi's words for the failure modes of its MIG commands -> MigError reasons.
_REFUSALS = (("In use by another client", "InUse"), ("Insufficient Resources", "InsufficientResources"),
             ("Not Found", "NotFound"), ("reset", "ResetRefused"), ("Invalid", "InvalidArgument"))


def mig_refusal(error: InventoryError) -> MigError:
    """What nvidia-smi said when it refused a MIG command, as a MigError with a reason."""
    text = str(error)
    return MigError(next((reason for words, reason in _REFUSALS if words.lower() in text.lower()), "Failed"), text)


_GPU_LINE = re.compile(r"^GPU (?P<gpu>\d+):")
# The profile name is absent from the oldest drivers' listing (`MIG Device 0: (UUID: …)`): -lgi has it.
_MIG_LINE = re.compile(r"^\s+MIG\s+(?:\S+\s+)?Device\s+(?P<device>\d+):\s+\(UUID:\s+(?P<uuid>MIG-[^)\s]+)\)")
_LEGACY_MIG_UUID = re.compile(r"MIG-(?P<gpu>GPU-[0-9A-Fa-f-]+)/(?P<gi>\d+)/(?P<ci>\d+)")


def legacy_mig_uuid(uuid: str) -> tuple[str, int, int] | None:
    """(GPU uuid, gi, ci) of a MIG UUID in the form drivers before R470 print,
    `MIG-GPU-<gpu uuid>/<gi>/<ci>`; None for any other UUID."""
    found = _LEGACY_MIG_UUID.fullmatch(uuid)
    return None if found is None else (found["gpu"], int(found["gi"]), int(found["ci"]))


def parse_mig_uuids(text: str) -> dict[tuple[int, int], str]:
    """`nvidia-smi -L`: (GPU index, MIG device index) -> MIG UUID."""
    uuids, gpu = {}, None
    for line in text.splitlines():
        if found := _GPU_LINE.match(line):
            gpu = int(found["gpu"])
        elif (found := _MIG_LINE.match(line)) and gpu is not None:
            uuids[gpu, int(found["device"])] = found["uuid"]
    return uuids


def mig_instances(gpu: QueriedGpu, placed: dict[tuple[int, int], tuple[str, int]],
                  uuids: dict[tuple[int, int], str]) -> tuple[MigInstance, ...]:
    """A GPU's MIG devices (from -q -x) with the profile and placement of their GPU instance (-lgi)
    and their UUID (-L): a legacy UUID names its own GI and CI, any other is matched by MIG device
    index. An output that names none of the GPU's MIG devices is one this driver cannot read (an
    InventoryError saying which); a device missing from a listing that names others was created or
    destroyed between the commands (an InventoryError, and the next collection reads a settled state)."""
    if not gpu.mig_devices:
        return ()
    listed = {device: uuid for (index, device), uuid in uuids.items() if index == gpu.index}
    if not listed:
        raise InventoryError(f"nvidia-smi -L names no MIG device of GPU {gpu.index}, whose -q -x lists "
                             f"{len(gpu.mig_devices)}: its lines are not in a form this driver reads")
    if not any(index == gpu.index for index, _ in placed):
        raise InventoryError(f"nvidia-smi mig -lgi lists no GPU instance of GPU {gpu.index}, whose -q -x lists "
                             f"{len(gpu.mig_devices)} MIG devices: its rows are not in a form this driver reads")
    by_instance = {(legacy[1], legacy[2]): uuid for uuid in listed.values()
                   if (legacy := legacy_mig_uuid(uuid)) is not None and legacy[0] == gpu.uuid}
    try:
        return tuple(MigInstance(profile=placed[gpu.index, gi][0], placement=placed[gpu.index, gi][1], gi=gi, ci=ci,
                                 uuid=by_instance[gi, ci] if by_instance else listed[device])
                     for device, gi, ci in gpu.mig_devices)
    except KeyError as missing:
        raise InventoryError(f"GPU {gpu.index}: MIG device {missing} changed while nvidia-smi was read") from None


# --query-gpu field -> (Reading field, factor to its unit).
SAMPLED = {"utilization.gpu": ("utilization_ratio", 0.01), "memory.used": ("memory_used_bytes", 1 << 20),
           "temperature.gpu": ("temperature_celsius", 1), "power.draw": ("power_watts", 1),
           "ecc.errors.corrected.volatile.total": ("ecc_corrected", 1),
           "ecc.errors.uncorrected.volatile.total": ("ecc_uncorrected", 1)}
SAMPLE_QUERY = ["--format=csv", f"--query-gpu=uuid,{','.join(SAMPLED)}"]


def _measure(cell: str) -> float | None:
    """'33', '0 %', '77.80 W', '512 MiB' -> the number; N/A, [N/A] or [Not Supported] -> None."""
    number = cell.strip().split(" ")[0]
    try:
        return float(number)
    except ValueError:
        return None


def parse_sample_csv(text: str) -> list[Reading]:
    """Readings from `nvidia-smi --format=csv --query-gpu=uuid,…`: columns are found by the header
    (`memory.used [MiB]`), so any subset of SAMPLED in any order reads. Lines that are not rows of
    the header's width (a capture's `$ command` and `[exit 0]`) are skipped."""
    rows = list(csv.reader((line for line in text.splitlines() if line.strip() and not line.startswith("$")),
                           skipinitialspace=True))
    if not rows or "uuid" not in (header := [cell.split(" [")[0].strip() for cell in rows[0]]):
        raise InventoryError("nvidia-smi --query-gpu printed no header with uuid")
    found = []
    for row in rows[1:]:
        if len(row) != len(header):
            continue
        cells = dict(zip(header, row))
        values: dict[str, Any] = {}
        for column, (field, factor) in SAMPLED.items():
            measured = _measure(cells.get(column, "N/A"))
            values[field] = None if measured is None else (
                int(measured) if field.startswith("ecc") else measured * factor)
        found.append(Reading(gpu_uuid=cells["uuid"], **values))
    return found


class Driver:
    """Inventory through the nvidia-smi binary (`nvidia_smi`, found on PATH by default)."""

    def __init__(self, host: Host | None = None, nvidia_smi: str = "nvidia-smi") -> None:
        self._host = host or Host()
        self._nvidia_smi = nvidia_smi
        self._files = DriverFiles(root=self._host.root)

    def _run(self, *arguments: str) -> str:
        return self._host.run([self._nvidia_smi, *arguments])

    def collect(self) -> dict[str, Any]:
        query = parse_query_xml(self._run("-q", "-x"))
        topology = parse_topology(self._run("topo", "-m"))
        profiles = (parse_mig_profiles(self._run("mig", "-lgip"), self._run("mig", "-lgipp"))
                    if any(gpu.mig_supported for gpu in query.gpus) else {})
        if any(gpu.mig_enabled for gpu in query.gpus):
            placed, uuids = parse_gpu_instances(self._run("mig", "-lgi")), parse_mig_uuids(self._run("-L"))
        else:
            placed, uuids = {}, {}
        uuid_of = {gpu.index: gpu.uuid for gpu in query.gpus}
        no_topology = Topology(nvlink_peers=(), numa_node=None)
        gpus = [
            Gpu(uuid=gpu.uuid, index=gpu.index, pci_bus_id=gpu.pci_bus_id, model=gpu.model, memory_mib=gpu.memory_mib,
                minor=gpu.minor, numa_node=topology.get(gpu.index, no_topology).numa_node,
                nvlink_peers=tuple(uuid_of[peer] for peer in topology.get(gpu.index, no_topology).nvlink_peers),
                mig_supported=gpu.mig_supported, mig_enabled=gpu.mig_enabled, profiles=profiles.get(gpu.index, ()),
                instances=mig_instances(gpu, placed, uuids), ecc_uncorrected=gpu.ecc_uncorrected)
            for gpu in query.gpus
        ]
        return inventory_document(self._host, query.driver_version, query.cuda_version, gpus)

    def processes(self) -> list[dict[str, Any]]:
        return [dataclasses.asdict(process)
                for gpu in parse_query_xml(self._run("-q", "-x")).gpus for process in gpu.processes]

    def common_edits(self, inventory: dict[str, Any]) -> CommonEdits:
        return self._files.common_edits(inventory)

    def sample(self) -> list[Reading]:
        return parse_sample_csv(self._run(*SAMPLE_QUERY))

    def terminate(self, pid: int, force: bool) -> None:
        self._host.terminate(pid, force)

    def reboot(self) -> None:
        self._host.reboot()

    def _mig(self, *arguments: str) -> str:
        try:
            return self._run(*arguments)
        except InventoryError as error:
            raise mig_refusal(error) from error

    def mig_state(self, gpu_uuid: str) -> MigState:
        current, pending = (cell.strip().lower() for cell in self._mig(
            "-i", gpu_uuid, "--query-gpu=mig.mode.current,mig.mode.pending", "--format=csv,noheader").split(","))
        mode = ENABLED if current == ENABLED else DISABLED
        if mode == DISABLED:
            return MigState(mode=mode, pending=None if pending == current else ENABLED)
        placed = self._listed(gpu_uuid, "-lgi", parse_gpu_instances)
        computing = self._listed(gpu_uuid, "-lci", parse_compute_instances)
        return MigState(mode=mode, pending=None if pending == current else DISABLED,
                        instances=tuple(GpuInstance(gi, profile, placement, tuple(computing.get((gpu, gi), ())))
                                        for (gpu, gi), (profile, placement) in sorted(placed.items())))

    def _listed(self, gpu_uuid: str, listing: str, parse: Any) -> Any:
        """A `mig -lgi`/`-lci` of one GPU; empty where nvidia-smi finds none (it exits non-zero)."""
        try:
            return parse(self._mig("mig", "-i", gpu_uuid, listing))
        except MigError as error:
            if error.reason == "NotFound":
                return {}
            raise

    def set_mig_mode(self, gpu_uuid: str, enabled: bool) -> None:
        self._mig("-i", gpu_uuid, "-mig", "1" if enabled else "0")

    def reset_gpu(self, gpu_uuid: str) -> None:
        try:
            self._run("--gpu-reset", "-i", gpu_uuid)
        except InventoryError as error:
            raise MigError("ResetRefused", str(error)) from error

    def create_gpu_instance(self, gpu_uuid: str, profile: str, placement: int) -> int:
        said = self._mig("mig", "-i", gpu_uuid, "-cgi", f"{profile}:{placement}", "-C")
        created = _CREATED_GI.search(said)
        if created is None:
            raise MigError("Failed", f"nvidia-smi mig -cgi named no GPU instance: {said[:500]}")
        return int(created["gi"])

    def create_compute_instance(self, gpu_uuid: str, gi: int) -> int:
        self._mig("mig", "-i", gpu_uuid, "-gi", str(gi), "-cci")
        return 0

    def destroy_compute_instance(self, gpu_uuid: str, gi: int, ci: int) -> None:
        self._mig("mig", "-i", gpu_uuid, "-gi", str(gi), "-ci", str(ci), "-dci")

    def destroy_gpu_instance(self, gpu_uuid: str, gi: int) -> None:
        self._mig("mig", "-i", gpu_uuid, "-gi", str(gi), "-dgi")

"""The NVML driver: the inventory straight from the NVIDIA Management Library (nvidia-ml-py).

Two layers. `snapshot(nvml)` reads the inventory: read-only queries (it never sets a MIG mode or
any other setting), recorded as plain JSON in the shape of the dump in
tests/fixtures/nvidia-h200/nvml.json. `document_from_snapshot` turns such a snapshot into the
inventory document; it is pure, so CI tests it on the recorded dump, and the live layer, which
needs a GPU, stays thin. `python -m better_compute.daemon.drivers.nvml` prints a snapshot, to
record a fixture on a GPU node.

A snapshot: {"driver": str, "cuda_driver_version": int (13000 for 13.0), "gpus": [{"index",
"name", "uuid", "pci_bus_id", "memory_total" (bytes), "mig_mode" ([current, pending], 1 =
enabled), "minor_number", "numa_node", "memory_affinity" (the NUMA nodes the GPU is attached to,
nvmlDeviceGetMemoryAffinity: nvidia-smi topo -m's NUMA Affinity), "nvlink" (uuids of the GPUs it
reaches over NVLink),
"ecc_uncorrected" (volatile total), "gpu_instance_profiles": [{"profile" (NVML's profile
constant), "id", "name", "slice_count", "instance_count", "multiprocessor_count", "memory_mib",
"placements": [[start, size], …] (memory slices)}], "mig_devices": [{"index", "gi", "ci", "uuid",
"profile_id", "placement": [start, size]}]}]}. A value NVML refuses is {"error", "msg"} instead
(NVMLError_NotSupported for a NUMA node on a VM, for a profile the GPU lacks, for a MIG mode on a
GPU without MIG).

The MIG calls (issue 13, daemon/mig.py converges with them) are the only ones that change a GPU:
nvmlDeviceSetMigMode, nvmlDeviceCreateGpuInstanceWithPlacement, nvmlGpuInstanceCreateComputeInstance,
nvmlComputeInstanceDestroy and nvmlGpuInstanceDestroy; NVML has no public GPU reset, so a MIG mode
pending a reset is applied with `nvidia-smi --gpu-reset`. Health (health.py) comes from the Xid
event set, the volatile uncorrectable ECC total, remapped rows and the clock event reasons; a GPU
NVML calls lost is fallen off the bus.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from better_compute.daemon.drivers import InventoryError, Reading
from better_compute.daemon.drivers.document import (Gpu, MigInstance, MigProfile, Process, inventory_document,
                                                    without_mig_prefix)
from better_compute.daemon.cdi import CommonEdits
from better_compute.daemon.driverfiles import DriverFiles
from better_compute.daemon.drivers.host import Host
from better_compute.daemon.health import health_conditions
from better_compute.daemon.mig import DISABLED, ENABLED, GpuInstance, MigError, MigState

MIB = 1 << 20
NOT_AVAILABLE = 0xFFFFFFFF  # NVML's "no value" for a process's GPU/compute instance outside MIG
MAX_PLACEMENTS = 32  # room for every placement NVML can list: there are at most 8 memory slices
NODE_SET_WORDS = 16  # NUMA node masks of 64 bits each: room for 1024 nodes
MAX_XID_EVENTS = 1024  # read per sample: a GPU storming Xids does not hold the sampler


def failed(value: Any) -> bool:
    """Whether a snapshot value is NVML's refusal rather than a value."""
    return isinstance(value, dict) and "error" in value


def cuda_version(driver_version: int) -> str:
    """NVML's CUDA driver version as nvidia-smi prints it: 13000 -> '13.0', 12020 -> '12.2'."""
    return f"{driver_version // 1000}.{driver_version % 1000 // 10}"


def document_from_snapshot(snapshot: dict[str, Any], host: Host) -> dict[str, Any]:
    """The inventory document an NVML snapshot describes, on `host`."""
    return inventory_document(host, snapshot["driver"], cuda_version(snapshot["cuda_driver_version"]),
                              [_gpu(gpu) for gpu in snapshot["gpus"]])


def numa_node(gpu: dict[str, Any]) -> int | None:
    """The GPU's own NUMA node where NVML names one (its memory is a node, as on Grace Hopper), else
    the one node it is attached to (memory affinity), else None: as the nvidia-smi driver reads
    topo -m's GPU NUMA ID and NUMA Affinity."""
    own, attached = gpu["numa_node"], gpu.get("memory_affinity")
    if not failed(own) and own >= 0:
        return own
    return attached[0] if isinstance(attached, list) and len(attached) == 1 else None


def _gpu(gpu: dict[str, Any]) -> Gpu:
    mig_mode, ecc = gpu["mig_mode"], gpu["ecc_uncorrected"]
    profiles = tuple(MigProfile(name=without_mig_prefix(profile["name"]), id=profile["id"],
                                # A placement's size, not `slice_count` (compute slices): see MigProfile.
                                slices=profile["placements"][0][1], memory_mib=profile["memory_mib"],
                                sm=profile["multiprocessor_count"],
                                placements=tuple(start for start, _ in profile["placements"]))
                     for profile in gpu["gpu_instance_profiles"] if not failed(profile) and profile["placements"])
    name_of = {profile.id: profile.name for profile in profiles}
    return Gpu(
        uuid=gpu["uuid"], index=gpu["index"], pci_bus_id=gpu["pci_bus_id"], model=gpu["name"],
        memory_mib=gpu["memory_total"] // MIB, minor=None if failed(gpu["minor_number"]) else gpu["minor_number"],
        numa_node=numa_node(gpu), nvlink_peers=tuple(gpu["nvlink"]),
        mig_supported=not failed(mig_mode), mig_enabled=not failed(mig_mode) and mig_mode[0] == 1,
        profiles=profiles,
        instances=tuple(MigInstance(profile=name_of[device["profile_id"]], placement=device["placement"][0],
                                    gi=device["gi"], ci=device["ci"], uuid=device["uuid"])
                        for device in gpu["mig_devices"]),
        ecc_uncorrected=0 if failed(ecc) else ecc)


# The live layer: everything below calls NVML and runs only where a GPU is.

def _text(value: str | bytes) -> str:
    """NVML strings come as bytes from older bindings, as str from newer ones."""
    return value.decode() if isinstance(value, bytes) else value


def _refusable(nvml: ModuleType, call: Callable[..., Any], *arguments: Any) -> Any:
    """`call(*arguments)`, or NVML's refusal recorded as the dump records it."""
    try:
        return call(*arguments)
    except nvml.NVMLError as error:
        return {"error": type(error).__name__, "msg": str(error)}


def snapshot(nvml: ModuleType) -> dict[str, Any]:
    """Read the GPUs through an initialized NVML (the pynvml module)."""
    handles = [nvml.nvmlDeviceGetHandleByIndex(index) for index in range(nvml.nvmlDeviceGetCount())]
    uuids = [_text(nvml.nvmlDeviceGetUUID(handle)) for handle in handles]
    return {"driver": _text(nvml.nvmlSystemGetDriverVersion()),
            "cuda_driver_version": nvml.nvmlSystemGetCudaDriverVersion(),
            "gpus": [_gpu_snapshot(nvml, index, handles, uuids) for index in range(len(handles))]}


def _gpu_snapshot(nvml: ModuleType, index: int, handles: list[Any], uuids: list[str]) -> dict[str, Any]:
    handle = handles[index]
    mig_mode = _refusable(nvml, nvml.nvmlDeviceGetMigMode, handle)
    return {
        "index": index,
        "name": _text(nvml.nvmlDeviceGetName(handle)),
        "uuid": uuids[index],
        "pci_bus_id": _text(nvml.nvmlDeviceGetPciInfo(handle).busId),
        "memory_total": nvml.nvmlDeviceGetMemoryInfo(handle).total,
        "mig_mode": mig_mode,
        "minor_number": _refusable(nvml, nvml.nvmlDeviceGetMinorNumber, handle),
        "numa_node": _refusable(nvml, nvml.nvmlDeviceGetNumaNodeId, handle),
        "memory_affinity": _refusable(nvml, _memory_affinity, nvml, handle),
        "nvlink": [uuids[peer] for peer in range(len(handles))
                   if peer != index and _nvlink_between(nvml, handle, handles[peer])],
        "ecc_uncorrected": _refusable(nvml, nvml.nvmlDeviceGetTotalEccErrors, handle,
                                      nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC),
        "gpu_instance_profiles": [] if failed(mig_mode) else [
            {"profile": profile} | _refusable(nvml, _profile_snapshot, nvml, handle, profile)
            for profile in range(nvml.NVML_GPU_INSTANCE_PROFILE_COUNT)],
        "mig_devices": _mig_devices(nvml, handle) if not failed(mig_mode) and mig_mode[0] == 1 else [],
    }


def _memory_affinity(nvml: ModuleType, handle: Any) -> list[int]:
    """The NUMA nodes whose memory is closest to the GPU (a bit mask in 64-bit words)."""
    words = nvml.nvmlDeviceGetMemoryAffinity(handle, NODE_SET_WORDS, nvml.NVML_AFFINITY_SCOPE_NODE)
    return [64 * at + bit for at, word in enumerate(words) for bit in range(64) if word >> bit & 1]


def _nvlink_between(nvml: ModuleType, handle: Any, other: Any) -> bool:
    """Whether two GPUs talk peer-to-peer over NVLink (directly or through NVSwitches)."""
    status = _refusable(nvml, nvml.nvmlDeviceGetP2PStatus, handle, other, nvml.NVML_P2P_CAPS_INDEX_NVLINK)
    return status == nvml.NVML_P2P_STATUS_OK


def _profile_snapshot(nvml: ModuleType, handle: Any, profile: int) -> dict[str, Any]:
    info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, profile)  # version 2: it has the name
    placements = (nvml.c_nvmlGpuInstancePlacement_t * MAX_PLACEMENTS)()
    count = ctypes.c_uint(MAX_PLACEMENTS)
    nvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, info.id, placements, ctypes.byref(count))
    return {"id": info.id, "name": _text(info.name), "slice_count": info.sliceCount,
            "instance_count": info.instanceCount, "multiprocessor_count": info.multiprocessorCount,
            "memory_mib": info.memorySizeMB,
            "placements": [[placements[at].start, placements[at].size] for at in range(count.value)]}


def _mig_devices(nvml: ModuleType, handle: Any) -> list[dict[str, Any]]:
    """The MIG devices (compute instances) of a MIG-enabled GPU, each with its GPU instance's profile
    and placement."""
    devices = []
    for index in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            device = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, index)
        except nvml.NVMLError_NotFound:
            continue
        gi = nvml.nvmlDeviceGetGpuInstanceId(device)
        info = nvml.nvmlGpuInstanceGetInfo(nvml.nvmlDeviceGetGpuInstanceById(handle, gi))
        devices.append({"index": index, "gi": gi, "ci": nvml.nvmlDeviceGetComputeInstanceId(device),
                        "uuid": _text(nvml.nvmlDeviceGetUUID(device)), "profile_id": info.profileId,
                        "placement": [info.placement.start, info.placement.size]})
    return devices


def _or_none(nvml: ModuleType, call: Callable[[], Any]) -> Any:
    """`call()`, or None where NVML refuses it (not supported, e.g. a MIG device's power)."""
    try:
        return call()
    except nvml.NVMLError:
        return None


def _scaled(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor


def _reading(nvml: ModuleType, handle: Any, gpu_uuid: str, mig_uuid: str | None = None) -> Reading:
    """What NVML reads of one GPU or MIG device (power in mW, utilisation in %)."""
    def ecc(kind: int) -> int | None:
        return _or_none(nvml, lambda: nvml.nvmlDeviceGetTotalEccErrors(handle, kind, nvml.NVML_VOLATILE_ECC))
    return Reading(
        gpu_uuid=gpu_uuid, mig_uuid=mig_uuid,
        utilization_ratio=_scaled(_or_none(nvml, lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu), 0.01),
        memory_used_bytes=_or_none(nvml, lambda: nvml.nvmlDeviceGetMemoryInfo(handle).used),
        temperature_celsius=_or_none(nvml, lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)),
        power_watts=_scaled(_or_none(nvml, lambda: nvml.nvmlDeviceGetPowerUsage(handle)), 0.001),
        ecc_corrected=ecc(nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED),
        ecc_uncorrected=ecc(nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED))


def readings(nvml: ModuleType) -> list[Reading]:
    """A reading of every GPU and, where MIG is enabled, of every MIG device (NVML reads a MIG
    device's memory; its utilisation, temperature and power are the GPU's and read as None)."""
    found = []
    for index in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        uuid = _text(nvml.nvmlDeviceGetUUID(handle))
        found.append(_reading(nvml, handle, uuid))
        mig_mode = _or_none(nvml, lambda handle=handle: nvml.nvmlDeviceGetMigMode(handle))
        if mig_mode is None or mig_mode[0] != 1:
            continue
        for at in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
            device = _or_none(nvml, lambda handle=handle, at=at: nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, at))
            if device is not None:
                found.append(_reading(nvml, device, uuid, _text(nvml.nvmlDeviceGetUUID(device))))
    return found


class XidCounter:
    """Critical Xid events per GPU since the daemon started: an NVML event set registered on every GPU
    that allows it, drained without waiting at each sample. It keeps NVML initialised while the
    daemon runs (NVML counts initialisations), or the event set would go with the next shutdown."""

    def __init__(self, nvml: ModuleType) -> None:
        nvml.nvmlInit()
        self.events = nvml.nvmlEventSetCreate()
        self.counts: dict[str, int] = {}  # only the GPUs registered: elsewhere the count is unknown
        self.seen: dict[str, set[int]] = {}  # the Xid numbers each GPU reported (health.py)
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            try:
                nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, self.events)
            except nvml.NVMLError:  # not supported (some virtual GPUs): no count for that GPU
                continue
            self.counts[_text(nvml.nvmlDeviceGetUUID(handle))] = 0

    def drain(self, nvml: ModuleType) -> dict[str, int]:
        """The counts, after the events that came since the last call (at most MAX_XID_EVENTS)."""
        for _ in range(MAX_XID_EVENTS):
            try:
                event = nvml.nvmlEventSetWait_v2(self.events, 0)
            except nvml.NVMLError_Timeout:  # none waiting
                break
            uuid = _text(nvml.nvmlDeviceGetUUID(event.device))
            if event.eventType & nvml.nvmlEventTypeXidCriticalError and uuid in self.counts:
                self.counts[uuid] += 1
                self.seen.setdefault(uuid, set()).add(int(event.eventData))
        return dict(self.counts)


def running_processes(nvml: ModuleType) -> list[Process]:
    """The compute and graphics processes on every GPU (a process doing both is listed once)."""
    found: dict[tuple[str, int], Process] = {}
    for index in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        uuid = _text(nvml.nvmlDeviceGetUUID(handle))
        for process in [*nvml.nvmlDeviceGetComputeRunningProcesses(handle),
                        *nvml.nvmlDeviceGetGraphicsRunningProcesses(handle)]:
            found.setdefault((uuid, process.pid), Process(
                pid=process.pid, gpu_uuid=uuid,
                used_memory_mib=None if process.usedGpuMemory is None else process.usedGpuMemory // MIB,
                gi=None if process.gpuInstanceId == NOT_AVAILABLE else process.gpuInstanceId,
                ci=None if process.computeInstanceId == NOT_AVAILABLE else process.computeInstanceId))
    return list(found.values())


@contextmanager
def nvml_session() -> Iterator[ModuleType]:
    """NVML, initialized for the block; any NVML failure in it is an InventoryError."""
    try:
        import pynvml
    except ImportError as error:
        raise InventoryError("the nvml driver needs nvidia-ml-py (pip install nvidia-ml-py)") from error
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        raise InventoryError(f"NVML did not start: {error}") from error
    try:
        yield pynvml
    except pynvml.NVMLError as error:
        raise InventoryError(f"NVML: {error}") from error
    finally:
        pynvml.nvmlShutdown()


def _mig_error(nvml: ModuleType, error: Exception) -> MigError:
    """NVML's refusal as a MigError: NVMLError_InUse -> InUse, ..."""
    return MigError(type(error).__name__.removeprefix("NVMLError_") if isinstance(error, nvml.NVMLError) else "Failed",
                    f"NVML: {error}")


def gpu_instance_profiles(nvml: ModuleType, handle: Any) -> dict[int, tuple[str, int]]:
    """NVML profile id -> (profile name without "MIG ", memory slices it spans), for the profiles the GPU has."""
    found = {}
    for profile in range(nvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        info = _or_none(nvml, lambda profile=profile: nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, profile))
        if info is None:
            continue
        placements = (nvml.c_nvmlGpuInstancePlacement_t * MAX_PLACEMENTS)()
        count = ctypes.c_uint(MAX_PLACEMENTS)
        nvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, info.id, placements, ctypes.byref(count))
        found[info.id] = (without_mig_prefix(_text(info.name)), placements[0].size if count.value else 0)
    return found


def gpu_instances(nvml: ModuleType, handle: Any) -> list[tuple[Any, GpuInstance]]:
    """(NVML handle, GpuInstance) of every GPU instance of a GPU, with its compute instances."""
    found = []
    for profile_id, (name, _) in gpu_instance_profiles(nvml, handle).items():
        instances = (nvml.c_nvmlGpuInstance_t * MAX_PLACEMENTS)()
        count = ctypes.c_uint(MAX_PLACEMENTS)
        nvml.nvmlDeviceGetGpuInstances(handle, profile_id, instances, ctypes.byref(count))
        for at in range(count.value):
            info = nvml.nvmlGpuInstanceGetInfo(instances[at])
            found.append((instances[at], GpuInstance(gi=info.id, profile=name, placement=info.placement.start,
                                                     cis=tuple(ci for _, ci in compute_instances(nvml, instances[at])))))
    return found


def compute_instances(nvml: ModuleType, gpu_instance: Any) -> list[tuple[Any, int]]:
    """(NVML handle, id) of every compute instance of a GPU instance."""
    found = []
    for profile in range(nvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
        info = _or_none(nvml, lambda profile=profile: nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
            gpu_instance, profile, nvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED))
        if info is None:
            continue
        instances = (nvml.c_nvmlComputeInstance_t * MAX_PLACEMENTS)()
        count = ctypes.c_uint(MAX_PLACEMENTS)
        nvml.nvmlGpuInstanceGetComputeInstances(gpu_instance, info.id, instances, ctypes.byref(count))
        found += [(instances[at], nvml.nvmlComputeInstanceGetInfo(instances[at]).id) for at in range(count.value)]
    return found


def full_compute_profile(nvml: ModuleType, gpu_instance: Any) -> int:
    """The compute instance profile that takes the whole GPU instance (one MIG device per GPU
    instance, as `nvidia-smi mig -cgi ... -C` makes): the largest the GPU instance has."""
    for profile in reversed(range(nvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT)):
        info = _or_none(nvml, lambda profile=profile: nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
            gpu_instance, profile, nvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED))
        if info is not None and info.instanceCount > 0:
            return int(info.id)
    raise MigError("NotSupported", "the GPU instance has no compute instance profile")


class NvmlMig:
    """The MIG calls (mig.MigDriver) on an initialized NVML module. `reset` resets one GPU by uuid.
    NVML's refusals come out as MigError (NVMLError_InUse: reason InUse, ...)."""

    def __init__(self, nvml: ModuleType, reset: Callable[[str], None]) -> None:
        self.nvml = nvml
        self.reset = reset

    def __getattribute__(self, name: str) -> Any:
        found = object.__getattribute__(self, name)
        if name.startswith("_") or name in ("nvml", "reset") or not callable(found):
            return found
        nvml = object.__getattribute__(self, "nvml")

        def refused_as_mig_error(*arguments: Any) -> Any:
            try:
                return found(*arguments)
            except nvml.NVMLError as error:
                raise _mig_error(nvml, error) from error
        return refused_as_mig_error

    def _handle(self, gpu_uuid: str) -> Any:
        return self.nvml.nvmlDeviceGetHandleByUUID(gpu_uuid)

    def _instance(self, gpu_uuid: str, gi: int) -> Any:
        return self.nvml.nvmlDeviceGetGpuInstanceById(self._handle(gpu_uuid), gi)

    def mig_state(self, gpu_uuid: str) -> MigState:
        handle = self._handle(gpu_uuid)
        current, pending = self.nvml.nvmlDeviceGetMigMode(handle)
        mode = ENABLED if current == self.nvml.NVML_DEVICE_MIG_ENABLE else DISABLED
        return MigState(mode=mode, pending=None if pending == current else (ENABLED if pending == self.nvml.NVML_DEVICE_MIG_ENABLE else DISABLED),
                        instances=tuple(instance for _, instance in gpu_instances(self.nvml, handle)) if mode == ENABLED else ())

    def set_mig_mode(self, gpu_uuid: str, enabled: bool) -> None:
        self.nvml.nvmlDeviceSetMigMode(self._handle(gpu_uuid),
                                       self.nvml.NVML_DEVICE_MIG_ENABLE if enabled else self.nvml.NVML_DEVICE_MIG_DISABLE)

    def reset_gpu(self, gpu_uuid: str) -> None:
        self.reset(gpu_uuid)

    def create_gpu_instance(self, gpu_uuid: str, profile: str, placement: int) -> int:
        handle = self._handle(gpu_uuid)
        found = [(profile_id, size) for profile_id, (name, size) in gpu_instance_profiles(self.nvml, handle).items()
                 if name == profile]
        if not found:
            raise MigError("InvalidArgument", f"GPU {gpu_uuid} has no MIG profile {profile}")
        profile_id, size = found[0]
        where = self.nvml.c_nvmlGpuInstancePlacement_t()
        where.start, where.size = placement, size
        instance = self.nvml.nvmlDeviceCreateGpuInstanceWithPlacement(handle, profile_id, ctypes.byref(where))
        return int(self.nvml.nvmlGpuInstanceGetInfo(instance).id)

    def create_compute_instance(self, gpu_uuid: str, gi: int) -> int:
        instance = self._instance(gpu_uuid, gi)
        created = self.nvml.nvmlGpuInstanceCreateComputeInstance(instance, full_compute_profile(self.nvml, instance))
        return int(self.nvml.nvmlComputeInstanceGetInfo(created).id)

    def destroy_compute_instance(self, gpu_uuid: str, gi: int, ci: int) -> None:
        for handle, found in compute_instances(self.nvml, self._instance(gpu_uuid, gi)):
            if found == ci:
                self.nvml.nvmlComputeInstanceDestroy(handle)

    def destroy_gpu_instance(self, gpu_uuid: str, gi: int) -> None:
        self.nvml.nvmlGpuInstanceDestroy(self._instance(gpu_uuid, gi))


def gpu_health(nvml: ModuleType, handle: Any, gpu_uuid: str, xids: set[int]) -> list[dict[str, Any]]:
    """The health conditions of one GPU (health.py) from NVML."""
    try:
        ecc = _or_none(nvml, lambda: nvml.nvmlDeviceGetTotalEccErrors(
            handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC)) or 0
        rows = _or_none(nvml, lambda: nvml.nvmlDeviceGetRemappedRows(handle)) or (0, 0, 0, 0)
        reasons = _or_none(nvml, lambda: nvml.nvmlDeviceGetCurrentClocksEventReasons(handle)) or 0
    except nvml.NVMLError_GpuIsLost:
        return health_conditions(gpu_uuid, xid=xids, lost=True)
    thermal = nvml.nvmlClocksEventReasonHwThermalSlowdown | nvml.nvmlClocksEventReasonSwThermalSlowdown
    power = nvml.nvmlClocksEventReasonHwPowerBrakeSlowdown | nvml.nvmlClocksEventReasonHwSlowdown
    return health_conditions(gpu_uuid, xid=xids, ecc_uncorrectable=ecc, row_remap_pending=bool(rows[2]),
                             row_remap_failed=bool(rows[3]), thermal_slowdown=bool(reasons & thermal),
                             power_slowdown=bool(reasons & power))


class Driver:
    """Inventory through NVML."""

    def __init__(self, host: Host | None = None) -> None:
        self._host = host or Host()
        self._files = DriverFiles(root=self._host.root)
        self._xids: XidCounter | None = None  # made at the first sample

    def collect(self) -> dict[str, Any]:
        with nvml_session() as nvml:
            raw = snapshot(nvml)
        return document_from_snapshot(raw, self._host)

    def processes(self) -> list[dict[str, Any]]:
        with nvml_session() as nvml:
            return [dataclasses.asdict(process) for process in running_processes(nvml)]

    def common_edits(self, inventory: dict[str, Any]) -> CommonEdits:
        return self._files.common_edits(inventory)

    def sample(self) -> list[Reading]:
        with nvml_session() as nvml:
            if self._xids is None:
                self._xids = XidCounter(nvml)
            xids = self._xids.drain(nvml)
            return [reading if reading.mig_uuid else dataclasses.replace(reading, xid_errors=xids.get(reading.gpu_uuid))
                    for reading in readings(nvml)]

    def terminate(self, pid: int, force: bool) -> None:
        self._host.terminate(pid, force)

    def reboot(self) -> None:
        self._host.reboot()

    def _mig(self, call: Callable[[NvmlMig], Any]) -> Any:
        with nvml_session() as nvml:
            return call(NvmlMig(nvml, self._reset))

    def _reset(self, gpu_uuid: str) -> None:
        """NVML has no public reset: `nvidia-smi --gpu-reset`, which refuses while processes run."""
        try:
            self._host.run(["nvidia-smi", "--gpu-reset", "-i", gpu_uuid])
        except InventoryError as error:
            raise MigError("ResetRefused", str(error)) from error

    def mig_state(self, gpu_uuid: str) -> MigState:
        return self._mig(lambda mig: mig.mig_state(gpu_uuid))

    def set_mig_mode(self, gpu_uuid: str, enabled: bool) -> None:
        self._mig(lambda mig: mig.set_mig_mode(gpu_uuid, enabled))

    def reset_gpu(self, gpu_uuid: str) -> None:
        self._reset(gpu_uuid)

    def create_gpu_instance(self, gpu_uuid: str, profile: str, placement: int) -> int:
        return int(self._mig(lambda mig: mig.create_gpu_instance(gpu_uuid, profile, placement)))

    def create_compute_instance(self, gpu_uuid: str, gi: int) -> int:
        return int(self._mig(lambda mig: mig.create_compute_instance(gpu_uuid, gi)))

    def destroy_compute_instance(self, gpu_uuid: str, gi: int, ci: int) -> None:
        self._mig(lambda mig: mig.destroy_compute_instance(gpu_uuid, gi, ci))

    def destroy_gpu_instance(self, gpu_uuid: str, gi: int) -> None:
        self._mig(lambda mig: mig.destroy_gpu_instance(gpu_uuid, gi))

    def health(self) -> list[dict[str, Any]]:
        with nvml_session() as nvml:
            if self._xids is None:
                self._xids = XidCounter(nvml)
            self._xids.drain(nvml)
            found = []
            for index in range(nvml.nvmlDeviceGetCount()):
                try:
                    handle = nvml.nvmlDeviceGetHandleByIndex(index)
                    uuid = _text(nvml.nvmlDeviceGetUUID(handle))
                except nvml.NVMLError_GpuIsLost:
                    continue  # no uuid to name it by: the inventory shows it absent
                found += gpu_health(nvml, handle, uuid, self._xids.seen.get(uuid, set()))
            return found


if __name__ == "__main__":
    try:
        with nvml_session() as session:
            print(json.dumps(snapshot(session), indent=1))
    except InventoryError as failure:
        raise SystemExit(f"nvml: {failure}") from failure

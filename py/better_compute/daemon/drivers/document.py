"""The facts a driver reads about each GPU, and the one function that turns them into the inventory
document (docs/inventory.md). Both real drivers only gather facts; the document's shape, its order
and the host's part are decided here once, so their documents can be compared field by field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from better_compute.daemon.drivers.host import Host

INVENTORY_VERSION = 1


@dataclass(frozen=True)
class MigProfile:
    """A GPU instance profile. `slices` and `placements` count memory slices (an H200 has 8), as
    `nvidia-smi mig -lgipp` prints them and NVML's possible placements give them: not NVML's
    `sliceCount`, which counts compute slices (3 for a 3g profile)."""

    name: str  # without the "MIG " prefix both sources print
    id: int
    slices: int
    memory_mib: int
    sm: int
    placements: tuple[int, ...]

    def order(self) -> tuple[int, int, int, int]:
        """Smallest first, as nvidia-smi lists them: NVML lists by its profile constant instead."""
        return self.slices, self.memory_mib, self.sm, self.id


@dataclass(frozen=True)
class MigInstance:
    """A MIG device: compute instance `ci` of GPU instance `gi`, placed at memory slice `placement`."""

    profile: str
    placement: int
    gi: int
    ci: int
    uuid: str


@dataclass(frozen=True)
class Gpu:
    """What a driver knows about one GPU."""

    uuid: str
    index: int
    pci_bus_id: str
    model: str
    memory_mib: int
    minor: int | None
    numa_node: int | None
    nvlink_peers: tuple[str, ...]
    mig_supported: bool
    mig_enabled: bool
    profiles: tuple[MigProfile, ...]
    instances: tuple[MigInstance, ...]
    ecc_uncorrected: int


def without_mig_prefix(name: str) -> str:
    """'MIG 3g.71gb' -> '3g.71gb'."""
    return name.removeprefix("MIG ").strip()


def inventory_document(host: Host, driver_version: str, cuda_version: str, gpus: list[Gpu]) -> dict[str, Any]:
    """The inventory document of this host with these GPUs (sorted by index); with the system uuid
    where the firmware gives one."""
    system_uuid = host.system_uuid()
    return {
        "version": INVENTORY_VERSION,
        "hostname": host.hostname(),
        "boot_id": host.boot_id(),
        "driver": {"name": "nvidia", "version": driver_version, "cuda": cuda_version},
        "shared_device_nodes": host.shared_device_nodes(),
        "devices": [_device(host, gpu) for gpu in sorted(gpus, key=lambda gpu: gpu.index)],
    } | ({"system_uuid": system_uuid} if system_uuid else {})


def _device(host: Host, gpu: Gpu) -> dict[str, Any]:
    return {
        "uuid": gpu.uuid,
        "index": gpu.index,
        "pci_bus_id": gpu.pci_bus_id,
        "model": gpu.model,
        "memory_mib": gpu.memory_mib,
        "numa_node": gpu.numa_node,
        "device_nodes": host.gpu_device_nodes(gpu.minor),
        "nvlink_peers": list(gpu.nvlink_peers),
        "mig": {
            "supported": gpu.mig_supported,
            "mode": "enabled" if gpu.mig_enabled else "disabled",
            "profiles": [
                {"name": profile.name, "id": profile.id, "slices": profile.slices, "memory_mib": profile.memory_mib,
                 "sm": profile.sm, "placements": list(profile.placements)}
                for profile in sorted(gpu.profiles, key=MigProfile.order)
            ],
            "instances": [
                {"profile": instance.profile, "placement": instance.placement, "gi": instance.gi, "ci": instance.ci,
                 "uuid": instance.uuid,
                 # Not in docs/inventory.md's table (unknown fields are kept): the CDI writer needs them.
                 "device_nodes": host.mig_device_nodes(gpu.minor, instance.gi, instance.ci)}
                for instance in sorted(gpu.instances, key=lambda instance: (instance.placement, instance.gi, instance.ci))
            ],
        },
        # Xid events reach a reader only through an NVML event subscription, which neither driver
        # keeps yet: `xid` stays empty and `ok` speaks for the ECC counter alone.
        "health": {"ok": gpu.ecc_uncorrected == 0, "ecc_uncorrected": gpu.ecc_uncorrected, "xid": []},
    }


@dataclass(frozen=True)
class Process:
    """A process using a GPU (or one MIG instance of it)."""

    pid: int
    gpu_uuid: str
    used_memory_mib: int | None
    gi: int | None
    ci: int | None

"""Inventory drivers: how bcd learns what GPUs its node has (the inventory document, docs/architecture.md §17 and
docs/inventory.md) and which processes use them.

Two real drivers read the same facts through different doors, so a node can use whichever its
driver installation offers: `nvidia-smi` parses the tool's output, `nvml` asks the library directly.
Both only read; neither changes a GPU setting. `fake` serves a recorded document, so that tests and
demos can run many daemons on a machine without a GPU. Each is a module of its own, imported only
when chosen: the nvml driver needs nvidia-ml-py, which a CI machine need not have.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from better_compute.daemon.cdi import CommonEdits

DRIVERS = {"nvidia-smi": "nvidia_smi", "nvml": "nvml", "fake": "fake"}


class InventoryError(RuntimeError):
    """The driver could not read the GPUs (tool missing, timed out, failed, or printed something
    it cannot parse). The daemon reports it as a node condition and tries again later."""


@dataclass(frozen=True)
class Reading:
    """One GPU's (or one MIG device's) gauges and counters at one moment, for telemetry (P8): never
    part of the inventory, never sent to the control plane. None is a value the driver cannot read
    (NVML refuses utilisation and power of a MIG device: those are the whole GPU's)."""

    gpu_uuid: str
    mig_uuid: str | None = None
    utilization_ratio: float | None = None  # 0..1
    memory_used_bytes: float | None = None
    temperature_celsius: float | None = None
    power_watts: float | None = None
    ecc_corrected: int | None = None  # volatile counts, since the driver loaded
    ecc_uncorrected: int | None = None
    xid_errors: int | None = None


@runtime_checkable
class InventoryDriver(Protocol):
    """What the daemon needs from a driver."""

    def collect(self) -> dict[str, Any]:
        """The node's inventory document (version 1)."""
        ...

    def processes(self) -> list[dict[str, Any]]:
        """The processes using a GPU now, for `drain_processes`: `pid`, `gpu_uuid`,
        `used_memory_mib` (null where the driver cannot tell), and `gi`/`ci` (the MIG instance the
        process runs in, null outside MIG), so a drain can spare other tenants' MIG instances."""
        ...

    def common_edits(self, inventory: dict[str, Any]) -> CommonEdits:
        """The CDI container edits every device of the node's spec shares (the driver's device
        nodes, libraries, binaries and hooks: daemon/driverfiles.py) for the driver `inventory` names."""
        ...

    def sample(self) -> list[Reading]:
        """The current readings of the node's GPUs and MIG devices (telemetry.py pushes them)."""
        ...

    def terminate(self, pid: int, force: bool) -> None:
        """Stop a process `processes` listed (SIGTERM, or SIGKILL when `force`): a booking ended and
        the process still uses its GPU or MIG instance (daemon/withdrawal.py). One already gone is
        no error."""
        ...

    def reboot(self) -> None:
        """Reboot the node (the `reboot` command). A driver owns it so that a fake node records the
        request instead of rebooting the machine that runs the tests."""
        ...


def driver(name: str, **options: Any) -> InventoryDriver:
    """The driver called `name` (nvidia-smi, nvml, fake), made with the options its class takes."""
    if name not in DRIVERS:
        raise ValueError(f"unknown inventory driver {name!r}; use one of {', '.join(DRIVERS)}")
    module = importlib.import_module(f"{__name__}.{DRIVERS[name]}")
    return module.Driver(**options)

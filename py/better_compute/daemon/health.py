"""GPU health as per-GPU conditions (issue 13 part 3): what a driver reads of a GPU's health (Xid
events, uncorrectable ECC errors, remapped rows, clock slowdowns, a GPU fallen off the bus) in the
shape node.observed reports (sql: compute.device_conditions). Every type is reported every time,
true or false, so the control plane's view follows the GPU level-triggered; which types keep a GPU
out of new placements is the database's rule (compute.device_condition_critical), not the daemon's.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from better_compute.daemon.mig import condition

FALLEN_OFF_THE_BUS = 79
# Xids that say the GPU itself is unwell (NVIDIA's Xid catalogue), not that an application faulted:
# double-bit ECC (48), micro-controller halts (61, 62), row remapping events (63, 64), NVLink (74),
# high single-bit ECC rate (92), contained and uncontained ECC (94, 95), GSP errors (119, 120),
# unrecovered ECC (140).
CRITICAL_XIDS = frozenset({48, 61, 62, 63, 64, 74, 92, 94, 95, 119, 120, 140})


def health_conditions(gpu_uuid: str, xid: Iterable[int] = (), ecc_uncorrectable: int = 0,
                      row_remap_pending: bool = False, row_remap_failed: bool = False,
                      thermal_slowdown: bool = False, power_slowdown: bool = False, lost: bool = False,
                      **_other: Any) -> list[dict[str, Any]]:
    """The health conditions of one GPU from what its driver read (other keywords: not health)."""
    xids = sorted(set(xid))
    critical = [number for number in xids if number in CRITICAL_XIDS]
    fallen = lost or FALLEN_OFF_THE_BUS in xids
    return [
        condition(gpu_uuid, "FallenOffBus", fallen, "Xid79" if FALLEN_OFF_THE_BUS in xids else "GpuIsLost" if lost else "OnBus",
                  "GPU has fallen off the bus: it needs a reset or a reboot" if fallen else ""),
        condition(gpu_uuid, "XidCritical", bool(critical), f"Xid{critical[-1]}" if critical else "NoCriticalXid",
                  f"critical Xid events since the daemon started: {critical}" if critical else ""),
        condition(gpu_uuid, "EccUncorrectable", ecc_uncorrectable > 0, "UncorrectableErrors" if ecc_uncorrectable else "NoErrors",
                  f"{ecc_uncorrectable} uncorrectable ECC error(s) since the driver loaded" if ecc_uncorrectable else ""),
        condition(gpu_uuid, "RowRemapPending", row_remap_pending, "RemapPending" if row_remap_pending else "NoRemapPending",
                  "remapped rows take effect at the GPU's next reset" if row_remap_pending else ""),
        condition(gpu_uuid, "RowRemapFailed", row_remap_failed, "RemapFailed" if row_remap_failed else "NoRemapFailure",
                  "a row remapping failed: the GPU needs service" if row_remap_failed else ""),
        condition(gpu_uuid, "ThermalSlowdown", thermal_slowdown, "Thermal" if thermal_slowdown else "NoSlowdown",
                  "clocks are slowed down for temperature" if thermal_slowdown else ""),
        condition(gpu_uuid, "PowerSlowdown", power_slowdown, "Power" if power_slowdown else "NoSlowdown",
                  "clocks are slowed down for power" if power_slowdown else ""),
    ]

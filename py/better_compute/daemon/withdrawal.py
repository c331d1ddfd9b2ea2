"""Released means withdrawn: taking a device out of the CDI file does not stop a container already
using it, so after applying a spec the daemon stops every process that uses a GPU or MIG instance
the spec no longer grants (issue 13.6).

Level-triggered (P2): what is stopped is computed from the spec and the driver's process list each
time, not from what the previous spec said, so a daemon that restarts mid-withdrawal finishes it.
A process is allowed where the spec grants its place: any process on a GPU booked whole or by
time-slice slots, a process in MIG instance (gi, ci) where the spec books that MIG device. Every
other one is sent SIGTERM, given the spec's grace period (`withdrawal.grace_seconds`, the
database's limit withdrawal_grace_seconds) and then SIGKILL. Those still listed after that are
reported `in_use`; the control plane keeps the next holder of that GPU waiting until a later
acknowledgement reports none (or an operator fences the node: ops.node_fence).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from better_compute.daemon.drivers import InventoryDriver

log = logging.getLogger(__name__)

DEFAULT_GRACE_SECONDS = 30.0  # when a spec carries no policy (a control plane before this one)
MOST_GRACE_SECONDS = 3600.0  # a spec cannot make the daemon wait longer than this (P12)
KILL_WAIT_SECONDS = 5.0  # after SIGKILL, how long the driver may keep listing a process
POLL_SECONDS = 0.2

Place = tuple[str, int | None, int | None]  # (GPU uuid, gi, ci); gi and ci None: the whole GPU


@dataclass(frozen=True)
class Withdrawal:
    """What one withdrawal did: processes stopped, and those still using a place nothing grants."""

    stopped: tuple[dict[str, Any], ...] = ()
    in_use: tuple[dict[str, Any], ...] = ()

    def report(self) -> dict[str, Any]:
        """The `withdrawal` of a node.observed report (compute.node_observed)."""
        return {"stopped": [{"pid": p["pid"], "gpu_uuid": p["gpu_uuid"], "gi": p.get("gi"), "ci": p.get("ci")}
                            for p in self.stopped],
                "in_use": list(self.in_use)}


def grace_seconds(spec: dict[str, Any]) -> float:
    """The spec's grace period, bounded."""
    policy = spec.get("withdrawal")
    grace = policy.get("grace_seconds") if isinstance(policy, dict) else None
    if isinstance(grace, bool) or not isinstance(grace, (int, float)) or grace < 0:
        return DEFAULT_GRACE_SECONDS
    return min(float(grace), MOST_GRACE_SECONDS)


def granted_places(devices: list[Any], inventory: dict[str, Any]) -> set[Place]:
    """Where the spec's bookings allow processes: whole GPUs (gpu and slot bookings) and the (gi, ci)
    of each booked MIG device the inventory has."""
    gpus = {gpu["uuid"]: gpu for gpu in inventory.get("devices", [])}
    places: set[Place] = set()
    for booking in devices:
        if not isinstance(booking, dict) or not isinstance(booking.get("device_uuid"), str):
            continue
        if booking.get("kind") in ("gpu", "slot"):
            places.add((booking["device_uuid"], None, None))
        elif booking.get("kind") == "mig":
            for instance in gpus.get(booking["device_uuid"], {}).get("mig", {}).get("instances", []):
                if instance.get("uuid") == booking.get("mig_uuid") and instance.get("uuid") is not None:
                    places.add((booking["device_uuid"], instance.get("gi"), instance.get("ci")))
    return places


def strays(processes: list[dict[str, Any]], places: set[Place]) -> list[dict[str, Any]]:
    """The processes using a place `places` does not grant."""
    return [p for p in processes
            if (p["gpu_uuid"], None, None) not in places and (p["gpu_uuid"], p.get("gi"), p.get("ci")) not in places]


def mig_uuid(inventory: dict[str, Any], process: dict[str, Any]) -> str | None:
    """The MIG device a process runs in (None outside MIG, or where the inventory does not say)."""
    for gpu in inventory.get("devices", []):
        if gpu["uuid"] == process["gpu_uuid"]:
            for instance in gpu.get("mig", {}).get("instances", []):
                if (instance.get("gi"), instance.get("ci")) == (process.get("gi"), process.get("ci")):
                    return instance.get("uuid")
    return None


def withdraw(driver: InventoryDriver, devices: list[Any], inventory: dict[str, Any], grace: float,
             sleep: Callable[[float], None] = time.sleep, monotonic: Callable[[], float] = time.monotonic) -> Withdrawal:
    """Stop every process on a place `devices` does not grant: SIGTERM, `grace` seconds, SIGKILL."""
    places = granted_places(devices, inventory)
    found = strays(driver.processes(), places)
    if not found:
        return Withdrawal()
    log.warning("withdrawing: %d process(es) use GPUs no booking grants: %s", len(found),
                ", ".join(f"pid {p['pid']} on {p['gpu_uuid']}" for p in found))
    remaining = found
    for force, wait in ((False, grace), (True, KILL_WAIT_SECONDS)):
        if force:
            log.warning("withdrawing: %d process(es) outlived the %gs grace period: killed", len(remaining), grace)
        for process in remaining:
            driver.terminate(process["pid"], force)
        remaining = wait_for_exit(driver, places, {p["pid"] for p in remaining}, wait, sleep, monotonic)
        if not remaining:
            break
    in_use: dict[tuple[str, str | None], list[int]] = {}
    for process in remaining:
        in_use.setdefault((process["gpu_uuid"], mig_uuid(inventory, process)), []).append(process["pid"])
    if in_use:
        log.error("withdrawing: still in use after SIGKILL: %s",
                  ", ".join(f"{gpu} pids {pids}" for (gpu, _), pids in in_use.items()))
    left = {p["pid"] for p in remaining}
    return Withdrawal(stopped=tuple(p for p in found if p["pid"] not in left),
                      in_use=tuple({"gpu_uuid": gpu, "mig_uuid": mig, "pids": pids} for (gpu, mig), pids in in_use.items()))


def wait_for_exit(driver: InventoryDriver, places: set[Place], pids: set[int], seconds: float,
                  sleep: Callable[[float], None], monotonic: Callable[[], float]) -> list[dict[str, Any]]:
    """Those of `pids` the driver still lists on an ungranted place after at most `seconds`."""
    deadline = monotonic() + seconds
    while True:
        remaining = [p for p in strays(driver.processes(), places) if p["pid"] in pids]
        if not remaining or monotonic() >= deadline:
            return remaining
        sleep(POLL_SECONDS)

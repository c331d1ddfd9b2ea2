"""Released means withdrawn: taking a device out of the CDI file does not stop a container already
using it, so after applying a spec the daemon stops every process that uses a GPU or MIG instance
its booking no longer holds (issue 13.6).

A place is a whole GPU (gpu and slot bookings) or one MIG instance (gi, ci) of a GPU. A process
may stay where the spec grants its place to a holder that held it already. It is stopped where no
booking grants its place any more, and where the place was handed over: every holder now is new
(none of the reservations that held it at the last spec applied). NVML does not say whose a process
is, so the processes of a handed-over place are taken as the driver listed them before the new
holder's device was written to the CDI file: none can be the new holder's. Time-slice slots share
a GPU: while one slot holder stays, the processes of one that left cannot be told apart from its
own, and are stopped once no holder of the GPU stays.

Each stray gets SIGTERM, the spec's grace period (`withdrawal.grace_seconds`, the database's limit
withdrawal_grace_seconds), then SIGKILL. Those the driver still lists after that are reported
`in_use`: the control plane keeps the next holder of that GPU waiting until an acknowledgement
reports none (or an operator fenced the node: ops.node_fence). What each place was held by at the
last spec applied is kept in the state directory (`held.json`), so a daemon restarted after the
node was silent still sees the handover.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from better_compute.daemon.drivers import InventoryDriver
from better_compute.daemon.files import write_atomically

log = logging.getLogger(__name__)

DEFAULT_GRACE_SECONDS = 30.0  # when a spec carries no policy (a control plane before this one)
MOST_GRACE_SECONDS = 3600.0  # a spec cannot make the daemon wait longer than this (P12)
KILL_WAIT_SECONDS = 5.0  # after SIGKILL, how long the driver may keep listing a process
POLL_SECONDS = 0.2

HELD_FILE = "held.json"


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


def place_key(gpu: str, gi: int | None = None, ci: int | None = None) -> str:
    """How a place is written in `held.json`: the GPU uuid, with /gi/ci for a MIG instance."""
    return gpu if gi is None else f"{gpu}/{gi}/{ci}"


def held_places(devices: list[Any], inventory: dict[str, Any]) -> dict[str, set[str]]:
    """The places the spec's bookings hold, each with the reservations holding it: whole GPUs (gpu
    and slot bookings) and the (gi, ci) of each booked MIG device the inventory has."""
    gpus = {gpu["uuid"]: gpu for gpu in inventory.get("devices", [])}
    held: dict[str, set[str]] = {}
    for booking in devices:
        if not isinstance(booking, dict) or not isinstance(booking.get("device_uuid"), str):
            continue
        holder = str(booking.get("reservation_id"))
        if booking.get("kind") in ("gpu", "slot"):
            held.setdefault(place_key(booking["device_uuid"]), set()).add(holder)
        elif booking.get("kind") == "mig" and booking.get("mig_uuid") is not None:
            for instance in gpus.get(booking["device_uuid"], {}).get("mig", {}).get("instances", []):
                if instance.get("uuid") == booking["mig_uuid"]:
                    held.setdefault(place_key(booking["device_uuid"], instance.get("gi"), instance.get("ci")),
                                    set()).add(holder)
    return held


def strays(processes: list[dict[str, Any]], now: dict[str, set[str]],
           before: dict[str, set[str]]) -> list[dict[str, Any]]:
    """The processes whose place `now` does not hold, or holds only by holders new since `before`."""
    def kept(key: str) -> bool:
        return key in now and (key not in before or not now[key].isdisjoint(before[key]))
    return [p for p in processes
            if not kept(place_key(p["gpu_uuid"])) and not (p.get("gi") is not None
                                                             and kept(place_key(p["gpu_uuid"], p["gi"], p.get("ci"))))]


def mig_uuid(inventory: dict[str, Any], process: dict[str, Any]) -> str | None:
    """The MIG device a process runs in (None outside MIG, or where the inventory does not say)."""
    for gpu in inventory.get("devices", []):
        if gpu["uuid"] == process["gpu_uuid"]:
            for instance in gpu.get("mig", {}).get("instances", []):
                if (instance.get("gi"), instance.get("ci")) == (process.get("gi"), process.get("ci")):
                    return instance.get("uuid")
    return None


def withdraw(driver: InventoryDriver, found: list[dict[str, Any]], inventory: dict[str, Any], grace: float,
             sleep: Callable[[float], None] = time.sleep, monotonic: Callable[[], float] = time.monotonic) -> Withdrawal:
    """Stop the processes `found` (strays): SIGTERM, `grace` seconds, SIGKILL."""
    if not found:
        return Withdrawal()
    log.warning("withdrawing: %d process(es) use GPUs their booking no longer holds: %s", len(found),
                ", ".join(f"pid {p['pid']} on {p['gpu_uuid']}" for p in found))
    remaining = found
    for force, wait in ((False, grace), (True, KILL_WAIT_SECONDS)):
        if force:
            log.warning("withdrawing: %d process(es) outlived the %gs grace period: killed", len(remaining), grace)
        for process in remaining:
            driver.terminate(process["pid"], force)
        remaining = wait_for_exit(driver, remaining, wait, sleep, monotonic)
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


def wait_for_exit(driver: InventoryDriver, processes: list[dict[str, Any]], seconds: float,
                  sleep: Callable[[float], None], monotonic: Callable[[], float]) -> list[dict[str, Any]]:
    """Those of `processes` the driver still lists (same pid, same place) after at most `seconds`."""
    wanted = {(p["pid"], p["gpu_uuid"], p.get("gi"), p.get("ci")) for p in processes}
    deadline = monotonic() + seconds
    while True:
        remaining = [p for p in driver.processes() if (p["pid"], p["gpu_uuid"], p.get("gi"), p.get("ci")) in wanted]
        if not remaining or monotonic() >= deadline:
            return remaining
        sleep(POLL_SECONDS)


class HeldFile:
    """`held.json` in the state directory: {place: [reservation ids]} at the last spec applied."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> dict[str, set[str]]:
        try:
            return {key: set(holders) for key, holders in json.loads(self.path.read_bytes()).items()}
        except FileNotFoundError:
            return {}
        except (ValueError, AttributeError, TypeError) as error:
            log.warning("%s is unreadable (%s): handovers before this start are not known", self.path, error)
            return {}

    def save(self, held: dict[str, set[str]]) -> None:
        write_atomically(self.path, json.dumps({key: sorted(holders) for key, holders in sorted(held.items())}).encode())

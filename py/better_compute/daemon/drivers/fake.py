"""The fake driver: a recorded inventory document served as if read from GPUs, for tests and demos.

Given a hostname, it becomes that host's document: every GPU (and MIG device) gets a uuid derived
from the hostname, so three fake daemons started from one capture are three nodes with distinct
GPUs, as the control plane requires. The derivation is tests/fleet.py's, so a fake daemon's GPUs
are the ones the Python tests register for the same hostname. It never touches the machine: a
reboot is counted and shows as a new boot id, which is how the control plane sees one end, and the
driver's files (the CDI spec's shared container edits) are read below a directory of the test's
making, or are only the inventory's shared device nodes. Its telemetry readings are deterministic
(derived from each device's index), and a test can set others.

GPU processes are of two sorts: `processes`, recorded entries that `terminate` only forgets, and
`holders`, a JSON file of real processes a test started as if they used a GPU
([{pid, gpu_uuid, gi, ci, used_memory_mib}]), listed while they live and really signalled by
`terminate`. The driver signals no process that file does not name.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import signal
import uuid
from pathlib import Path
from typing import Any

from better_compute.daemon.cdi import CommonEdits
from better_compute.daemon.driverfiles import DriverFiles
from better_compute.daemon.drivers import Reading

MIB = 1 << 20


def derived_uuid(*parts: object) -> uuid.UUID:
    """A stable uuid named by its parts (md5 of 'part/part/…')."""
    return uuid.UUID(hashlib.md5("/".join(map(str, parts)).encode()).hexdigest())


def gpu_uuid(hostname: str, index: int) -> str:
    """The uuid of GPU `index` on fake host `hostname`."""
    return f"GPU-{derived_uuid(hostname, index)}"


def as_host(document: dict[str, Any], hostname: str) -> dict[str, Any]:
    """`document` as host `hostname` would report it: its name, and uuids of its own."""
    result = copy.deepcopy(document) | {"hostname": hostname}
    renamed = {device["uuid"]: gpu_uuid(hostname, device["index"]) for device in result["devices"]}
    for device in result["devices"]:
        device["uuid"] = renamed[device["uuid"]]
        device["nvlink_peers"] = [renamed.get(peer, peer) for peer in device.get("nvlink_peers", [])]
        for instance in device.get("mig", {}).get("instances", []):
            instance["uuid"] = f"MIG-{derived_uuid(hostname, device['index'], instance['gi'], instance['ci'])}"
    return result


class Driver:
    """Serves the inventory document recorded in `path` (JSON), as `hostname` when given, and
    `processes` as the GPU processes."""

    def __init__(self, path: str | Path, hostname: str | None = None,
                 processes: list[dict[str, Any]] | None = None, root: str | Path | None = None,
                 nvidia_ctk: str | None = None, holders: str | Path | None = None) -> None:
        recorded = json.loads(Path(path).read_text(encoding="utf-8"))
        self._document = recorded if hostname is None else as_host(recorded, hostname)
        self._processes = list(processes or [])
        self._holders = None if holders is None else Path(holders)
        self._files = None if root is None else DriverFiles(root=Path(root), nvidia_ctk=nvidia_ctk)
        self.reboots = 0
        # (GPU uuid, MIG uuid or None) -> the reading to report instead of the derived one.
        self.readings: dict[tuple[str, str | None], Reading] = {}

    def collect(self) -> dict[str, Any]:
        return copy.deepcopy(self._document)

    def processes(self) -> list[dict[str, Any]]:
        return copy.deepcopy(self._processes) + [
            {"used_memory_mib": None, "gi": None, "ci": None} | holder for holder in self.holders() if alive(holder["pid"])]

    def holders(self) -> list[dict[str, Any]]:
        """The real processes the `holders` file names (none without one, or before it exists)."""
        if self._holders is None:
            return []
        try:
            return list(json.loads(self._holders.read_text(encoding="utf-8")))
        except FileNotFoundError:
            return []

    def terminate(self, pid: int, force: bool) -> None:
        """Forget a recorded process; signal a real one the holders file names; leave any other."""
        recorded = [process for process in self._processes if process["pid"] != pid]
        if len(recorded) < len(self._processes):
            self._processes = recorded
        elif any(holder["pid"] == pid for holder in self.holders()):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL if force else signal.SIGTERM)

    def common_edits(self, inventory: dict[str, Any]) -> CommonEdits:
        """The driver files below `root` (a directory laid out like a driver installation), asking
        `nvidia_ctk` first where given; without a root, only the shared device nodes: a fake node
        never looks at the machine it runs on."""
        if self._files is None:
            return CommonEdits({"deviceNodes": [{"path": node} for node in inventory.get("shared_device_nodes", [])]})
        return self._files.common_edits(inventory)

    def sample(self) -> list[Reading]:
        """A reading of every GPU and MIG device of the document: the one set in `readings`, else
        one derived from the GPU's index (temperature 30 + index °C, power 100 + index W, …)."""
        found = []
        for device in self._document["devices"]:
            index, gpu = device["index"], device["uuid"]
            found.append(self.readings.get((gpu, None), Reading(
                gpu_uuid=gpu, utilization_ratio=index / 10, memory_used_bytes=index * MIB,
                temperature_celsius=30 + index, power_watts=100 + index, ecc_corrected=0,
                ecc_uncorrected=device["health"]["ecc_uncorrected"], xid_errors=len(device["health"]["xid"]))))
            found += [self.readings.get((gpu, instance["uuid"]), Reading(
                gpu_uuid=gpu, mig_uuid=instance["uuid"], memory_used_bytes=instance["gi"] * MIB))
                for instance in device["mig"]["instances"]]
        return found

    def reboot(self) -> None:
        """Count the reboot and come back with a new boot id, as the rebooted machine would."""
        self.reboots += 1
        self._document["boot_id"] = str(derived_uuid(self._document["hostname"], "boot", self.reboots))


def alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, which its parent has not reaped yet, does not)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False

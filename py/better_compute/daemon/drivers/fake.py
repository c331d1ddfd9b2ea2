"""The fake driver: a recorded inventory document served as if read from GPUs, for tests and demos.

Given a hostname, it becomes that host's document: every GPU (and MIG device) gets a uuid derived
from the hostname, so three fake daemons started from one capture are three nodes with distinct
GPUs, as the control plane requires. The derivation is tests/fleet.py's, so a fake daemon's GPUs
are the ones the Python tests register for the same hostname. It never touches the machine: a
reboot is counted and shows as a new boot id, which is how the control plane sees one end, and the
driver's files (the CDI spec's shared container edits) are read below a directory of the test's
making, or are only the inventory's shared device nodes. Its telemetry readings are deterministic
(derived from each device's index), and a test can set others.

MIG and health (issue 13): the fake GPUs' MIG state (mode, a mode pending a reset, GPU and compute
instances) and the faults a test injects live in a JSON file (`gpu_state`), written atomically after
every call, as a GPU keeps its state when the daemon using it is killed. Calls fail the way the real
ones do: InsufficientResources (a placement taken, or the fault), InUse (a process in the instance,
or the fault), a MIG mode change that waits for a reset (`needs_reset`), ResetRefused (a process on
the GPU). Health faults per GPU: xid (a list of Xid numbers: 79 is fallen off the bus),
ecc_uncorrectable, row_remap_pending, row_remap_failed, thermal_slowdown, power_slowdown, lost.

GPU processes are of two sorts: `processes` (and those of the state file), entries that `terminate`
only forgets, and `holders`, a JSON file of real processes a test started as if they used a GPU
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
import time
import uuid
from pathlib import Path
from typing import Any

from better_compute.daemon.cdi import CommonEdits
from better_compute.daemon.driverfiles import DriverFiles
from better_compute.daemon.drivers import Reading
from better_compute.daemon.files import write_atomically
from better_compute.daemon.health import health_conditions
from better_compute.daemon.mig import DISABLED, ENABLED, GpuInstance, MigError, MigState

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
                 nvidia_ctk: str | None = None, gpu_state: str | Path | None = None, mig_delay: str | float = 0,
                 holders: str | Path | None = None) -> None:
        recorded = json.loads(Path(path).read_text(encoding="utf-8"))
        self._document = recorded if hostname is None else as_host(recorded, hostname)
        self._processes = list(processes or [])
        self._holders = None if holders is None else Path(holders)
        self._state_path = None if gpu_state is None else Path(gpu_state)
        self._state: dict[str, Any] = self._initial_state()
        self._mig_delay = float(mig_delay)  # seconds each MIG call takes (a chaos test kills the daemon within)
        self._files = None if root is None else DriverFiles(root=Path(root), nvidia_ctk=nvidia_ctk)
        self.reboots = 0
        # (GPU uuid, MIG uuid or None) -> the reading to report instead of the derived one.
        self.readings: dict[tuple[str, str | None], Reading] = {}

    def collect(self) -> dict[str, Any]:
        """The recorded document with the fake GPUs' MIG state now: one instance entry per compute
        instance, as the real drivers list MIG devices."""
        document = copy.deepcopy(self._document)
        state = self.load()
        for device in document["devices"]:
            gpu = state["gpus"].get(device["uuid"])
            if gpu is None or "mig" not in device:
                continue
            device["mig"]["mode"] = gpu["mode"]
            device["mig"]["instances"] = [
                {"profile": gi["profile"], "placement": gi["placement"], "gi": gi["gi"], "ci": ci,
                 "uuid": f"MIG-{derived_uuid(document['hostname'], device['index'], gi['gi'], ci)}",
                 "device_nodes": [f"/dev/nvidia-caps/nvidia-cap{device['index'] * 1000 + gi['gi'] * 10 + 1}",
                                  f"/dev/nvidia-caps/nvidia-cap{device['index'] * 1000 + gi['gi'] * 10 + 2 + ci}"]}
                for gi in sorted(gpu["instances"], key=lambda gi: (gi["placement"], gi["gi"])) for ci in gi["cis"]
            ] if gpu["mode"] == ENABLED else []
        return document

    def processes(self) -> list[dict[str, Any]]:
        return copy.deepcopy(self._running(self.load()))

    def _running(self, state: dict[str, Any]) -> list[dict[str, Any]]:
        """The GPU processes: recorded, started by a test in the state file, and the living holders."""
        return self._processes + state.get("processes", []) + [
            {"used_memory_mib": None, "gi": None, "ci": None} | holder for holder in self.holders() if alive(holder["pid"])]

    # -- the fake GPUs' state (MIG, faults, processes started by a test) --------------------------

    def _initial_state(self) -> dict[str, Any]:
        if self._state_path is not None and self._state_path.exists():
            return json.loads(self._state_path.read_text(encoding="utf-8"))
        gpus = {}
        for device in self._document["devices"]:
            mig = device.get("mig", {})
            by_gi: dict[int, dict[str, Any]] = {}
            for instance in mig.get("instances", []):
                by_gi.setdefault(instance["gi"], {"gi": instance["gi"], "profile": instance["profile"],
                                                  "placement": instance["placement"], "cis": []})["cis"].append(instance["ci"])
            gpus[device["uuid"]] = {"mode": mig.get("mode", DISABLED), "pending": None, "instances": list(by_gi.values())}
        state = {"gpus": gpus, "faults": {}, "processes": []}
        self.save(state)
        return state

    def load(self) -> dict[str, Any]:
        """The fake GPUs' state (from its file, which a test may have changed)."""
        if self._state_path is not None:
            self._state = json.loads(self._state_path.read_text(encoding="utf-8"))
        return self._state

    def save(self, state: dict[str, Any]) -> None:
        self._state = state
        if self._state_path is not None:
            write_atomically(self._state_path, json.dumps(state, indent=1).encode())

    def inject(self, gpu_uuid: str, **faults: Any) -> None:
        """Set (or, with None, clear) faults of one GPU."""
        state = self.load()
        mine = state["faults"].setdefault(gpu_uuid, {})
        for name, value in faults.items():
            if value is None:
                mine.pop(name, None)
            else:
                mine[name] = value
        self.save(state)

    def _gpu(self, state: dict[str, Any], gpu_uuid: str) -> dict[str, Any]:
        gpu = state["gpus"].get(gpu_uuid)
        if gpu is None:
            raise MigError("NotFound", f"no GPU {gpu_uuid}")
        if self._fault(state, gpu_uuid, "lost"):
            raise MigError("GpuIsLost", f"GPU {gpu_uuid} is lost (fallen off the bus)")
        return gpu

    @staticmethod
    def _fault(state: dict[str, Any], gpu_uuid: str, name: str) -> Any:
        return state["faults"].get(gpu_uuid, {}).get(name)

    def _busy(self, state: dict[str, Any], gpu_uuid: str, gi: int | None = None) -> list[int]:
        return [p["pid"] for p in self._running(state)
                if p.get("gpu_uuid") == gpu_uuid and (gi is None or p.get("gi") == gi)]

    def _call(self) -> dict[str, Any]:
        if self._mig_delay:
            time.sleep(self._mig_delay)
        return self.load()

    def mig_state(self, gpu_uuid: str) -> MigState:
        gpu = self._gpu(self.load(), gpu_uuid)
        return MigState(mode=gpu["mode"], pending=gpu["pending"],
                        instances=tuple(GpuInstance(gi["gi"], gi["profile"], gi["placement"], tuple(gi["cis"]))
                                        for gi in gpu["instances"]))

    def set_mig_mode(self, gpu_uuid: str, enabled: bool) -> None:
        state = self._call()
        gpu = self._gpu(state, gpu_uuid)
        mode = ENABLED if enabled else DISABLED
        if gpu["instances"]:
            raise MigError("InUse", f"GPU {gpu_uuid} has GPU instances: destroy them before changing the MIG mode")
        if mode == gpu["mode"]:
            gpu["pending"] = None
        elif self._fault(state, gpu_uuid, "needs_reset") or self._busy(state, gpu_uuid):
            gpu["pending"] = mode  # as NVML's activationStatus: the change waits for a GPU reset
        else:
            gpu["mode"], gpu["pending"] = mode, None
        self.save(state)

    def reset_gpu(self, gpu_uuid: str) -> None:
        state = self._call()
        gpu = self._gpu(state, gpu_uuid)
        if busy := self._busy(state, gpu_uuid):
            raise MigError("ResetRefused", f"GPU {gpu_uuid} cannot be reset: processes {busy} use it")
        if gpu["pending"] is not None:
            gpu["mode"], gpu["pending"] = gpu["pending"], None
        self.save(state)

    def create_gpu_instance(self, gpu_uuid: str, profile: str, placement: int) -> int:
        state = self._call()
        gpu = self._gpu(state, gpu_uuid)
        if gpu["mode"] != ENABLED or gpu["pending"] is not None:
            raise MigError("NotInMigMode", f"GPU {gpu_uuid} is not in MIG mode")
        found = next((p for d in self._document["devices"] if d["uuid"] == gpu_uuid
                      for p in d["mig"]["profiles"] if p["name"] == profile), None)
        if found is None or placement not in found["placements"]:
            raise MigError("InvalidArgument", f"profile {profile} cannot be placed at {placement} on GPU {gpu_uuid}")
        sizes = {p["name"]: p["slices"] for d in self._document["devices"] if d["uuid"] == gpu_uuid for p in d["mig"]["profiles"]}
        taken = {s for gi in gpu["instances"] for s in range(gi["placement"], gi["placement"] + sizes[gi["profile"]])}
        wanted = set(range(placement, placement + found["slices"]))
        if self._fault(state, gpu_uuid, "insufficient_resources") or taken & wanted:
            raise MigError("InsufficientResources", f"Insufficient Resources: {profile}@{placement} on GPU {gpu_uuid}")
        gi = 1 + max((g["gi"] for g in gpu["instances"]), default=0)
        gpu["instances"].append({"gi": gi, "profile": profile, "placement": placement, "cis": []})
        self.save(state)
        return gi

    def create_compute_instance(self, gpu_uuid: str, gi: int) -> int:
        state = self._call()
        instance = self._instance(state, gpu_uuid, gi)
        if instance["cis"]:
            raise MigError("InsufficientResources", f"GPU instance {gi} of GPU {gpu_uuid} has its compute instance")
        instance["cis"].append(0)
        self.save(state)
        return 0

    def destroy_compute_instance(self, gpu_uuid: str, gi: int, ci: int) -> None:
        state = self._call()
        instance = self._instance(state, gpu_uuid, gi)
        if self._fault(state, gpu_uuid, "in_use") or self._busy(state, gpu_uuid, gi):
            raise MigError("InUse", f"In use by another client: compute instance {ci} of GPU instance {gi} of GPU {gpu_uuid}")
        instance["cis"] = [c for c in instance["cis"] if c != ci]
        self.save(state)

    def destroy_gpu_instance(self, gpu_uuid: str, gi: int) -> None:
        state = self._call()
        instance = self._instance(state, gpu_uuid, gi)
        if self._fault(state, gpu_uuid, "in_use") or self._busy(state, gpu_uuid, gi) or instance["cis"]:
            raise MigError("InUse", f"In use by another client: GPU instance {gi} of GPU {gpu_uuid}")
        gpu = state["gpus"][gpu_uuid]
        gpu["instances"] = [g for g in gpu["instances"] if g["gi"] != gi]
        self.save(state)

    def _instance(self, state: dict[str, Any], gpu_uuid: str, gi: int) -> dict[str, Any]:
        found = next((g for g in self._gpu(state, gpu_uuid)["instances"] if g["gi"] == gi), None)
        if found is None:
            raise MigError("NotFound", f"no GPU instance {gi} on GPU {gpu_uuid}")
        return found

    def health(self) -> list[dict[str, Any]]:
        """Each GPU's health conditions from the faults injected."""
        state = self.load()
        return [condition for device in self._document["devices"]
                for condition in health_conditions(device["uuid"], **state["faults"].get(device["uuid"], {}))]

    def holders(self) -> list[dict[str, Any]]:
        """The real processes the `holders` file names (none without one, or before it exists)."""
        if self._holders is None:
            return []
        try:
            return list(json.loads(self._holders.read_text(encoding="utf-8")))
        except FileNotFoundError:
            return []

    def terminate(self, pid: int, force: bool) -> None:
        """Forget a recorded process (or one of the state file's); signal a real one the holders file
        names; leave any other."""
        recorded = [process for process in self._processes if process["pid"] != pid]
        state = self.load()
        kept = [process for process in state.get("processes", []) if process["pid"] != pid]
        if len(recorded) < len(self._processes):
            self._processes = recorded
        elif len(kept) < len(state.get("processes", [])):
            self.save(state | {"processes": kept})
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
